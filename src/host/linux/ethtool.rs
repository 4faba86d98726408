//! A NIC's channel counts (its queues) and receive ring over the kernel's ethtool netlink
//! family: what `ethtool -l` and `-g` read and `ethtool -L` and `-G` set
//! (Documentation/networking/ethtool-netlink.rst: CHANNELS_GET, CHANNELS_SET, RINGS_GET,
//! RINGS_SET), through rust-netlink's `ethtool` crate on a one-off current-thread runtime.
//! That crate has no RINGS_SET: [`RingsSet`] is our own generic-netlink message, sent on the
//! same connection.

use crate::host::{Channels, ReadError, WriteError};
use ethtool::{EthtoolAttr, EthtoolChannelAttr as C, EthtoolRingAttr as R};
use ethtool::{EthtoolError, EthtoolHandle};
use futures_util::{Stream, StreamExt, TryStreamExt};

/// Run `f` with a fresh ethtool netlink connection; `err` makes this module's errors. On a
/// one-off current-thread runtime, which cannot start inside another: called from one (`serve`
/// checks the host at start), it runs on a thread of its own.
fn with_handle<T, E, Fut>(
    err: impl Fn(String) -> E + Send,
    f: impl FnOnce(EthtoolHandle) -> Fut + Send,
) -> Result<T, E>
where
    Fut: std::future::Future<Output = Result<T, E>>,
    T: Send,
    E: Send,
{
    let run = move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .map_err(|e| err(format!("ethtool netlink: {e}")))?;
        rt.block_on(async {
            let (conn, handle, _) = ethtool::new_connection()
                .map_err(|e| err(format!("ethtool netlink socket: {e}")))?;
            tokio::spawn(conn);
            f(handle).await
        })
    };
    if tokio::runtime::Handle::try_current().is_err() {
        return run();
    }
    std::thread::scope(|s| {
        s.spawn(run)
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
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

/// The receive interrupt coalescing (`ethtool -c`): COALESCE_GET.
pub fn coalesce(nic: &str) -> Result<crate::host::Coalesce, ReadError> {
    use ethtool::EthtoolCoalesceAttr as K;
    with_handle(ReadError::Other, |mut h| async move {
        let mut c = crate::host::Coalesce::default();
        let msg = reply(nic, h.coalesce().get(Some(nic)).execute().await).await?;
        let mut any = false;
        for nla in msg.payload.nlas {
            match nla {
                EthtoolAttr::Coalesce(K::UseAdaptiveRx(b)) => (c.adaptive_rx, any) = (b, true),
                EthtoolAttr::Coalesce(K::RxUsecs(n)) => (c.rx_usecs, any) = (n, true),
                EthtoolAttr::Coalesce(K::RxMaxFrames(n)) => (c.rx_max_frames, any) = (n, true),
                _ => {}
            }
        }
        if !any {
            return Err(unsupported(nic, "the driver reports no receive coalescing"));
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
                    "the kernel refused {nic}'s channel counts ({}): {text}",
                    counts_words(rx, tx, combined)
                ))
            }
        })
    })
}

