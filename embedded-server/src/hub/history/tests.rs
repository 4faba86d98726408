//! The history store's rules, one test each.

use super::*;

fn store(size: usize, ttl: u64, max_bytes: usize) -> History {
    History::new(
        HistorySettings {
            size,
            ttl_secs: ttl,
            max_bytes,
            recover_max: 100,
        },
        7,
    )
}

fn publish(h: &mut History, c: &str, now: u32) -> Position {
    h.append(c, NO_PUBLISHER, now, |o, e| format!("{c}:{o}:{e}"))
        .0
}

fn offsets(v: &[Arc<str>]) -> Vec<u64> {
    v.iter()
        .map(|t| t.split(':').nth(1).unwrap().parse().unwrap())
        .collect()
}

#[test]
fn offsets_count_up_per_channel_and_recovery_returns_exactly_what_was_missed() {
    let mut h = store(10, 60, 1 << 20);
    let start = h.position("a", 0);
    assert_eq!(start.offset, 0);
    for i in 1..=5 {
        assert_eq!(publish(&mut h, "a", 1).offset, i);
    }
    assert_eq!(
        publish(&mut h, "b", 1).offset,
        1,
        "each channel counts alone"
    );
    let at3 = Position {
        offset: 3,
        epoch: start.epoch.clone(),
    };
    assert_eq!(offsets(&h.since("a", &at3, usize::MAX, 2).unwrap()), [4, 5]);
    assert_eq!(
        offsets(&h.since("a", &start, usize::MAX, 2).unwrap()),
        [1, 2, 3, 4, 5]
    );
    let top = h.peek("a").unwrap().0;
    assert_eq!(h.since("a", &top, usize::MAX, 2).unwrap().len(), 0);
    // Another stream's epoch, or a position past the top, is not this stream's.
    let other = Position {
        offset: 3,
        epoch: h.peek("b").unwrap().0.epoch,
    };
    assert_eq!(
        h.since("a", &other, usize::MAX, 2),
        Err(Unrecoverable::Epoch)
    );
    let ahead = Position {
        offset: 9,
        epoch: start.epoch.clone(),
    };
    assert_eq!(
        h.since("a", &ahead, usize::MAX, 2),
        Err(Unrecoverable::Epoch)
    );
    assert_eq!(
        h.since("nope", &at3, usize::MAX, 2),
        Err(Unrecoverable::Epoch)
    );
}

#[test]
fn a_position_from_before_any_stream_recovers_a_whole_stream_or_nothing() {
    let mut h = store(3, 60, 1 << 20);
    let none = h.position_if_any("a", 0);
    assert!(none.offset == 0 && none.is_stamp(), "{none:?}");
    assert_eq!(h.channels(), 0, "nothing created");
    assert_eq!(h.since("a", &none, usize::MAX, 0), Ok(Vec::new()));
    for _ in 0..3 {
        publish(&mut h, "a", 0);
    }
    assert_eq!(
        offsets(&h.since("a", &none, usize::MAX, 0).unwrap()),
        [1, 2, 3]
    );
    publish(&mut h, "a", 0);
    assert_eq!(
        h.since("a", &none, usize::MAX, 0),
        Err(Unrecoverable::TooOld)
    );
    // `(0, "")` names no time: whether anything was lost before cannot be told.
    let bare = Position {
        offset: 0,
        epoch: Arc::from(""),
    };
    assert_eq!(
        h.since("b", &bare, usize::MAX, 0),
        Err(Unrecoverable::TooOld)
    );
}

#[test]
fn the_count_bound_trims_the_oldest_and_a_position_before_them_is_too_old() {
    let mut h = store(3, 60, 1 << 20);
    let start = h.position("a", 0);
    for _ in 0..5 {
        publish(&mut h, "a", 0);
    }
    assert_eq!(h.peek("a").unwrap().1, 3);
    let at = |offset| Position {
        offset,
        epoch: start.epoch.clone(),
    };
    assert_eq!(
        h.since("a", &at(1), usize::MAX, 0),
        Err(Unrecoverable::TooOld)
    );
    assert_eq!(
        offsets(&h.since("a", &at(2), usize::MAX, 0).unwrap()),
        [3, 4, 5]
    );
    // The recovery bounds: count and bytes.
    h.settings.recover_max = 2;
    assert_eq!(
        h.since("a", &at(2), usize::MAX, 0),
        Err(Unrecoverable::TooMany)
    );
    assert_eq!(h.since("a", &at(3), usize::MAX, 0).unwrap().len(), 2);
    let one = h.since("a", &at(4), usize::MAX, 0).unwrap()[0].len();
    assert_eq!(h.since("a", &at(3), one, 0), Err(Unrecoverable::TooLarge));
}

