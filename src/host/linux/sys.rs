//! Linux-only pieces of the live backend: the link list over rtnetlink (what this network
//! namespace really has, unlike /sys/class/net, which shows the namespace sysfs was mounted in)
//! and the page size.

use super::{Link, ReadError, WriteError};
use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_route::link::{LinkAttribute, LinkFlags, LinkMessage};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

pub fn live_page_size() -> u64 {
    procfs::page_size()
}

pub fn raise_nofile() -> (u64, u64) {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: r is a valid out-pointer.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            let want = libc::rlimit {
                rlim_cur: r.rlim_max,
                rlim_max: r.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &want) == 0 {
                r.rlim_cur = r.rlim_max;
            }
        }
    }
    (r.rlim_cur, r.rlim_max)
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// RLIMIT_NOFILE of another process, through prlimit(2) (what `prlimit --pid` does).
pub fn prlimit_nofile(pid: u32, soft: u64, hard: u64) -> Result<(), WriteError> {
    let new = libc::rlimit {
        rlim_cur: soft as libc::rlim_t,
        rlim_max: hard as libc::rlim_t,
    };
    // SAFETY: `new` is a valid rlimit, the old-limit pointer may be null.
    let rc = unsafe {
        libc::prlimit(
            pid as libc::pid_t,
            libc::RLIMIT_NOFILE,
            &new,
            std::ptr::null_mut(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        let e = std::io::Error::last_os_error();
        Err(WriteError::from_io(
            &format!("the nofile limit of process {pid}"),
            &format!("{soft}:{hard}"),
            &e,
        ))
    }
}

/// Dump every link with RTM_GETLINK. Loopback is left out: it has no queues worth checking.
pub fn netlink_links() -> Result<Vec<Link>, ReadError> {
    let err = |what: &str, e: std::io::Error| ReadError::Other(format!("netlink {what}: {e}"));
    let mut socket = Socket::new(NETLINK_ROUTE).map_err(|e| err("socket", e))?;
    socket.bind_auto().map_err(|e| err("bind", e))?;
    socket
        .connect(&SocketAddr::new(0, 0))
        .map_err(|e| err("connect", e))?;

    let mut req = NetlinkMessage::new(
        NetlinkHeader::default(),
        NetlinkPayload::from(RouteNetlinkMessage::GetLink(LinkMessage::default())),
    );
    req.header.flags = NLM_F_DUMP | NLM_F_REQUEST;
    req.header.sequence_number = 1;
    req.finalize();
    let mut buf = vec![0; req.buffer_len()];
    req.serialize(&mut buf);
    socket.send(&buf, 0).map_err(|e| err("send", e))?;

    let mut links = Vec::new();
    let mut rx = vec![0u8; 64 * 1024];
    loop {
        let n = socket
            .recv(&mut &mut rx[..], 0)
            .map_err(|e| err("recv", e))?;
        let mut offset = 0;
        while offset < n {
            let msg: NetlinkMessage<RouteNetlinkMessage> =
                NetlinkMessage::deserialize(&rx[offset..n])
                    .map_err(|e| ReadError::Other(format!("netlink: cannot parse a reply: {e}")))?;
            let len = msg.header.length as usize;
            match msg.payload {
                NetlinkPayload::Done(_) => return Ok(links),
                NetlinkPayload::Error(e) => {
                    return Err(ReadError::Other(format!("netlink: {e:?}")))
                }
                NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewLink(m)) => {
                    if m.header.flags.contains(LinkFlags::Loopback) {
                        // not a NIC
                    } else {
                        let mut link = Link {
                            name: String::new(),
                            physical: false,
                            rx_queues: None,
                            tx_queues: None,
                            registry_key: None,
                        };
                        for a in m.attributes {
                            match a {
                                LinkAttribute::IfName(n) => link.name = n,
                                LinkAttribute::NumRxQueues(q) => link.rx_queues = Some(q),
                                LinkAttribute::NumTxQueues(q) => link.tx_queues = Some(q),
                                _ => {}
                            }
                        }
                        links.push(link);
                    }
                }
                _ => {}
            }
            if len == 0 {
                break;
            }
            offset += len;
        }
    }
}