/// The counts asked for, as `ethtool -L` takes them: `rx 1, tx 1` (those left as they are
/// not named).
fn counts_words(rx: Option<u32>, tx: Option<u32>, combined: Option<u32>) -> String {
    [("rx", rx), ("tx", tx), ("combined", combined)]
        .iter()
        .filter_map(|(k, v)| v.map(|v| format!("{k} {v}")))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Set the receive ring's size (`ethtool -G NIC rx N`). The driver reallocates the ring: the
/// link drops for a moment.
pub fn set_rx_ring(nic: &str, rx: u32) -> Result<(), WriteError> {
    use netlink_packet_core::{NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_REQUEST};
    use netlink_packet_generic::GenlMessage;
    let denied = |code: i32| code == -libc::EPERM || code == -libc::EACCES;
    with_handle(WriteError::Other, |mut h| async move {
        let mut msg = NetlinkMessage::from(GenlMessage::from_payload(RingsSet {
            dev: nic.to_string(),
            rx,
        }));
        msg.header.flags = NLM_F_REQUEST | NLM_F_ACK;
        let refused = |text: String| {
            WriteError::Other(format!(
                "the kernel refused {nic}'s receive ring size {rx}: {text}"
            ))
        };
        let mut replies = std::pin::pin!(h
            .handle
            .request(msg)
            .await
            .map_err(|e| refused(e.to_string()))?);
        while let Some(reply) = replies.next().await {
            let reply = reply.map_err(|e| refused(e.to_string()))?;
            if let NetlinkPayload::Error(e) = reply.payload {
                let code = e.raw_code();
                if code == 0 {
                    continue;
                }
                return Err(if denied(code) {
                    WriteError::Denied(format!("{nic}'s receive ring (CAP_NET_ADMIN)"))
                } else {
                    refused(e.to_io().to_string())
                });
            }
        }
        Ok(())
    })
}

/// uapi ethtool_netlink.h: the message (userspace to kernel) and attribute numbers RINGS_SET
/// uses (Documentation/networking/ethtool-netlink.rst, "RINGS_SET").
const ETHTOOL_MSG_RINGS_SET: u8 = 16;
const ETHTOOL_GENL_VERSION: u8 = 1;
const ETHTOOL_A_RINGS_HEADER: u16 = 1;
const ETHTOOL_A_RINGS_RX: u16 = 6;
const ETHTOOL_A_HEADER_DEV_NAME: u16 = 2;
const NLA_F_NESTED: u16 = 0x8000;
const NLA_HDRLEN: usize = 4;

/// RINGS_SET with only the receive ring: the nested request header naming the device
/// (ETHTOOL_A_RINGS_HEADER { ETHTOOL_A_HEADER_DEV_NAME }), then ETHTOOL_A_RINGS_RX. The other
/// rings are absent, so the kernel leaves them as they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingsSet {
    pub dev: String,
    pub rx: u32,
}

fn nla_align(n: usize) -> usize {
    (n + 3) & !3
}

impl RingsSet {
    /// The device name attribute, NUL-terminated, padded.
    fn name_len(&self) -> usize {
        nla_align(NLA_HDRLEN + self.dev.len() + 1)
    }
}

impl netlink_packet_generic::GenlFamily for RingsSet {
    fn family_name() -> &'static str {
        "ethtool"
    }
    fn command(&self) -> u8 {
        ETHTOOL_MSG_RINGS_SET
    }
    fn version(&self) -> u8 {
        ETHTOOL_GENL_VERSION
    }
}

impl netlink_packet_core::Emitable for RingsSet {
    fn buffer_len(&self) -> usize {
        NLA_HDRLEN + self.name_len() + NLA_HDRLEN + 4
    }

    fn emit(&self, buf: &mut [u8]) {
        let put = |buf: &mut [u8], at: usize, len: usize, kind: u16| {
            buf[at..at + 2].copy_from_slice(&(len as u16).to_ne_bytes());
            buf[at + 2..at + 4].copy_from_slice(&kind.to_ne_bytes());
        };
        let header = NLA_HDRLEN + self.name_len();
        buf[..self.buffer_len()].fill(0);
        put(buf, 0, header, ETHTOOL_A_RINGS_HEADER | NLA_F_NESTED);
        put(
            buf,
            NLA_HDRLEN,
            NLA_HDRLEN + self.dev.len() + 1,
            ETHTOOL_A_HEADER_DEV_NAME,
        );
        let name = 2 * NLA_HDRLEN;
        buf[name..name + self.dev.len()].copy_from_slice(self.dev.as_bytes());
        put(buf, header, NLA_HDRLEN + 4, ETHTOOL_A_RINGS_RX);
        buf[header + NLA_HDRLEN..header + NLA_HDRLEN + 4].copy_from_slice(&self.rx.to_ne_bytes());
    }
}