#[test]
fn publications_expire_and_an_empty_stream_is_forgotten_with_a_new_epoch_after() {
    let mut h = store(10, 60, 1 << 20);
    let first = publish(&mut h, "a", 0);
    publish(&mut h, "a", 30);
    // At 60 s the first is gone: a client at 0 cannot recover, one at 1 can.
    let zero = Position {
        offset: 0,
        epoch: first.epoch.clone(),
    };
    assert_eq!(
        h.since("a", &zero, usize::MAX, 60),
        Err(Unrecoverable::TooOld)
    );
    assert_eq!(h.since("a", &first, usize::MAX, 60).unwrap().len(), 1);
    // At 90 s nothing is left, so the stream goes; its next publication starts anew.
    h.expire(90);
    assert_eq!(h.channels(), 0);
    assert_eq!(
        h.bytes(),
        h.tombstone_bytes(),
        "every byte charged is given back but the tombstone's"
    );
    let again = publish(&mut h, "a", 91);
    assert_eq!(again.offset, 1);
    assert_ne!(again.epoch, first.epoch);
    // A position of the forgotten stream: too old (its tombstone says so).
    assert_eq!(
        h.since("a", &first, usize::MAX, 91),
        Err(Unrecoverable::TooOld)
    );
    // A stream a subscribe created and nobody published to goes the same way.
    h.position("idle", 100);
    assert_eq!(h.channels(), 2);
    h.expire(200);
    assert_eq!((h.channels(), h.bytes()), (0, h.tombstone_bytes()));
    assert_eq!(
        h.tombstones().0,
        1,
        "a stream that never had a publication leaves none"
    );
}

#[test]
fn the_byte_bound_drops_the_oldest_publications_of_any_channel() {
    let mut h = store(1000, 600, 4096);
    for i in 0..200u32 {
        let c = format!("c{}", i % 7);
        h.append(&c, NO_PUBLISHER, i, |o, _| {
            format!("{c}:{o}:{}", "x".repeat(40))
        });
        assert!(h.bytes() <= 4096, "{} after {i}", h.bytes());
    }
    // What is left is the newest, contiguous up to each channel's top.
    for (_, pos, pubs) in h.snapshot() {
        let offs: Vec<u64> = pubs.iter().map(|p| p.0).collect();
        if let Some(&last) = offs.last() {
            assert_eq!(last, pos.offset);
            assert!(offs.windows(2).all(|w| w[1] == w[0] + 1), "{offs:?}");
        }
    }
    // A hostile publisher spreading over new channel names cannot pass the bound either.
    for i in 0..10_000 {
        publish(&mut h, &format!("spam-{i}-{}", "n".repeat(200)), 300);
    }
    assert!(
        h.bytes() <= 4096 && h.channels() < 20,
        "{} {}",
        h.bytes(),
        h.channels()
    );
    // One publication larger than the whole bound is delivered but not kept: its
    // position cannot be recovered from.
    let (big, _) = h.append("big", NO_PUBLISHER, 301, |_, _| "y".repeat(10_000));
    assert_eq!(big.offset, 1);
    assert!(h.bytes() <= 4096);
    let zero = Position {
        offset: 0,
        epoch: big.epoch.clone(),
    };
    assert!(h.since("big", &zero, usize::MAX, 301).is_err());
}

