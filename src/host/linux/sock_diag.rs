//! The TCP socket table over netlink sock_diag (INET_DIAG, what `ss` reads), IPv4 and IPv6:
//! one dump request per family, answered in batches of messages that are visited as they
//! arrive. No extensions are asked for (no tcp_info, no memory figures), which keeps each
//! socket's message at its 72-byte header: what costs the kernel time at 100,000 sockets is
//! building messages, so a watch asks for as little as it shows.

use crate::host::sockets::{Sock, TcpState, Which};
use crate::host::ReadError;
use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_sock_diag::{
    constants::{AF_INET, AF_INET6, IPPROTO_TCP},
    inet::{ExtensionFlags, InetRequest, SocketId, StateFlags},
    SockDiagMessage,
};
use netlink_sys::{protocols::NETLINK_SOCK_DIAG, Socket, SocketAddr};

/// Visit every TCP socket of this network namespace in `which` states.
pub fn tcp_sockets(which: Which, visit: &mut dyn FnMut(&Sock)) -> Result<(), ReadError> {
    let fail = |what: &str, e: std::io::Error| {
        ReadError::Other(format!(
            "cannot read the TCP socket table over netlink sock_diag ({what}: {e})"
        ))
    };
    let mut socket = Socket::new(NETLINK_SOCK_DIAG).map_err(|e| fail("socket", e))?;
    socket.bind_auto().map_err(|e| fail("bind", e))?;
    socket
        .connect(&SocketAddr::new(0, 0))
        .map_err(|e| fail("connect", e))?;
    // Room for a few hundred sockets per read: fewer system calls at 100,000.
    let _ = socket.set_rx_buf_sz(1 << 20);
    let states = match which {
        Which::Listeners => StateFlags::LISTEN,
        Which::Connections => StateFlags::all() & !StateFlags::LISTEN,
    };
    let mut buf = vec![0u8; 256 * 1024];
    for family in [AF_INET, AF_INET6] {
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST | NLM_F_DUMP;
        let mut request = NetlinkMessage::new(
            header,
            SockDiagMessage::InetRequest(InetRequest {
                family,
                protocol: IPPROTO_TCP,
                extensions: ExtensionFlags::empty(),
                states: states.clone(),
                socket_id: if family == AF_INET {
                    SocketId::new_v4()
                } else {
                    SocketId::new_v6()
                },
            })
            .into(),
        );
        request.finalize();
        let mut out = vec![0u8; request.buffer_len()];
        request.serialize(&mut out);
        socket.send(&out, 0).map_err(|e| fail("send", e))?;
        'batches: loop {
            let n = socket
                .recv(&mut &mut buf[..], 0)
                .map_err(|e| fail("recv", e))?;
            let mut at = 0;
            while at < n {
                let m =
                    <NetlinkMessage<SockDiagMessage>>::deserialize(&buf[at..n]).map_err(|e| {
                        ReadError::Other(format!(
                            "sock_diag answered a message wstune cannot read: {e}"
                        ))
                    })?;
                let len = m.header.length as usize;
                match m.payload {
                    NetlinkPayload::InnerMessage(SockDiagMessage::InetResponse(r)) => {
                        let h = &r.header;
                        if let Some(state) = TcpState::from_kernel(h.state) {
                            let id = &h.socket_id;
                            visit(&Sock {
                                state,
                                local: std::net::SocketAddr::new(id.source_address, id.source_port),
                                remote: std::net::SocketAddr::new(
                                    id.destination_address,
                                    id.destination_port,
                                ),
                                recv_queue: h.recv_queue,
                                send_queue: h.send_queue,
                                inode: u64::from(h.inode),
                                uid: h.uid,
                                pid: None,
                                detailed: true,
                            });
                        }
                    }
                    NetlinkPayload::Done(_) => break 'batches,
                    NetlinkPayload::Error(e) => {
                        // An IPv6-less kernel answers the AF_INET6 dump with an error: no sockets.
                        if family == AF_INET6 {
                            break 'batches;
                        }
                        return Err(ReadError::Other(format!("sock_diag refused the dump: {e}")));
                    }
                    _ => {}
                }
                if len == 0 {
                    break;
                }
                at += len;
            }
        }
    }
    Ok(())
}
