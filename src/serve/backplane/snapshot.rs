//! The bodies of the supervisor's two history frames (`KIND_GRAVES`, `KIND_SNAPSHOT`): what a
//! process that starts under `serve --processes` with channel history on receives before any
//! live publication, so it recovers positions exactly as the supervisor would. Encoded by the
//! supervisor (`supervisor::history::Sequencer::snapshot`), decoded by the process
//! (`deliver`); bytes only, as the rest of the wire format (`wire`).

use super::wire::{KIND_GRAVES, KIND_SNAPSHOT, SUPERVISOR};
use embedded_server::hub::history::{GraveCopy, History, Position};
use embedded_server::hub::StreamPosition;

/// The history's tombstones as a relay frame body: the supervisor's node id (`SUPERVISOR`) and
/// kind; its stamp family and the Unix µs before which stamps are too old (u64 LE each), the
/// count of tombstones (u32 LE) and per tombstone the name's length (u16 LE) and name, the
/// epoch's length (u8) and epoch, its top offset and when it went (u64 LE each).
pub fn encode_graves(h: &History) -> Vec<u8> {
    let mut v = SUPERVISOR.to_le_bytes().to_vec();
    v.push(KIND_GRAVES);
    let (family, known_since, graves) = h.graves();
    v.extend_from_slice(&family.to_le_bytes());
    v.extend_from_slice(&known_since.to_le_bytes());
    v.extend_from_slice(&(graves.len() as u32).to_le_bytes());
    for (name, epoch, top, at) in graves {
        v.extend_from_slice(&(name.len() as u16).to_le_bytes());
        v.extend_from_slice(name.as_bytes());
        v.push(epoch.len() as u8);
        v.extend_from_slice(epoch.as_bytes());
        v.extend_from_slice(&top.to_le_bytes());
        v.extend_from_slice(&at.to_le_bytes());
    }
    v
}

/// The history as a relay frame body: the supervisor's node id (`SUPERVISOR`) and kind, then
/// per channel the name's length (u16 LE) and name, its top offset (u64 LE), the epoch's
/// length (u8) and epoch, the count of kept publications (u32 LE), and each one's offset
/// (u64 LE), length (u32 LE) and text.
pub fn encode_snapshot(h: &History) -> Vec<u8> {
    let mut v = SUPERVISOR.to_le_bytes().to_vec();
    v.push(KIND_SNAPSHOT);
    for (name, pos, pubs) in h.snapshot() {
        v.extend_from_slice(&(name.len() as u16).to_le_bytes());
        v.extend_from_slice(name.as_bytes());
        v.extend_from_slice(&pos.offset.to_le_bytes());
        v.push(pos.epoch.len() as u8);
        v.extend_from_slice(pos.epoch.as_bytes());
        v.extend_from_slice(&(pubs.len() as u32).to_le_bytes());
        for (offset, text) in pubs {
            v.extend_from_slice(&offset.to_le_bytes());
            v.extend_from_slice(&(text.len() as u32).to_le_bytes());
            v.extend_from_slice(text.as_bytes());
        }
    }
    v
}

fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    let (head, rest) = (b.get(..n)?, b.get(n..)?);
    *b = rest;
    Some(head)
}

fn u64_of(b: &mut &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(take(b, 8)?.try_into().ok()?))
}

/// A tombstones body (after the node id and kind): the stamp family, the too-old bound and
/// each forgotten stream. None when it is malformed.
pub fn decode_graves(mut b: &[u8]) -> Option<(u64, u64, Vec<GraveCopy>)> {
    let family = u64_of(&mut b)?;
    let known_since = u64_of(&mut b)?;
    let count = u32::from_le_bytes(take(&mut b, 4)?.try_into().ok()?) as usize;
    let mut graves = Vec::with_capacity(count.min(b.len() / 19));
    for _ in 0..count {
        let n = u16::from_le_bytes(take(&mut b, 2)?.try_into().ok()?) as usize;
        let name = std::str::from_utf8(take(&mut b, n)?).ok()?;
        let e = take(&mut b, 1)?[0] as usize;
        let epoch = std::str::from_utf8(take(&mut b, e)?).ok()?;
        let (top, at) = (u64_of(&mut b)?, u64_of(&mut b)?);
        graves.push((name.into(), epoch.into(), top, at));
    }
    b.is_empty().then_some((family, known_since, graves))
}

/// Each stream of a snapshot body (after the node id and kind): its name, position and kept
/// publications. None when the body is malformed.
#[allow(clippy::type_complexity)]
pub fn decode_snapshot(mut b: &[u8]) -> Option<Vec<(&str, Position, Vec<(u64, &str)>)>> {
    let mut out = Vec::new();
    while !b.is_empty() {
        let n = u16::from_le_bytes(take(&mut b, 2)?.try_into().ok()?) as usize;
        let name = std::str::from_utf8(take(&mut b, n)?).ok()?;
        let top = u64::from_le_bytes(take(&mut b, 8)?.try_into().ok()?);
        let e = take(&mut b, 1)?[0] as usize;
        let epoch = std::str::from_utf8(take(&mut b, e)?).ok()?;
        let count = u32::from_le_bytes(take(&mut b, 4)?.try_into().ok()?) as usize;
        let mut pubs = Vec::with_capacity(count.min(b.len() / 12));
        for _ in 0..count {
            let offset = u64::from_le_bytes(take(&mut b, 8)?.try_into().ok()?);
            let len = u32::from_le_bytes(take(&mut b, 4)?.try_into().ok()?) as usize;
            pubs.push((offset, std::str::from_utf8(take(&mut b, len)?).ok()?));
        }
        let pos = StreamPosition {
            offset: top,
            epoch: epoch.into(),
        };
        out.push((name, pos, pubs));
    }
    Some(out)
}