#[test]
fn older_publications_fetched_elsewhere_join_up_in_front_or_replace() {
    let mut h = store(10, 60, 1 << 20);
    let e: Arc<str> = Arc::from("shared");
    let at = |offset| Position {
        offset,
        epoch: e.clone(),
    };
    let text = |o: u64| -> Arc<str> { Arc::from(format!("c:{o}:shared")) };
    // Newer ones came live (5, 6) while 2..=4 were fetched: they join up.
    for o in [5, 6] {
        h.insert("c", &at(o), text(o), NO_PUBLISHER, 0);
    }
    h.merge_older("c", &at(4), (2..=4).map(|o| (o, text(o))).collect(), 0);
    assert_eq!(
        offsets(&h.since("c", &at(1), usize::MAX, 0).unwrap()),
        [2, 3, 4, 5, 6]
    );
    // Nothing here: the fetched are taken as they are.
    h.merge_older("d", &at(3), (1..=3).map(|o| (o, text(o))).collect(), 0);
    assert_eq!(
        offsets(&h.since("d", &at(0), usize::MAX, 0).unwrap()),
        [1, 2, 3]
    );
    // Another epoch here: replaced.
    h.append("x", NO_PUBLISHER, 0, |o, e| format!("x:{o}:{e}"));
    h.merge_older("x", &at(7), vec![(7, text(7))], 0);
    assert_eq!(h.peek("x").unwrap(), (at(7), 1));
    // One more joins up in front; a hole between is left alone.
    h.merge_older("c", &at(2), vec![(1, text(1)), (2, text(2))], 0);
    assert_eq!(h.peek("c").unwrap().1, 6);
    for o in [5, 6] {
        h.insert("h", &at(o), text(o), NO_PUBLISHER, 0);
    }
    h.merge_older("h", &at(3), (1..=3).map(|o| (o, text(o))).collect(), 0);
    assert_eq!(h.peek("h").unwrap().1, 2);
    h.expire(100);
    assert_eq!((h.channels(), h.bytes()), (0, h.tombstone_bytes()));
}

#[test]
fn copies_follow_the_positions_they_are_given() {
    let mut source = store(10, 60, 1 << 20);
    let mut copy = store(10, 60, 1 << 20);
    for _ in 0..3 {
        let (pos, text) = source.append("a", NO_PUBLISHER, 0, |o, e| format!("a:{o}:{e}"));
        assert!(copy.insert("a", &pos, text, NO_PUBLISHER, 0));
    }
    assert_eq!(copy.peek("a"), source.peek("a"));
    let (pos, text) = source.append("a", NO_PUBLISHER, 0, |o, e| format!("a:{o}:{e}"));
    assert!(copy.insert("a", &pos, text.clone(), NO_PUBLISHER, 0));
    assert!(
        !copy.insert("a", &pos, text, NO_PUBLISHER, 0),
        "a duplicate is not kept twice"
    );
    let epoch = pos.epoch.clone();
    // A gap (a lost relay frame): what came before it cannot be recovered any more.
    let six = Position {
        offset: 6,
        epoch: epoch.clone(),
    };
    assert!(copy.insert("a", &six, Arc::from("a:6:x"), NO_PUBLISHER, 0));
    let two = Position {
        offset: 2,
        epoch: epoch.clone(),
    };
    assert_eq!(
        copy.since("a", &two, usize::MAX, 0),
        Err(Unrecoverable::TooOld)
    );
    let five = Position { offset: 5, epoch };
    assert_eq!(copy.since("a", &five, usize::MAX, 0).unwrap().len(), 1);
    // Another epoch replaces the stream.
    let other = Position {
        offset: 1,
        epoch: Arc::from("other"),
    };
    assert!(copy.insert("a", &other, Arc::from("a:1:other"), NO_PUBLISHER, 0));
    assert_eq!(copy.peek("a").unwrap(), (other, 1));
    copy.expire(100);
    assert_eq!((copy.channels(), copy.bytes()), (0, copy.tombstone_bytes()));
}

