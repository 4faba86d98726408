//! The outbox's guarantees, each a test: order, the cap and its one close, nothing after a
//! close frame, direct writes only while the guard holds, and its idle size.

use super::*;

fn frame(n: usize, byte: u8) -> Bytes {
    Bytes::from(vec![byte; n])
}

fn drain(s: &Shared) -> Vec<u8> {
    let mut q = s.lock();
    let mut all = Vec::new();
    let mut slices: [IoSlice<'_>; WRITE_SLICES] = std::array::from_fn(|_| IoSlice::new(&[]));
    let n = q.slices(&mut slices);
    for sl in &slices[..n] {
        all.extend_from_slice(sl);
    }
    let len = all.len();
    q.consume(len, &Metrics::default());
    all
}

/// jemalloc's size classes step by 16 up to 128, then by 32: `Arc<Shared>` (its two counts
/// and `Shared`) now fits the 128 class, down from 160
/// (bench/results/2026-12-01-idle-bytes.md). One of these per connection; a field added here that pushes it
/// past 112 bytes costs 32 bytes per connection: keep such fields behind the queue's box or
/// in the connection's task.
#[test]
fn an_idle_outbox_fits_its_allocator_class() {
    let arc = std::mem::size_of::<Shared>() + 16;
    assert!(
        arc <= 128,
        "Arc<Shared> is {arc} bytes, over jemalloc's 128 class"
    );
    // Nothing is allocated for the queue until a frame waits, and it is freed when drained.
    let m = Metrics::default();
    let s = Shared::new(1, 1 << 20, 1 << 20, 1008, 0);
    assert!(s.out.lock().unwrap().is_none());
    s.push(frame(3, b'a'), &m);
    assert!(s.out.lock().unwrap().is_some());
    assert_eq!(drain(&s), b"aaa");
    assert!(s.out.lock().unwrap().is_none(), "a drained queue is freed");
}

#[test]
fn without_a_socket_frames_queue_in_order() {
    let m = Metrics::default();
    let s = Shared::new(1, 1 << 20, 1 << 20, 1008, 0);
    assert!(s.push(frame(3, b'a'), &m));
    assert!(s.push(frame(2, b'b'), &m));
    assert_eq!(s.queued(), 5);
    assert_eq!(drain(&s), b"aaabb");
    assert_eq!(s.queued(), 0);
    assert!(s.lock().is_empty());
}

#[test]
fn an_empty_frame_is_never_queued() {
    // Queued behind a frame, an empty one would stay at the head with nothing to write
    // once the frame before it went out: the writer would wait on `writable` forever.
    let m = Metrics::default();
    let s = Shared::new(1, 1 << 20, 1 << 20, 1008, 0);
    assert!(s.push(frame(3, b'a'), &m));
    assert!(s.push(Bytes::new(), &m));
    assert_eq!(drain(&s), b"aaa");
    assert!(
        s.out.lock().unwrap().is_none(),
        "nothing left behind the frame"
    );
}

#[test]
fn backpressure_past_the_ceiling_closes_the_slow_consumer_once() {
    let m = Metrics::default();
    let s = Shared::new(1, 1024, 4096, 1013, 0);
    // One frame larger than the ceiling still goes to an empty queue.
    assert!(s.push(frame(5000, b'x'), &m));
    assert_eq!(s.close_requested(), 0);
    // Data piling up past the ceiling is what closes a consumer at once.
    assert!(!s.push(frame(10, b'y'), &m));
    assert_eq!(s.close_requested(), 1013);
    assert!(
        !s.push(frame(10, b'y'), &m),
        "nothing queued after the close"
    );
    assert_eq!(m.backpressure_closes.load(Relaxed), 1);
    // A later request does not win over the first.
    assert!(!s.request_close(1001));
    assert_eq!(s.close_requested(), 1013);
}

#[test]
fn a_slow_consumers_close_keeps_only_a_started_frame_and_the_close() {
    let m = Metrics::default();
    let s = Shared::new(1, 1 << 20, 1 << 20, 1008, 0);
    s.push(frame(4, b'a'), &m);
    s.push(frame(4, b'b'), &m);
    {
        let mut q = s.lock();
        q.consume(1, &Metrics::default()); // "a" is partly on the wire
        q.enqueue_close(frame(2, b'c'), &m);
        q.drop_unsent_before_close(&m);
    }
    assert_eq!(s.queued(), 5);
    assert_eq!(drain(&s), b"aaacc");

    // Nothing started: only the close is left.
    s.push(frame(4, b'd'), &m);
    let mut q = s.lock();
    q.enqueue_close(frame(2, b'c'), &m);
    q.drop_unsent_before_close(&m);
    drop(q);
    assert_eq!(drain(&s), b"cc");
}

#[test]
fn the_rest_of_a_directly_written_frame_survives_the_drop() {
    let m = Metrics::default();
    let s = Shared::new(1, 1 << 20, 1 << 20, 1008, 0);
    let mut q = s.lock();
    q.enqueue_rest(frame(3, b'r'), 2, &m);
    q.enqueue(frame(3, b'x'), &m);
    q.enqueue_close(frame(2, b'c'), &m);
    q.drop_unsent_before_close(&m);
    drop(q);
    assert_eq!(drain(&s), b"rrrcc");
}

#[test]
fn a_close_request_stops_queueing() {
    let m = Metrics::default();
    let s = Shared::new(1, 1 << 20, 1 << 20, 1008, 0);
    s.stop_queueing(1000);
    assert!(!s.push(frame(1, b'x'), &m));
    assert_eq!(s.queued(), 0);
}

#[cfg(unix)]
#[test]
fn direct_writes_stop_when_the_guard_drops() {
    use std::io::Read;
    use std::os::fd::AsRawFd;
    let (a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    let m = Metrics::default();
    let s = Shared::new(1, 1 << 20, 1 << 20, 1008, 0);
    {
        let _direct = s.allow_direct(Some(a.as_raw_fd()));
        assert!(s.push(frame(3, b'd'), &m));
        assert_eq!(s.queued(), 0, "written straight to the socket");
    }
    let mut got = [0u8; 3];
    b.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"ddd");
    // After the guard: queued for the task, never written to the (closing) descriptor.
    assert!(s.push(frame(2, b'q'), &m));
    assert_eq!(s.queued(), 2);
    assert_eq!(m.bytes_out.load(Relaxed), 3);
}

/// A burst above the cap is not a slow consumer: the queue may pass the cap while it drains
/// (the sweep's drain timeout judges that), and only its ceiling closes at once.
#[test]
fn a_burst_above_the_cap_is_queued_up_to_the_ceiling() {
    let m = Metrics::default();
    let s = Shared::new(1, 1024, 8192, 1008, 0);
    for i in 0..8 {
        assert!(s.push(frame(1000, b'a' + i), &m), "frame {i}");
    }
    assert_eq!(
        s.close_requested(),
        0,
        "8,000 bytes: above the cap, under the ceiling"
    );
    assert_eq!(s.queued(), 8000);
    assert!(!s.push(frame(1000, b'z'), &m), "past the ceiling");
    assert_eq!(s.close_requested(), 1008);
    assert_eq!(m.backpressure_closes.load(Relaxed), 1);
    // The consumer's own replies obey the same ceiling.
    let s = Shared::new(2, 1024, 8192, 1008, 0);
    let mut q = s.lock();
    for _ in 0..8 {
        q.enqueue(frame(1000, b'r'), &m);
    }
    assert_eq!(s.close_requested(), 0);
    q.enqueue(frame(1000, b'r'), &m);
    assert_eq!(s.close_requested(), 1008);
}

/// Before a frame is judged against the cap, what is queued goes to the socket if it takes it:
/// a queue is not behind because its connection's task has not had its turn to write.
#[cfg(unix)]
#[test]
fn a_queue_above_the_cap_is_written_before_it_is_judged() {
    use std::io::Read;
    use std::os::fd::AsRawFd;
    let (a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    let m = Metrics::default();
    // A ceiling equal to the cap: without the write, the third frame would close.
    let s = Shared::new(1, 2048, 2048, 1008, 0);
    // Queued while the socket was not ours to write (the task's turn had not come).
    assert!(s.push(frame(1000, b'a'), &m));
    assert!(s.push(frame(1000, b'b'), &m));
    let _direct = s.allow_direct(Some(a.as_raw_fd()));
    assert!(s.push(frame(1000, b'c'), &m));
    assert_eq!(s.close_requested(), 0);
    assert_eq!(
        s.queued(),
        0,
        "the queue and the frame went to the socket, in order"
    );
    let mut got = vec![0u8; 3000];
    b.read_exact(&mut got).unwrap();
    let want: Vec<u8> = [b'a', b'b', b'c'].iter().flat_map(|&c| [c; 1000]).collect();
    assert_eq!(got, want);
    assert_eq!(m.bytes_out.load(Relaxed), 3000);
    assert_eq!(m.memory.used(), 0);
}

/// A short budget closes the connection holding the most unread output, not whoever asks next.
#[test]
fn a_short_budget_reclaims_the_largest_unread_queue() {
    use crate::budget::Holder;
    use std::sync::Arc;
    let m = Metrics::default();
    m.memory.set_limit(10_000);
    let hog = Arc::new(Shared::new(1, 1000, 1 << 20, 1008, 0));
    let small = Arc::new(Shared::new(2, 1000, 1 << 20, 1008, 0));
    let good = Shared::new(3, 1000, 1 << 20, 1008, 0);
    assert!(hog.push(frame(5000, b'h'), &m));
    assert!(hog.push(frame(3000, b'h'), &m));
    assert!(small.push(frame(1500, b's'), &m));
    assert_eq!(m.memory.used(), 9500);
    m.memory.set_candidates(vec![
        small.clone() as Arc<dyn Holder>,
        hog.clone() as Arc<dyn Holder>,
    ]);
    // The good client's reply does not fit: the hog is closed for it, the small one kept.
    assert!(good.push(frame(800, b'g'), &m));
    assert_eq!(good.close_requested(), 0);
    assert_eq!(hog.close_requested(), BUDGET_CLOSE);
    assert_eq!(hog.close_why(), CloseWhy::Reclaimed);
    assert_eq!(small.close_requested(), 0);
    assert_eq!((hog.queued(), m.memory.used()), (0, 2300));
    assert_eq!(m.memory.reclaims(), 1);
    assert_eq!(m.memory.refused(Store::Queue), 0);
    // A queue partly on the wire is given back whole: that connection is dropped, not closed
    // with a frame.
    let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    let started = Arc::new(Shared::new(4, 1000, 1 << 30, 1008, 0));
    {
        use std::os::fd::AsRawFd;
        let _direct = started.allow_direct(Some(a.as_raw_fd()));
        assert!(started.push(frame(4 << 20, b'x'), &m));
    }
    assert!(started.queued() > 1000, "the socket took part of it");
    m.memory
        .set_candidates(vec![started.clone() as Arc<dyn Holder>]);
    let other = Shared::new(5, 1000, 1 << 20, 1008, 0);
    assert!(other.push(frame(5000, b'o'), &m));
    assert_eq!(other.close_requested(), 0);
    assert_eq!(started.close_why(), CloseWhy::ReclaimedMidFrame);
    assert_eq!((started.queued(), m.memory.used()), (0, 7300));
    // Nobody behind holds more than the asker: refused (and the asker closed) as before.
    m.memory
        .set_candidates(vec![small.clone() as Arc<dyn Holder>]);
    let big = Shared::new(6, 1000, 1 << 20, 1008, 0);
    assert!(big.push(frame(2000, b'b'), &m));
    assert!(!big.push(frame(2000, b'b'), &m));
    assert_eq!(big.close_requested(), BUDGET_CLOSE);
    assert_eq!(small.close_requested(), 0);
    assert_eq!(m.memory.refused(Store::Queue), 1);
    assert_eq!(m.memory.reclaims(), 2);
}
