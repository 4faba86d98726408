//! A NIC's channel counts (its queues) and receive ring over the kernel's ethtool netlink
//! family: what `ethtool -l` and `-g` read and `ethtool -L` sets
//! (Documentation/networking/ethtool-netlink.rst: CHANNELS_GET, CHANNELS_SET, RINGS_GET),
//! through rust-netlink's `ethtool` crate on a one-off current-thread runtime.

use crate::host::{Channels, ReadError, WriteError};
use ethtool::{EthtoolAttr, EthtoolChannelAttr as C, EthtoolRingAttr as R};
use ethtool::{EthtoolError, EthtoolHandle};
use futures_util::{Stream, TryStreamExt};

/// Run `f` with a fresh ethtool netlink connection; `err` makes this module's errors.
fn with_handle<T, E, Fut>(
    err: impl Fn(String) -> E,
    f: impl FnOnce(EthtoolHandle) -> Fut,
) -> Result<T, E>
where
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .map_err(|e| err(format!("ethtool netlink: {e}")))?;
    rt.block_on(async {
        let (conn, handle, _) =
            ethtool::new_connection().map_err(|e| err(format!("ethtool netlink socket: {e}")))?;
        tokio::spawn(conn);
        f(handle).await
    })
}

/// The one reply a GET for one NIC gets.
async fn reply<M>(
    nic: &str,
    stream: Result<impl Stream<Item = Result<M, EthtoolError>>, EthtoolError>,
) -> Result<M, ReadError> {
    let mut stream = std::pin::pin!(stream.map_err(|e| unsupported(nic, &e.to_string()))?);
    stream
        .try_next()
        .await
        .map_err(|e| unsupported(nic, &e.to_string()))?
        .ok_or_else(|| unsupported(nic, "no answer"))
}

/// The counts and maxima; `ReadError::Unsupported` when the driver has no channels (loopback,
/// some virtual links answer EOPNOTSUPP) or the kernel has no ethtool netlink family (< 5.6).
pub fn channels(nic: &str) -> Result<Channels, ReadError> {
    with_handle(ReadError::Other, |mut h| async move {
        let mut c = Channels::default();
        let msg = reply(nic, h.channel().get(Some(nic)).execute().await).await?;
        for nla in msg.payload.nlas {
            match nla {
                EthtoolAttr::Channel(C::RxCount(n)) => c.rx = n,
                EthtoolAttr::Channel(C::TxCount(n)) => c.tx = n,
                EthtoolAttr::Channel(C::CombinedCount(n)) => c.combined = n,
                EthtoolAttr::Channel(C::RxMax(n)) => c.max_rx = n,
                EthtoolAttr::Channel(C::TxMax(n)) => c.max_tx = n,
                EthtoolAttr::Channel(C::CombinedMax(n)) => c.max_combined = n,
                _ => {}
            }
        }
        Ok(c)
    })
}

/// The receive ring's size now and the hardware's maximum (`ethtool -g`).
pub fn rx_ring(nic: &str) -> Result<(u32, u32), ReadError> {
    with_handle(ReadError::Other, |mut h| async move {
        let (mut now, mut max) = (0, 0);
        let msg = reply(nic, h.ring().get(Some(nic)).execute().await).await?;
        for nla in msg.payload.nlas {
            match nla {
                EthtoolAttr::Ring(R::Rx(n)) => now = n,
                EthtoolAttr::Ring(R::RxMax(n)) => max = n,
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
        "{nic}'s ethtool settings cannot be read over ethtool netlink ({e})"
    ))
}

/// Set the receive, transmit and combined counts given (None: left as they are).
pub fn set_channels(
    nic: &str,
    rx: Option<u32>,
    tx: Option<u32>,
    combined: Option<u32>,
) -> Result<(), WriteError> {
    with_handle(WriteError::Other, |mut h| async move {
        let mut req = h.channel().set(nic);
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
