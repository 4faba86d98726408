//! A NIC's channel counts (its queues) over the kernel's ethtool netlink family, what `ethtool
//! -l` reads and `ethtool -L` sets (Documentation/networking/ethtool-netlink.rst, CHANNELS_GET
//! and CHANNELS_SET; RINGS_GET for the receive ring), through rust-netlink's `ethtool` crate on a one-off current-thread runtime.

use crate::host::{Channels, ReadError, WriteError};
use ethtool::EthtoolAttr::Channel;
use ethtool::EthtoolChannelAttr as A;
use futures_util::TryStreamExt;

fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread().enable_io().build()
}

/// The counts and maxima; `ReadError::Unsupported` when the driver has no channels (loopback,
/// some virtual links answer EOPNOTSUPP) or the kernel has no ethtool netlink family (< 5.6).
pub fn channels(nic: &str) -> Result<Channels, ReadError> {
    let rt = runtime().map_err(|e| ReadError::Other(format!("ethtool netlink: {e}")))?;
    rt.block_on(async {
        let (conn, mut handle, _) = ethtool::new_connection()
            .map_err(|e| ReadError::Other(format!("ethtool netlink socket: {e}")))?;
        tokio::spawn(conn);
        let mut stream = handle
            .channel()
            .get(Some(nic))
            .execute()
            .await
            .map_err(|e| unsupported(nic, &e.to_string()))?;
        let msg = stream
            .try_next()
            .await
            .map_err(|e| unsupported(nic, &e.to_string()))?
            .ok_or_else(|| unsupported(nic, "no answer"))?;
        let mut c = Channels::default();
        for nla in &msg.payload.nlas {
            if let Channel(a) = nla {
                match a {
                    A::RxCount(n) => c.rx = *n,
                    A::TxCount(n) => c.tx = *n,
                    A::CombinedCount(n) => c.combined = *n,
                    A::RxMax(n) => c.max_rx = *n,
                    A::TxMax(n) => c.max_tx = *n,
                    A::CombinedMax(n) => c.max_combined = *n,
                    _ => {}
                }
            }
        }
        Ok(c)
    })
}

/// The receive ring's size now and the hardware's maximum (`ethtool -g`).
pub fn rx_ring(nic: &str) -> Result<(u32, u32), ReadError> {
    use ethtool::EthtoolRingAttr as R;
    let rt = runtime().map_err(|e| ReadError::Other(format!("ethtool netlink: {e}")))?;
    rt.block_on(async {
        let (conn, mut handle, _) = ethtool::new_connection()
            .map_err(|e| ReadError::Other(format!("ethtool netlink socket: {e}")))?;
        tokio::spawn(conn);
        let mut stream = handle
            .ring()
            .get(Some(nic))
            .execute()
            .await
            .map_err(|e| unsupported(nic, &e.to_string()))?;
        let msg = stream
            .try_next()
            .await
            .map_err(|e| unsupported(nic, &e.to_string()))?
            .ok_or_else(|| unsupported(nic, "no answer"))?;
        let (mut now, mut max) = (0, 0);
        for nla in &msg.payload.nlas {
            match nla {
                ethtool::EthtoolAttr::Ring(R::Rx(n)) => now = *n,
                ethtool::EthtoolAttr::Ring(R::RxMax(n)) => max = *n,
                _ => {}
            }
        }
        if max == 0 {
            return Err(unsupported(nic, "the driver reports no receive ring"));
        }
        Ok((now, max))
    })
}

fn unsupported(nic: &str, e: &str) -> ReadError {
    ReadError::Unsupported(format!(
        "{nic}'s channel counts cannot be read over ethtool netlink ({e})"
    ))
}

/// Set the receive, transmit and combined counts given (None: left as they are).
pub fn set_channels(
    nic: &str,
    rx: Option<u32>,
    tx: Option<u32>,
    combined: Option<u32>,
) -> Result<(), WriteError> {
    let rt = runtime().map_err(|e| WriteError::Other(format!("ethtool netlink: {e}")))?;
    rt.block_on(async {
        let (conn, mut handle, _) = ethtool::new_connection()
            .map_err(|e| WriteError::Other(format!("ethtool netlink socket: {e}")))?;
        tokio::spawn(conn);
        let mut req = handle.channel().set(nic);
        if let Some(n) = rx {
            req = req.rx_count(n);
        }
        if let Some(n) = tx {
            req = req.tx_count(n);
        }
        if let Some(n) = combined {
            req = req.combined_count(n);
        }
        req.execute().await.map_err(|e| {
            let text = e.to_string();
            if text.contains("Operation not permitted") || text.contains("EPERM") {
                WriteError::Denied(format!("{nic}'s channels (CAP_NET_ADMIN)"))
            } else {
                WriteError::Other(format!(
                    "the kernel refused {nic}'s channel counts (rx {rx:?}, tx {tx:?}, combined {combined:?}): {text}"
                ))
            }
        })
    })
}
