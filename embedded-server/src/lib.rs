//! The embedded WebSocket server behind `wstune serve`.
//!
//! The server itself arrives with its own issue; what lives here already is the part the host
//! checks share with it: how much memory one connection costs. `wstune check` sizes a host with the
//! same numbers the server is built and measured against, so the two can never disagree.

pub mod memory;
