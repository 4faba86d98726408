//! Linux-only pieces of the live backend: the link list over rtnetlink (what this network
//! namespace really has, unlike /sys/class/net, which shows the namespace sysfs was mounted in)
//! and the page size.

use super::{Link, ReadError, WriteError};
use crate::host::fs::hardware_address;
use crate::host::NicIdentity;
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
    let mut links = Vec::new();
    for m in dump_links()? {
        if m.header.flags.contains(LinkFlags::Loopback) {
            continue; // not a NIC
        }
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
    Ok(links)
}

/// Every link of this network namespace with its identity, from one RTM_GETLINK dump: its
/// index, IFLA_PERM_ADDRESS (ethtool's permaddr) and its parent device (IFLA_PARENT_DEV_BUS_NAME
/// and _NAME, Linux 5.17+). A kernel without those answers from sysfs instead: the address when
/// `addr_assign_type` is 0 (permanent), the device link's bus and name; sysfs is read only
/// where its `ifindex` is netlink's (a /sys mounted for another namespace shows other links).
/// The namespace is /proc/self/ns/net's inode, the boot the kernel's boot_id.
pub fn netlink_identities() -> Result<Vec<NicIdentity>, ReadError> {
    let netns = std::fs::read_link("/proc/self/ns/net").ok().and_then(|l| {
        l.to_string_lossy()
            .strip_prefix("net:[")
            .and_then(|r| r.strip_suffix(']'))
            .and_then(|n| n.parse::<u64>().ok())
    });
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|b| b.trim().to_string())
        .filter(|b| !b.is_empty());
    let hex = |bytes: &[u8]| {
        bytes
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":")
    };
    let mut out = Vec::new();
    for m in dump_links()? {
        let mut id = NicIdentity {
            ifindex: Some(m.header.index),
            netns,
            boot: boot.clone(),
            ..NicIdentity::default()
        };
        let (mut bus, mut parent, mut address) = (None, None, None);
        for a in m.attributes {
            match a {
                LinkAttribute::IfName(n) => id.name = n,
                LinkAttribute::PermAddress(b) => id.permaddr = hardware_address(&hex(&b)),
                LinkAttribute::Address(b) => address = hardware_address(&hex(&b)),
                LinkAttribute::ParentDevBusName(b) => bus = Some(b),
                LinkAttribute::ParentDevName(n) => parent = Some(n),
                _ => {}
            }
        }
        let base = std::path::Path::new("/sys/class/net").join(&id.name);
        let sysfs = |f: &str| {
            std::fs::read_to_string(base.join(f))
                .ok()
                .map(|t| t.trim().to_string())
        };
        let ours = !id.name.is_empty()
            && !id.name.contains('/')
            && sysfs("ifindex").is_some_and(|i| i == m.header.index.to_string());
        if id.permaddr.is_none() && ours && sysfs("addr_assign_type").as_deref() == Some("0") {
            id.permaddr = address;
        }
        if (bus.is_none() || parent.is_none()) && ours {
            let name =
                |p: std::path::PathBuf| p.file_name().map(|n| n.to_string_lossy().into_owned());
            bus = std::fs::read_link(base.join("device/subsystem"))
                .ok()
                .and_then(name);
            parent = std::fs::canonicalize(base.join("device"))
                .ok()
                .and_then(name);
        }
        if let (Some(bus), Some(parent)) = (bus, parent) {
            id.device = Some(format!("{bus}:{parent}"));
            if ours {
                id.dev_port = sysfs("dev_port").and_then(|p| p.parse().ok());
            }
        }
        out.push(id);
    }
    Ok(out)
}

/// Every link's RTM_GETLINK answer (one dump).
fn dump_links() -> Result<Vec<LinkMessage>, ReadError> {
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
                NetlinkPayload::Error(e) => return Err(ReadError::Other(format!("netlink: {e}"))),
                NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewLink(m)) => links.push(m),
                _ => {}
            }
            if len == 0 {
                break;
            }
            offset += len;
        }
    }
}
