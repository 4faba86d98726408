//! Work too heavy for an I/O thread: inflating, handling and compressing a message of a
//! megabyte or more. An I/O thread serves thousands of connections; one 16 MiB message (tens
//! to hundreds of milliseconds of zlib) run inline stalls every other connection on that
//! thread for as long, and a few clients sending such messages stall them all.
//!
//! Such work runs under `tokio::task::block_in_place`: the runtime hands this thread's other
//! connections to another thread first, so they go on being served, and a server-wide count
//! of slots (half the cores, at least one) bounds how many such messages are worked on at
//! once, so clients sending large messages get at most those cores and the rest stay free for
//! everybody else. Small messages, the common case, never come here.

use std::sync::{Mutex, OnceLock};

/// Messages (inflated, or as they arrived) at least this large are heavy.
pub(crate) const HEAVY_BYTES: usize = 1 << 20;

struct Slots {
    free: Mutex<usize>,
}

fn slots() -> &'static Slots {
    static SLOTS: OnceLock<Slots> = OnceLock::new();
    SLOTS.get_or_init(|| Slots {
        free: Mutex::new(std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1))),
    })
}

/// A slot for one heavy message, held while it is worked on (given back when dropped).
pub(crate) struct Slot(());

impl Drop for Slot {
    fn drop(&mut self) {
        let s = slots();
        *s.free
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) += 1;
    }
}

/// Whether heavy work can leave the I/O thread here (a multi-thread runtime; on a
/// current-thread one everything runs inline and no slot is needed).
pub(crate) fn offloadable() -> bool {
    tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
}

/// A slot, if one is free. A connection that gets none waits without reading (its message
/// stays in its buffer) and tries again shortly: waiting never holds a thread.
pub(crate) fn try_slot() -> Option<Slot> {
    let mut free = slots()
        .free
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    (*free > 0).then(|| {
        *free -= 1;
        Slot(())
    })
}

/// Run `f`, off the I/O thread's other connections when `bytes` is heavy (the caller holds
/// a `Slot` for it) and the runtime can hand them over.
pub(crate) fn run<R>(bytes: usize, f: impl FnOnce() -> R) -> R {
    if bytes >= HEAVY_BYTES && offloadable() {
        tokio::task::block_in_place(f)
    } else {
        f()
    }
}
