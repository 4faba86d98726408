//! A NIC's driver statistics, the list `ethtool -S NIC` prints: the SIOCETHTOOL ioctl's
//! ETHTOOL_GSSET_INFO (how many), ETHTOOL_GSTRINGS (their names) and ETHTOOL_GSTATS (their
//! values), as include/uapi/linux/ethtool.h lays them out. Ethtool netlink's STATS_GET carries
//! only the standard groups, not a driver's own counters (ENA's allowance counters among them),
//! so these stay on the ioctl.

use crate::host::ReadError;

const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_GSTRINGS: u32 = 0x1b;
const ETHTOOL_GSTATS: u32 = 0x1d;
const ETHTOOL_GSSET_INFO: u32 = 0x37;
/// The string set of the statistics (`enum ethtool_stringset`).
const ETH_SS_STATS: u32 = 1;
const ETH_GSTRING_LEN: usize = 32;
/// More than any driver lists; a larger count is a malformed answer, not an allocation.
const MAX_STATS: usize = 1 << 16;

/// `struct ifreq` with `ifr_data`: the name and a pointer to the ethtool command.
#[repr(C)]
struct IfReq {
    name: [libc::c_char; libc::IFNAMSIZ],
    data: *mut libc::c_void,
    _rest: [u8; 16],
}

/// A datagram socket for the ioctl, closed on drop.
struct Sock(libc::c_int);

impl Drop for Sock {
    fn drop(&mut self) {
        // SAFETY: the descriptor is ours and closed once.
        unsafe { libc::close(self.0) };
    }
}

fn ioctl(sock: &Sock, nic: &str, cmd: *mut libc::c_void) -> Result<(), ReadError> {
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        data: cmd,
        _rest: [0; 16],
    };
    for (d, s) in req
        .name
        .iter_mut()
        .zip(nic.bytes().take(libc::IFNAMSIZ - 1))
    {
        *d = s as libc::c_char;
    }
    // SAFETY: `req` names the NIC and points at a command buffer sized for its answer.
    let rc = unsafe { libc::ioctl(sock.0, SIOCETHTOOL as _, &mut req) };
    if rc == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    Err(match e.raw_os_error() {
        Some(libc::EOPNOTSUPP) | Some(libc::EINVAL) => {
            ReadError::Unsupported(format!("{nic}'s driver lists no statistics (ethtool -S)"))
        }
        Some(libc::ENODEV) => ReadError::NotFound(format!("network interface {nic}")),
        Some(libc::EPERM) | Some(libc::EACCES) => {
            ReadError::Denied(format!("{nic}'s statistics (ethtool -S)"))
        }
        _ => ReadError::Other(format!("ethtool -S {nic}: {e}")),
    })
}

/// The statistics' names and values, in the driver's order.
pub fn nic_stats(nic: &str) -> Result<Vec<(String, u64)>, ReadError> {
    if !crate::host::owned::nic_name_ok(nic) {
        return Err(ReadError::Other(format!(
            "{nic:?} is not an interface name"
        )));
    }
    // SAFETY: plain socket(2); the result is checked.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        return Err(ReadError::Other(format!("a socket for ethtool -S: {e}")));
    }
    let sock = Sock(fd);
    // struct ethtool_sset_info { u32 cmd; u32 reserved; u64 sset_mask; u32 data[]; }
    let mut info = [0u64; 3];
    let head = info.as_mut_ptr() as *mut u32;
    // SAFETY: writing the first two u32s of a 24-byte buffer.
    unsafe {
        *head = ETHTOOL_GSSET_INFO;
        *head.add(1) = 0;
    }
    info[1] = 1 << ETH_SS_STATS;
    ioctl(&sock, nic, info.as_mut_ptr().cast())?;
    if info[1] & (1 << ETH_SS_STATS) == 0 {
        return Err(ReadError::Unsupported(format!(
            "{nic}'s driver lists no statistics (ethtool -S)"
        )));
    }
    // SAFETY: data[0] is the u32 right after the 16-byte header.
    let n = unsafe { *(info.as_ptr() as *const u32).add(4) } as usize;
    if n == 0 || n > MAX_STATS {
        return Err(ReadError::Unsupported(format!(
            "{nic}'s driver lists {n} statistics"
        )));
    }
    // struct ethtool_gstrings { u32 cmd; u32 string_set; u32 len; u8 data[]; }
    let mut strings = vec![0u32; 3 + n * ETH_GSTRING_LEN / 4];
    strings[0] = ETHTOOL_GSTRINGS;
    strings[1] = ETH_SS_STATS;
    strings[2] = n as u32;
    ioctl(&sock, nic, strings.as_mut_ptr().cast())?;
    // struct ethtool_stats { u32 cmd; u32 n_stats; u64 data[]; }
    let mut stats = vec![0u64; 1 + n];
    let head = stats.as_mut_ptr() as *mut u32;
    // SAFETY: the first 8 bytes of the buffer are the two u32 header fields.
    unsafe {
        *head = ETHTOOL_GSTATS;
        *head.add(1) = n as u32;
    }
    ioctl(&sock, nic, stats.as_mut_ptr().cast())?;
    // SAFETY: n_stats as the kernel wrote it back.
    let got = unsafe { *head.add(1) } as usize;
    if strings[2] as usize != n || got != n {
        return Err(ReadError::Other(format!(
            "ethtool -S {nic}: the driver's statistics changed while they were read"
        )));
    }
    // SAFETY: the names are n * 32 bytes after the 12-byte header, inside `strings`.
    let names = unsafe {
        std::slice::from_raw_parts((strings.as_ptr() as *const u8).add(12), n * ETH_GSTRING_LEN)
    };
    Ok(names
        .chunks(ETH_GSTRING_LEN)
        .zip(&stats[1..])
        .map(|(name, v)| {
            let end = name.iter().position(|b| *b == 0).unwrap_or(name.len());
            (String::from_utf8_lossy(&name[..end]).into_owned(), *v)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    /// Loopback has no driver statistics: the answer is a clear Unsupported (or NotFound in
    /// a namespace without it), never a panic or garbage.
    #[test]
    fn loopback_has_no_driver_statistics() {
        match super::nic_stats("lo") {
            Err(crate::host::ReadError::Unsupported(_) | crate::host::ReadError::NotFound(_)) => {}
            other => panic!("{other:?}"),
        }
        assert!(super::nic_stats("a/b").is_err());
    }
}
