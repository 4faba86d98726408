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
    let s = Shared::new(1, 1 << 20, 1008, 0);
    assert!(s.out.lock().unwrap().is_none());
    s.push(frame(3, b'a'), &m);
    assert!(s.out.lock().unwrap().is_some());
    assert_eq!(drain(&s), b"aaa");
    assert!(s.out.lock().unwrap().is_none(), "a drained queue is freed");
}

#[test]
fn without_a_socket_frames_queue_in_order() {
    let m = Metrics::default();
    let s = Shared::new(1, 1 << 20, 1008, 0);
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
    let s = Shared::new(1, 1 << 20, 1008, 0);
    assert!(s.push(frame(3, b'a'), &m));
    assert!(s.push(Bytes::new(), &m));
    assert_eq!(drain(&s), b"aaa");
    assert!(
        s.out.lock().unwrap().is_none(),
        "nothing left behind the frame"
    );
}

#[test]
fn backpressure_past_the_cap_closes_the_slow_consumer_once() {
    let m = Metrics::default();
    let s = Shared::new(1, 1024, 1013, 0);
    // One frame larger than the cap still goes to an empty queue.
    assert!(s.push(frame(2000, b'x'), &m));
    assert_eq!(s.close_requested(), 0);
    // Data piling up is what makes a consumer slow.
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
    let s = Shared::new(1, 1 << 20, 1008, 0);
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
    let s = Shared::new(1, 1 << 20, 1008, 0);
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
    let s = Shared::new(1, 1 << 20, 1008, 0);
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
    let s = Shared::new(1, 1 << 20, 1008, 0);
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
