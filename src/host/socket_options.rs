//! Options set on the sockets wstune opens itself (the self-test's clients), which only some
//! systems have: elsewhere each one is left at the system's default.

use tokio::net::TcpSocket;

/// Leave the port choice to connect(): bind(ip, 0) alone picks a port unique to the source
/// address across every destination and never one a TIME_WAIT socket still holds, so after
/// one 100k scenario (100k client TIME_WAITs over ~5 sources) the next one ran out of ports
/// at ~95% ("connections were still opening"). With IP_BIND_ADDRESS_NO_PORT the kernel
/// picks at connect() by the whole 4-tuple, as for an unbound socket, and tcp_tw_reuse
/// (2, loopback, by default) reuses TIME_WAIT ports.
pub fn no_port_at_bind(sock: &TcpSocket) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let one: libc::c_int = 1;
        // SAFETY: setsockopt on a socket this function borrows, with a valid c_int option.
        unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::IPPROTO_IP,
                libc::IP_BIND_ADDRESS_NO_PORT,
                &one as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = sock;
}