/// The kernel answers RINGS_SET with an acknowledgement only; a message of this family that
/// arrives anyway is read for the two attributes this type knows.
impl netlink_packet_core::ParseableParametrized<[u8], netlink_packet_generic::GenlHeader>
    for RingsSet
{
    fn parse_with_param(
        buf: &[u8],
        _header: netlink_packet_generic::GenlHeader,
    ) -> Result<Self, netlink_packet_core::DecodeError> {
        let mut out = RingsSet {
            dev: String::new(),
            rx: 0,
        };
        let attrs = |buf: &[u8]| -> Vec<(u16, Vec<u8>)> {
            let mut v = Vec::new();
            let mut at = 0;
            while at + NLA_HDRLEN <= buf.len() {
                let len = u16::from_ne_bytes([buf[at], buf[at + 1]]) as usize;
                let kind = u16::from_ne_bytes([buf[at + 2], buf[at + 3]]) & !NLA_F_NESTED;
                if len < NLA_HDRLEN || at + len > buf.len() {
                    break;
                }
                v.push((kind, buf[at + NLA_HDRLEN..at + len].to_vec()));
                at += nla_align(len);
            }
            v
        };
        for (kind, value) in attrs(buf) {
            match kind {
                ETHTOOL_A_RINGS_HEADER => {
                    for (k, v) in attrs(&value) {
                        if k == ETHTOOL_A_HEADER_DEV_NAME {
                            let end = v.iter().position(|b| *b == 0).unwrap_or(v.len());
                            out.dev = String::from_utf8_lossy(&v[..end]).into_owned();
                        }
                    }
                }
                ETHTOOL_A_RINGS_RX if value.len() == 4 => {
                    out.rx = u32::from_ne_bytes([value[0], value[1], value[2], value[3]]);
                }
                _ => {}
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netlink_packet_core::{Emitable, ParseableParametrized};
    use netlink_packet_generic::{GenlFamily, GenlHeader};

    /// What the kernel refused is said in ethtool's words, never as Rust's `Some(1)`.
    #[test]
    fn refused_counts_are_named_as_ethtool_takes_them() {
        assert_eq!(counts_words(Some(1), Some(2), None), "rx 1, tx 2");
        assert_eq!(counts_words(None, None, Some(8)), "combined 8");
    }

    /// `serve` checks the host from inside its runtime: a query there runs on a thread of its
    /// own and answers what it answers outside (it used to panic: a runtime inside a runtime).
    #[test]
    fn a_query_from_inside_a_runtime_answers_as_outside_one() {
        let outside = format!("{:?}", coalesce("lo"));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let inside = rt.block_on(async { format!("{:?}", coalesce("lo")) });
        assert_eq!(inside, outside);
    }

    /// The bytes RINGS_SET carries, attribute by attribute as ethtool-netlink.rst lays them
    /// out: a nested header (type 1 with NLA_F_NESTED) holding the NUL-terminated device name
    /// (type 2, padded to 4 bytes), then the receive ring as a u32 (type 6).
    #[test]
    fn rings_set_emits_the_nested_header_with_the_name_then_the_rx_size() {
        let m = RingsSet {
            dev: "eth0".into(),
            rx: 4096,
        };
        assert_eq!((m.command(), m.version()), (16, 1));
        assert_eq!(RingsSet::family_name(), "ethtool");
        let mut buf = vec![0xAAu8; m.buffer_len()];
        m.emit(&mut buf);
        let mut want: Vec<u8> = Vec::new();
        let nla = |w: &mut Vec<u8>, len: u16, kind: u16| {
            w.extend(len.to_ne_bytes());
            w.extend(kind.to_ne_bytes());
        };
        nla(&mut want, 4 + 12, 0x8001);
        nla(&mut want, 4 + 5, 2);
        want.extend(b"eth0\0\0\0\0");
        nla(&mut want, 8, 6);
        want.extend(4096u32.to_ne_bytes());
        assert_eq!(buf, want);
        // A name that fills its attribute exactly needs no padding; the longest the kernel
        // allows (15 bytes) gets its NUL and no more.
        let long = RingsSet {
            dev: "enp59s0f1np1xyz".into(),
            rx: 1,
        };
        assert_eq!(long.buffer_len(), 4 + 20 + 8);
        let mut buf = vec![0u8; long.buffer_len()];
        long.emit(&mut buf);
        assert_eq!(&buf[8..24], b"enp59s0f1np1xyz\0");
        // And it reads back what it wrote.
        let header = GenlHeader {
            cmd: 16,
            version: 1,
        };
        assert_eq!(RingsSet::parse_with_param(&buf, header).unwrap(), long);
    }
}
