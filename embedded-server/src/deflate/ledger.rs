//! The memory ledger of the thread-shared contexts (shared.rs): what each thread's contexts
//! were charged to a gauge, given back when the thread ends, so `ws_deflate_memory_bytes`
//! counts only contexts that still exist.

use std::cell::RefCell;
use std::sync::atomic::AtomicI64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// What this thread's shared contexts were charged to: subtracted again when the thread
/// ends, so a gauge does not keep counting contexts that went with a thread the user spawned
/// (an I/O or pool thread lives as long as the server, a user's thread may not).
struct Charges(Vec<(Arc<AtomicI64>, i64)>);

impl Drop for Charges {
    fn drop(&mut self) {
        for (gauge, bytes) in &self.0 {
            gauge.fetch_sub(*bytes, Relaxed);
        }
    }
}

thread_local! {
    static CHARGES: RefCell<Charges> = const { RefCell::new(Charges(Vec::new())) };
}

/// Charge `bytes` of contexts created on this thread by [`compress_fresh`](super::compress_fresh) or
/// [`inflate_fresh`](super::inflate_fresh) to `gauge`, and give them back when the thread ends.
pub fn charge_thread(gauge: &Arc<AtomicI64>, bytes: u64) {
    if bytes == 0 {
        return;
    }
    gauge.fetch_add(bytes as i64, Relaxed);
    // A thread being torn down has nothing left to charge; ignore that case.
    let _ = CHARGES.try_with(|c| {
        let mut c = c.borrow_mut();
        match c.0.iter_mut().find(|(g, _)| Arc::ptr_eq(g, gauge)) {
            Some((_, b)) => *b += bytes as i64,
            None => c.0.push((gauge.clone(), bytes as i64)),
        }
    });
}
