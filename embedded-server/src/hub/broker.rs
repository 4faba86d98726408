//! The channel broker: who is in which channel, both ways, with the per-connection caps
//! (count, and the bytes of the names) and the memory budget's charge for them, and the
//! publishes that fan out to a channel's members (encoded once, `fanout.rs`), positioned and
//! kept when history is on (`recovery.rs`), and handed to the relay. Counting the members for
//! presence is `presence.rs`'s.

use super::history::{Position, Publisher, NO_PUBLISHER};
use super::recovery::Recovered;
use super::relay::Relay;
use super::{fanout, Hub, Published};
use crate::budget::Store;
use crate::frame::OpCode;
use crate::outbox::Shared;
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// What [`Broker::subscribe_capped`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subscribed {
    /// Now subscribed.
    Added,
    /// It was already.
    Already,
    /// Not added: the connection holds the most subscriptions allowed.
    Full,
    /// Not added: the names of the connection's subscriptions would pass its byte budget
    /// ([`MAX_SUBSCRIPTION_BYTES`](crate::app_settings::MAX_SUBSCRIPTION_BYTES)).
    NamesFull,
    /// Not added: the server's memory budget has no room for another subscription
    /// ([`Broker::subscribe_within`] only; an application's own subscribes are charged without
    /// a check).
    OverBudget,
    /// Not added: the connection has ended.
    Ended,
}

/// Channel subscriptions, both ways: who is in a channel (for a publish) and which channels a
/// connection is in (so that its close leaves them without the connection keeping a list: a
/// connection that never subscribes costs nothing here). A name is stored once (`Arc<str>`,
/// shared by both maps and every subscriber's list).
///
/// `names` orders the channels for presence pages, so that a page costs its own length under
/// the lock and not a scan of every channel; it changes only when a channel gains its first
/// subscriber or loses its last, never on a publish.
#[derive(Default)]
pub(super) struct Channels {
    pub(super) subs: HashMap<Arc<str>, HashMap<u64, Arc<Shared>>>,
    by_conn: HashMap<u64, Mine>,
    pub(super) names: BTreeSet<Arc<str>>,
    /// Subscriptions in all (every channel's members).
    pub(super) total: usize,
}

/// What one subscription is charged to the memory budget besides its name's bytes: its entry
/// in the channel's member table and in the connection's list (a pointer each, with the
/// tables' slack), rounded up.
const SUBSCRIPTION_ENTRY_BYTES: usize = 64;

/// The budget charge of subscriptions whose names total `name_bytes`.
fn subscription_cost(count: usize, name_bytes: usize) -> usize {
    count * SUBSCRIPTION_ENTRY_BYTES + name_bytes
}

impl Channels {
    /// Take `id` out of `channel`'s members; the channel goes when it was the last.
    fn leave(&mut self, channel: &str, id: u64) -> bool {
        let Some(members) = self.subs.get_mut(channel) else {
            return false;
        };
        let was = members.remove(&id).is_some();
        if was {
            self.total -= 1;
        }
        if members.is_empty() {
            self.subs.remove(channel);
            self.names.remove(channel);
        }
        was
    }
}

/// One connection's subscriptions, and the bytes of their names (its budget).
#[derive(Default)]
struct Mine {
    names: Vec<Arc<str>>,
    bytes: usize,
}

/// The hub's channel broker (`hub.broker()`): a borrow of the hub, free to make.
#[derive(Clone, Copy)]
pub struct Broker<'h> {
    pub(super) hub: &'h Hub,
}