#[test]
fn a_forgotten_stream_is_too_old_for_every_position_from_before_it_went() {
    let mut h = store(100, 2, 1 << 20);
    // Subscribed before the first publication: a stamp, no stream.
    let early = h.position_if_any("a", 0);
    let e = publish(&mut h, "a", 1).epoch;
    publish(&mut h, "a", 1);
    let seen = publish(&mut h, "a", 1);
    // All three expire: the stream goes, its tombstone stays.
    h.expire(10);
    assert_eq!((h.channels(), h.tombstones()), (0, (1, 0)));
    let bare = Position {
        offset: 0,
        epoch: Arc::from(""),
    };
    let at = |offset| Position {
        offset,
        epoch: e.clone(),
    };
    for from in [&early, &bare, &at(0), &at(1), &seen] {
        assert_eq!(
            h.since("a", from, usize::MAX, 10),
            Err(Unrecoverable::TooOld),
            "{from:?}"
        );
    }
    // Past its top: not a position it ever had.
    assert_eq!(
        h.since("a", &at(4), usize::MAX, 10),
        Err(Unrecoverable::Epoch)
    );
    // A stamp given after it went misses nothing of it, and gets the next stream whole.
    let late = h.position_if_any("a", 12);
    assert_eq!(h.since("a", &late, usize::MAX, 12), Ok(Vec::new()));
    publish(&mut h, "a", 13);
    assert_eq!(offsets(&h.since("a", &late, usize::MAX, 13).unwrap()), [1]);
    assert_eq!(
        h.since("a", &early, usize::MAX, 13),
        Err(Unrecoverable::TooOld),
        "the new stream does not hide the one that went"
    );
    // Pushed out by the byte bound is forgotten too.
    let mut h = store(100, 600, 2048);
    let early = h.position_if_any("victim", 0);
    publish(&mut h, "victim", 0);
    for i in 0..40 {
        publish(&mut h, &format!("other-{i}"), 1);
    }
    assert!(h.peek("victim").is_none(), "pushed out");
    assert_eq!(
        h.since("victim", &early, usize::MAX, 1),
        Err(Unrecoverable::TooOld)
    );
}

#[test]
fn tombstones_are_bounded_and_a_dropped_one_makes_older_stamps_too_old() {
    let max = 64 << 10;
    let mut h = store(10, 1, max);
    let early = h.position_if_any("quiet", 0);
    // Thousands of streams forgotten, one tombstone each: their share of the bound holds.
    for i in 0..5000u32 {
        publish(&mut h, &format!("spam-{i}"), i / 100);
        assert!(h.tombstone_bytes() <= max / TOMBSTONE_SHARE);
        assert!(h.bytes() <= max);
    }
    h.expire(100);
    let (kept, dropped) = h.tombstones();
    assert!(kept > 0 && dropped > 0 && kept + dropped as usize == 5000);
    // "quiet" never had a stream, but a tombstone newer than its stamp was dropped: whether it
    // lost publications cannot be told any more.
    assert_eq!(
        h.since("quiet", &early, usize::MAX, 100),
        Err(Unrecoverable::TooOld)
    );
    // A stamp given after that is decided as before.
    let later = h.position_if_any("quiet", 102);
    assert_eq!(h.since("quiet", &later, usize::MAX, 102), Ok(Vec::new()));
    // A channel forgotten over and over holds one tombstone.
    let before = h.tombstones().1;
    for t in 101..110 {
        publish(&mut h, "again", t * 10);
        h.expire(t * 10 + 5);
    }
    assert!(h.tombstones().1 <= before + 1, "{:?}", h.tombstones());
}