impl Broker<'_> {
    /// Add `conn` to `channel`. False when the connection has ended (nothing is added). No
    /// cap: an application subscribing on a client's request should use
    /// [`Broker::subscribe_capped`], as the channels protocol does.
    pub fn subscribe(self, conn: &Arc<Shared>, channel: &str) -> bool {
        self.subscribe_capped(conn, channel, usize::MAX) != Subscribed::Ended
    }

    /// Add `conn` to `channel` unless it already holds `cap` other subscriptions (checked
    /// under the same lock as the insert, so concurrent subscribes cannot pass the cap). No
    /// budget on the names' bytes: see [`Broker::subscribe_within`].
    pub fn subscribe_capped(self, conn: &Arc<Shared>, channel: &str, cap: usize) -> Subscribed {
        self.join(conn, channel, cap, usize::MAX, false)
    }

    /// [`Broker::subscribe_capped`], also refusing ([`Subscribed::NamesFull`]) a subscription
    /// that would bring the bytes of the connection's channel names past `max_bytes`, and
    /// ([`Subscribed::OverBudget`]) one the server's memory budget has no room for: what the
    /// channels protocol uses for a client's subscribes.
    pub fn subscribe_within(
        self,
        conn: &Arc<Shared>,
        channel: &str,
        cap: usize,
        max_bytes: usize,
    ) -> Subscribed {
        self.join(conn, channel, cap, max_bytes, true)
    }

    /// Every subscribe comes here. Each subscription is charged to the memory budget
    /// (`Store::Subscriptions`): checked when a client asks (`checked`), unchecked when the
    /// application does.
    pub(super) fn join(
        self,
        conn: &Arc<Shared>,
        channel: &str,
        cap: usize,
        max_bytes: usize,
        checked: bool,
    ) -> Subscribed {
        let mut map = self.hub.channels.lock().unwrap();
        // Checked under the lock `unregister` takes after marking the end: no subscription
        // outlives its connection.
        if conn.ended() {
            return Subscribed::Ended;
        }
        let (held, bytes) = match map.by_conn.get(&conn.id) {
            Some(mine) if mine.names.iter().any(|c| &**c == channel) => return Subscribed::Already,
            Some(mine) => (mine.names.len(), mine.bytes),
            None => (0, 0),
        };
        if held >= cap {
            return Subscribed::Full;
        }
        if bytes.saturating_add(channel.len()) > max_bytes {
            return Subscribed::NamesFull;
        }
        let cost = subscription_cost(1, channel.len());
        if checked {
            if !self
                .hub
                .metrics
                .memory
                .try_charge(Store::Subscriptions, cost, 0)
            {
                return Subscribed::OverBudget;
            }
        } else {
            self.hub.metrics.memory.charge(Store::Subscriptions, cost);
        }
        conn.set_subscribed();
        let Channels {
            subs,
            by_conn,
            names,
            total,
        } = &mut *map;
        // The channel's own key when it has subscribers already: one allocation per name.
        let name = match subs.get_key_value(channel) {
            Some((k, _)) => k.clone(),
            None => {
                let name: Arc<str> = Arc::from(channel);
                names.insert(name.clone());
                name
            }
        };
        subs.entry(name.clone())
            .or_default()
            .insert(conn.id, conn.clone());
        *total += 1;
        let mine = by_conn.entry(conn.id).or_default();
        mine.bytes += name.len();
        mine.names.push(name);
        Subscribed::Added
    }

    /// Remove `conn` from `channel`; returns whether it was subscribed.
    pub fn unsubscribe(self, conn: &Shared, channel: &str) -> bool {
        let mut map = self.hub.channels.lock().unwrap();
        let was = map.leave(channel, conn.id);
        if let Some(mine) = map.by_conn.get_mut(&conn.id) {
            if let Some(i) = mine.names.iter().position(|c| &**c == channel) {
                mine.bytes -= channel.len();
                mine.names.swap_remove(i);
                self.hub
                    .metrics
                    .memory
                    .release(Store::Subscriptions, subscription_cost(1, channel.len()));
            }
            if mine.names.is_empty() {
                map.by_conn.remove(&conn.id);
            }
        }
        was
    }

    /// Take an ending connection out of every channel it joined and give back their charge.
    pub(super) fn leave_all(self, s: &Shared) {
        let mut map = self.hub.channels.lock().unwrap();
        let mine = map.by_conn.remove(&s.id).unwrap_or_default();
        self.hub.metrics.memory.release(
            Store::Subscriptions,
            subscription_cost(mine.names.len(), mine.bytes),
        );
        for c in mine.names {
            map.leave(&c, s.id);
        }
    }

    /// A channel's subscribers now (a copy, for the same reason).
    pub(super) fn subscribers(self, channel: &str) -> Vec<Arc<Shared>> {
        let map = self.hub.channels.lock().unwrap();
        map.subs
            .get(channel)
            .map(|subs| subs.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Publish to a channel in the channels protocol's envelope
    /// (`{"channel":..,"data":..}`): one encode, then the same frame to each subscriber.
    pub fn publish(self, channel: &str, data: &serde_json::Value) {
        self.publish_delivered(channel, data);
    }

    /// [`Broker::publish`] by connection `conn`: with history on, what it keeps is held to the
    /// connection's share ([`Broker::publish_positioned_by`]).
    pub fn publish_from(self, conn: &Shared, channel: &str, data: &str) {
        self.publish_positioned_by(conn.id.wrapping_add(1), channel, data);
    }

    /// [`Broker::publish`], answering how many of this node's subscribers the message was
    /// queued for: [`Published::queued`] of [`Broker::publish_report`].
    pub fn publish_delivered(self, channel: &str, data: &serde_json::Value) -> u64 {
        self.publish_report(channel, data).queued
    }

    /// [`Broker::publish`], answering for how many of this node's subscribers the message was
    /// queued and for how many it could not be (counted by the fan-out itself: a subscriber
    /// that joins or leaves meanwhile is counted as it was served).
    /// With history on, the message carries its position (see [`Broker::publish_with_position`]).
    pub fn publish_report(self, channel: &str, data: &serde_json::Value) -> Published {
        self.publish_with_position(channel, data).0
    }

    /// Publish `text` as it is to a channel's subscribers (encoded once), and through the
    /// cluster relay to other nodes' subscribers.
    pub fn publish_text(self, channel: &str, text: &str) {
        self.publish_text_delivered(channel, text);
    }

    pub(super) fn publish_text_delivered(self, channel: &str, text: &str) -> Published {
        let subs = self.subscribers(channel);
        let sent = fanout::fan_out(self.hub, OpCode::Text, text.as_bytes(), subs.iter());
        self.hub
            .metrics
            .publish_dropped
            .fetch_add(sent.dropped, Relaxed);
        self.hub.relay().send(Relay::Channel { channel, text });
        sent
    }

    /// Publish a binary message to a channel's subscribers on this node (the cluster relay
    /// carries text only).
    pub fn publish_binary(self, channel: &str, payload: &[u8]) {
        let subs = self.subscribers(channel);
        let sent = fanout::fan_out(self.hub, OpCode::Binary, payload, subs.iter());
        self.hub
            .metrics
            .publish_dropped
            .fetch_add(sent.dropped, Relaxed);
    }

    /// Publish `data` to `channel` (the channels envelope), with its position when history
    /// is on: what [`Broker::publish_report`] does, and the position it got (None with history
    /// off, or when the supervisor assigns it: the publish is then on its way there).
    pub fn publish_with_position(
        self,
        channel: &str,
        data: &serde_json::Value,
    ) -> (Published, Option<Position>) {
        self.publish_positioned_by(NO_PUBLISHER, channel, &data.to_string())
    }

    /// [`Broker::publish_with_position`] for data given as its JSON text, compact (no line
    /// break or space between tokens, as `serde_json` writes it) and valid, which the caller
    /// checked: a publish's data goes out as it came, never built into a tree of values (a
    /// 16 MiB array of zeros is half a gigabyte as a tree). The HTTP API's: no publisher share.
    pub fn publish_json_with_position(
        self,
        channel: &str,
        data: &str,
    ) -> (Published, Option<Position>) {
        self.publish_positioned_by(NO_PUBLISHER, channel, data)
    }

    /// [`Broker::publish_json_with_position`] by `publisher` (a connection's id): what it
    /// keeps in the history is held to its share of the byte bound
    /// (`history::PUBLISHER_SHARE`). [`NO_PUBLISHER`] (the HTTP API) has no share of its own.
    pub fn publish_positioned_by(
        self,
        publisher: Publisher,
        channel: &str,
        data: &str,
    ) -> (Published, Option<Position>) {
        match self.hub.history.get() {
            Some(store) => store.publish(self.hub, publisher, channel, data),
            None => {
                let name = serde_json::to_string(channel).unwrap_or_default();
                let text = format!("{{\"channel\":{name},\"data\":{data}}}");
                (self.publish_text_delivered(channel, &text), None)
            }
        }
    }

    /// Queue `text` for `conn` alone (a reply made outside its message callback).
    pub fn send_text_to(self, conn: &Arc<Shared>, text: &str) {
        fanout::fan_out(
            self.hub,
            OpCode::Text,
            text.as_bytes(),
            std::iter::once(conn),
        );
    }

    /// Subscribe `conn` to `channel` (capped as [`Broker::subscribe_within`]) and queue its
    /// answer: `{"op":"subscribed","channel":..,"offset":N,"epoch":"E"}` with, when `from` is
    /// given, `"recovered":true` followed by every publication after `from` (then live ones),
    /// or `"recovered":false,"reason":..`. A recovery returns at most the history's
    /// `recover_max` publications and half the connection's send-queue cap in bytes (more
    /// would close it for backpressure). `Err` is the refusal, nothing queued. With history
    /// off there is no position: the caller answers as before.
    pub fn subscribe_recovering(
        self,
        conn: &Arc<Shared>,
        channel: &str,
        cap: usize,
        max_bytes: usize,
        from: Option<&Position>,
    ) -> Result<Recovered, Subscribed> {
        match self.hub.history.get() {
            Some(store) => store.subscribe(self.hub, conn, channel, (cap, max_bytes), from),
            None => match self.subscribe_within(conn, channel, cap, max_bytes) {
                Subscribed::Added | Subscribed::Already => Ok(Recovered::NotAsked),
                refused => Err(refused),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ServerConfig;
    use crate::hub::ChannelPage;
    use crate::metrics::Metrics;

    #[test]
    fn the_subscription_cap_counts_distinct_channels_and_frees_on_unsubscribe() {
        let hub = Hub::new(ServerConfig::default(), Arc::new(Metrics::default()));
        let c = hub.registry().register();
        assert_eq!(hub.broker().subscribe_capped(&c, "a", 2), Subscribed::Added);
        assert_eq!(
            hub.broker().subscribe_capped(&c, "a", 2),
            Subscribed::Already
        );
        assert_eq!(hub.broker().subscribe_capped(&c, "b", 2), Subscribed::Added);
        assert_eq!(hub.broker().subscribe_capped(&c, "c", 2), Subscribed::Full);
        // A channel already held is not refused at the cap.
        assert_eq!(
            hub.broker().subscribe_capped(&c, "b", 2),
            Subscribed::Already
        );
        assert!(hub.broker().unsubscribe(&c, "a"));
        assert_eq!(hub.broker().subscribe_capped(&c, "c", 2), Subscribed::Added);
        let mut counts = hub.presence().channel_counts();
        counts.sort();
        assert_eq!(counts, vec![("b".to_string(), 1), ("c".to_string(), 1)]);
        hub.registry().unregister(&c);
        assert!(hub.presence().channel_counts().is_empty());
        assert_eq!(hub.broker().subscribe_capped(&c, "d", 2), Subscribed::Ended);
    }

    #[test]
    fn the_names_of_a_connections_subscriptions_have_a_byte_budget_and_are_stored_once() {
        let hub = Hub::new(ServerConfig::default(), Arc::new(Metrics::default()));
        let (c, d) = (hub.registry().register(), hub.registry().register());
        let long = "x".repeat(200);
        assert_eq!(
            hub.broker().subscribe_within(&c, &long, 10, 300),
            Subscribed::Added
        );
        assert_eq!(
            hub.broker().subscribe_within(&c, "abc", 10, 300),
            Subscribed::Added
        );
        assert_eq!(
            hub.broker().subscribe_within(&c, &"y".repeat(98), 10, 300),
            Subscribed::NamesFull
        );
        assert_eq!(
            hub.broker().subscribe_within(&c, &"y".repeat(97), 10, 300),
            Subscribed::Added
        );
        // Unsubscribing gives the bytes back.
        assert!(hub.broker().unsubscribe(&c, &long));
        assert_eq!(
            hub.broker().subscribe_within(&c, &"z".repeat(200), 10, 300),
            Subscribed::Added
        );
        // A second subscriber shares the channel's one copy of the name.
        assert_eq!(
            hub.broker().subscribe_within(&d, "abc", 10, 300),
            Subscribed::Added
        );
        let map = hub.channels.lock().unwrap();
        let key = map.subs.get_key_value("abc").unwrap().0;
        for id in [c.id, d.id] {
            let mine = &map.by_conn[&id];
            let n = mine.names.iter().find(|n| &***n == "abc").unwrap();
            assert!(Arc::ptr_eq(n, key));
        }
        // The member table's key, the presence index and the two connections' lists.
        assert_eq!(Arc::strong_count(key), 4);
    }

    #[test]
    fn subscriptions_are_charged_to_the_budget_and_a_full_budget_refuses_a_clients() {
        let metrics = Arc::new(Metrics::default());
        let hub = Hub::new(ServerConfig::default(), metrics.clone());
        let (c, d) = (hub.registry().register(), hub.registry().register());
        let used = || metrics.memory.used_by(Store::Subscriptions);
        assert_eq!(
            hub.broker().subscribe_within(&c, "abc", 10, 300),
            Subscribed::Added
        );
        assert_eq!(used(), subscription_cost(1, 3));
        // Room for one more: the next client subscribe is refused, and counted.
        metrics
            .memory
            .set_limit(metrics.memory.used() + subscription_cost(1, 4));
        assert_eq!(
            hub.broker().subscribe_within(&d, "abcd", 10, 300),
            Subscribed::Added
        );
        assert_eq!(
            hub.broker().subscribe_within(&d, "e", 10, 300),
            Subscribed::OverBudget
        );
        assert_eq!(metrics.memory.refused(Store::Subscriptions), 1);
        assert!(!hub
            .presence()
            .channel_counts()
            .iter()
            .any(|(n, _)| n == "e"));
        // The application's own subscribe is charged but never refused.
        assert_eq!(
            hub.broker().subscribe_capped(&d, "e", 10),
            Subscribed::Added
        );
        assert_eq!(used(), subscription_cost(3, 8));
        // An unsubscribe and an end give it all back.
        assert!(hub.broker().unsubscribe(&d, "e"));
        assert_eq!(used(), subscription_cost(2, 7));
        hub.registry().unregister(&c);
        hub.registry().unregister(&d);
        assert_eq!((used(), metrics.memory.used()), (0, 0));
        let map = hub.channels.lock().unwrap();
        assert!(map.names.is_empty() && map.subs.is_empty() && map.total == 0);
    }

    #[test]
    fn a_presence_page_walks_the_index_from_its_first_name() {
        let hub = Hub::new(ServerConfig::default(), Arc::new(Metrics::default()));
        let (c, d) = (hub.registry().register(), hub.registry().register());
        for name in ["a/1", "a/2", "a/3", "b/1", "a"] {
            hub.broker().subscribe(&c, name);
        }
        hub.broker().subscribe(&d, "a/2");
        let names = |p: &ChannelPage| -> Vec<(String, usize)> {
            p.counts.iter().map(|(n, k)| (n.to_string(), *k)).collect()
        };
        let page = hub.presence().channel_page("a/", None, 2);
        assert_eq!(names(&page), [("a/1".into(), 1), ("a/2".into(), 2)]);
        assert!(page.truncated);
        assert_eq!(page.subscriptions, 6);
        let page = hub.presence().channel_page("a/", Some("a/2"), 2);
        assert_eq!(names(&page), [("a/3".into(), 1)]);
        assert!(!page.truncated);
        // An `after` before the prefix starts at the prefix; one after it past every match
        // gives an empty page.
        assert_eq!(
            hub.presence()
                .channel_page("b/", Some("a/9"), 5)
                .counts
                .len(),
            1
        );
        assert!(hub
            .presence()
            .channel_page("a/", Some("a/9"), 5)
            .counts
            .is_empty());
        assert_eq!(hub.presence().channel_page("", None, 10).counts.len(), 5);
        // A channel that loses its last subscriber leaves the index.
        hub.broker().unsubscribe(&c, "a/1");
        assert_eq!(
            names(&hub.presence().channel_page("a/", None, 1)),
            [("a/2".into(), 2)]
        );
        hub.registry().unregister(&c);
        let page = hub.presence().channel_page("", None, 10);
        assert_eq!(
            (names(&page), page.subscriptions),
            (vec![("a/2".into(), 1)], 1)
        );
    }
}