#[test]
fn stamps_are_decided_only_by_their_store_or_one_that_took_its_tombstones() {
    let mut supervisor = store(10, 60, 1 << 20);
    supervisor.set_origin(1_000_000);
    let mut process = History::new(supervisor.settings().clone(), 8);
    process.set_origin(1_000_000);
    let stamp = supervisor.position_if_any("a", 1);
    let (pos, text) = supervisor.append("a", NO_PUBLISHER, 2, |o, e| format!("a:{o}:{e}"));
    supervisor.expire(100);
    // Another store's stamp (another server, or before a restart): too old.
    assert_eq!(
        process.since("a", &stamp, usize::MAX, 100),
        Err(Unrecoverable::TooOld)
    );
    // A process that took the supervisor's tombstones decides it alike.
    let (family, known, graves) = supervisor.graves();
    process.adopt_graves(family, known, graves);
    assert_eq!(
        process.since("a", &stamp, usize::MAX, 100),
        Err(Unrecoverable::TooOld)
    );
    let fresh = supervisor.position_if_any("b", 100);
    assert_eq!(process.since("b", &fresh, usize::MAX, 100), Ok(Vec::new()));
    // A copy whose stream is replaced by another epoch remembers the old one.
    assert!(process.insert("c", &pos, text, NO_PUBLISHER, 100));
    let early = process.position_if_any("d", 100);
    let other = Position {
        offset: 1,
        epoch: Arc::from("other"),
    };
    assert!(process.insert("c", &other, Arc::from("c:1:other"), NO_PUBLISHER, 101));
    assert_eq!(
        process.since("c", &pos, usize::MAX, 101),
        Err(Unrecoverable::TooOld)
    );
    assert_eq!(process.since("d", &early, usize::MAX, 101), Ok(Vec::new()));
    // A stamp from the future is not one this store gave.
    let future = Position {
        offset: 0,
        epoch: Arc::from(format!("{family:016x}@{}", 1_000_000 + 300 * 1_000_000)),
    };
    assert_eq!(
        process.since("d", &future, usize::MAX, 101),
        Err(Unrecoverable::Epoch)
    );
}

#[test]
fn one_publisher_on_many_new_names_cannot_push_out_other_channels() {
    let max = 256 << 10;
    let mut h = store(100, 600, max);
    // Other channels, by other connections and by the HTTP API.
    for i in 0..20u64 {
        let c = format!("chan-{i}");
        for _ in 0..5 {
            h.append(&c, [NO_PUBLISHER, 100 + i][i as usize % 2], 0, |o, e| {
                format!("{c}:{o}:{e}")
            });
        }
    }
    // One connection spreads small publications over 100,000 new names.
    for i in 0..100_000 {
        h.append(&format!("spam-{i}"), 7, 1, |o, e| {
            format!("spam:{o}:{e}:{}", "x".repeat(50))
        });
        assert!(h.bytes() <= max);
    }
    for i in 0..20 {
        assert_eq!(h.peek(&format!("chan-{i}")).unwrap().1, 5, "chan-{i}");
    }
    // It holds its share, its newest kept; what it lost is counted.
    assert!(h.shares[&7].bytes <= max / PUBLISHER_SHARE);
    assert_eq!(h.peek("spam-99999").unwrap().1, 1);
    assert!(h.evicted().publisher > 90_000, "{:?}", h.evicted());
    assert!(h.channels() < 200, "{}", h.channels());
    // Every byte is given back as the rest ages out.
    h.expire(1000);
    assert_eq!((h.channels(), h.bytes()), (0, h.tombstone_bytes()));
    assert!(h.shares.is_empty());
}

#[test]
fn one_channel_holds_at_most_its_share_of_the_bound() {
    let max = 64 << 10;
    let mut h = store(1000, 600, max);
    let start = publish(&mut h, "small", 0);
    let big = |o: u64| format!("big:{o}:{}", "x".repeat(1000));
    let first = h.append("big", NO_PUBLISHER, 0, |o, _| big(o)).0;
    for _ in 0..500 {
        h.append("big", NO_PUBLISHER, 0, |o, _| big(o));
    }
    let (_, kept) = h.peek("big").unwrap();
    assert!(kept > 0 && kept * 1100 <= max / CHANNEL_SHARE, "{kept}");
    assert_eq!(
        h.peek("small").unwrap().1,
        1,
        "another channel keeps its own"
    );
    assert!(h.evicted().channel >= 490, "{:?}", h.evicted());
    assert_eq!(
        h.since("big", &first, usize::MAX, 0),
        Err(Unrecoverable::TooOld)
    );
    let at0 = Position {
        offset: 0,
        epoch: start.epoch,
    };
    assert_eq!(h.since("small", &at0, usize::MAX, 0).unwrap().len(), 1);
    // One publication larger than the share is delivered, not kept.
    let (huge, _) = h.append("huge", NO_PUBLISHER, 0, |_, _| "y".repeat(max / 4));
    assert_eq!(h.peek("huge").unwrap(), (huge, 0));
}
