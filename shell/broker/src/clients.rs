//! Who is connected: producer and consumer groups learned from heartbeats, their
//! subscriptions, and the queue locks of orderly consumers.
//!
//! A client is known by its connection. When a connection closes, or a client stays silent
//! past the expiry, it leaves its groups, and the remaining members of a consumer group are
//! told to rebalance (NOTIFY_CONSUMER_IDS_CHANGED).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tern_shell::sync::MutexExt;

use async_lock::{Semaphore, SemaphoreGuardArc};

use tern_engine::hash::java_string_hash;
use tern_shell::Connection;
use tern_shell::body::{
    ConsumeFromWhere, ConsumeType, ConsumerData, HeartbeatData, MessageModel, MessageQueue,
    SubscriptionData,
};
use tern_shell::code::LanguageCode;

/// How long a queue lock lasts without renewal (RocketMQ's `rebalanceLockMaxLiveTime`).
pub const LOCK_EXPIRY: Duration = Duration::from_secs(60);

/// Most broker-to-client notifications (NOTIFY_CONSUMER_IDS_CHANGED) being written at
/// once, broker-wide: RocketMQ's `serverOnewaySemaphoreValue`. Each is bounded by the
/// connection's write timeout; past this many, a notification is dropped, as RocketMQ
/// drops a oneway that gets no permit. A member that misses one still rebalances on
/// its own timer (20 s in RocketMQ's clients).
pub const MAX_NOTIFY_IN_FLIGHT: usize = 256;

/// One connected client in a group.
#[derive(Debug, Clone)]
pub struct Member {
    /// The connection it talks on.
    pub conn: Connection,
    /// Its client id.
    pub client_id: String,
    /// Its language.
    pub language: LanguageCode,
    /// Its version ordinal.
    pub version: i32,
    /// Last heartbeat.
    pub last_seen: Instant,
}

/// A consumer group as the broker knows it.
#[derive(Debug, Clone, Default)]
pub struct ConsumerGroup {
    /// Members by connection id.
    pub members: HashMap<u64, Member>,
    /// topic → subscription (from the newest heartbeat).
    pub subscriptions: BTreeMap<String, SubscriptionData>,
    /// Push or pull.
    pub consume_type: ConsumeType,
    /// Clustering or broadcasting.
    pub message_model: MessageModel,
    /// Where new consumers start.
    pub consume_from_where: ConsumeFromWhere,
}

impl ConsumerGroup {
    /// Client ids, sorted as Java sorts them (allocation strategies depend on it).
    pub fn client_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.members.values().map(|m| m.client_id.clone()).collect();
        ids.sort_by(|a, b| a.encode_utf16().cmp(b.encode_utf16()));
        ids.dedup();
        ids
    }
}

/// Tag codes recomputed from a subscription's tags: the C++ client sends `atoi(tag)`.
pub fn normalize_subscription(mut s: SubscriptionData) -> SubscriptionData {
    if s.expression_type_or_tag().eq_ignore_ascii_case("TAG") {
        let tags = if s.tags_set.is_empty() {
            SubscriptionData::parse_tags(&s.sub_string)
        } else {
            s.tags_set.iter().map(|t| t.trim().to_owned()).collect()
        };
        s.code_set = tags.iter().map(|t| java_string_hash(t)).collect();
        s.tags_set = tags;
        if s.sub_string.trim().is_empty() {
            s.sub_string = "*".into();
        }
    }
    s
}

#[derive(Debug, Default)]
struct Tables {
    consumers: HashMap<String, ConsumerGroup>,
    producers: HashMap<String, HashMap<u64, Member>>,
    /// Connections with a watcher task already.
    watched: HashSet<u64>,
    /// group → queue → (client id, last renewal).
    locks: HashMap<String, HashMap<MessageQueue, (String, Instant)>>,
}

/// The client registry.
#[derive(Debug)]
pub struct Clients {
    tables: Mutex<Tables>,
    /// Slots for notifications being written ([`MAX_NOTIFY_IN_FLIGHT`]).
    notify_slots: Arc<Semaphore>,
}

impl Default for Clients {
    fn default() -> Self {
        Self {
            tables: Mutex::default(),
            notify_slots: Arc::new(Semaphore::new(MAX_NOTIFY_IN_FLIGHT)),
        }
    }
}

impl Clients {
    fn lock(&self) -> std::sync::MutexGuard<'_, Tables> {
        self.tables.guard()
    }

    /// Records a heartbeat. Returns the consumer groups whose membership changed, and
    /// whether the connection is new (the caller then watches it for close).
    pub fn heartbeat(
        &self,
        conn: &Connection,
        language: LanguageCode,
        version: i32,
        hb: &HeartbeatData,
    ) -> (Vec<String>, bool) {
        let now = Instant::now();
        let member = Member {
            conn: conn.clone(),
            client_id: hb.client_id.clone(),
            language,
            version,
            last_seen: now,
        };
        let mut t = self.lock();
        let mut changed = Vec::new();
        for p in &hb.producer_data_set {
            t.producers
                .entry(p.group_name.clone())
                .or_default()
                .insert(conn.id(), member.clone());
        }
        for c in &hb.consumer_data_set {
            let g = t.consumers.entry(c.group_name.clone()).or_default();
            let is_new = g.members.insert(conn.id(), member.clone()).is_none();
            apply_consumer_data(g, c);
            if is_new {
                changed.push(c.group_name.clone());
            }
        }
        let new_conn = t.watched.insert(conn.id());
        (changed, new_conn)
    }

    /// Removes a client from the named groups (UNREGISTER_CLIENT). Returns consumer
    /// groups that lost a member.
    pub fn unregister(
        &self,
        conn_id: u64,
        producer_group: Option<&str>,
        consumer_group: Option<&str>,
    ) -> Vec<String> {
        let mut t = self.lock();
        if let Some(g) = producer_group.filter(|g| !g.is_empty()) {
            if let Some(p) = t.producers.get_mut(g) {
                p.remove(&conn_id);
            }
        }
        let mut changed = Vec::new();
        if let Some(g) = consumer_group.filter(|g| !g.is_empty()) {
            if let Some(c) = t.consumers.get_mut(g) {
                if c.members.remove(&conn_id).is_some() {
                    changed.push(g.to_owned());
                }
            }
        }
        t.consumers.retain(|_, g| !g.members.is_empty());
        changed
    }

    /// Removes every registration of a closed connection. Returns consumer groups that
    /// lost a member.
    pub fn connection_closed(&self, conn_id: u64) -> Vec<String> {
        let mut t = self.lock();
        t.watched.remove(&conn_id);
        for p in t.producers.values_mut() {
            p.remove(&conn_id);
        }
        let mut changed = Vec::new();
        for (name, g) in t.consumers.iter_mut() {
            if g.members.remove(&conn_id).is_some() {
                changed.push(name.clone());
            }
        }
        t.consumers.retain(|_, g| !g.members.is_empty());
        t.producers.retain(|_, p| !p.is_empty());
        changed
    }

    /// Drops clients silent for longer than `expiry`. Returns their connections (to close)
    /// and the consumer groups that lost members.
    pub fn expire(&self, expiry: Duration) -> (Vec<Connection>, Vec<String>) {
        let now = Instant::now();
        let mut t = self.lock();
        let mut dead = Vec::new();
        let mut changed = Vec::new();
        for (name, g) in t.consumers.iter_mut() {
            let before = g.members.len();
            g.members.retain(|_, m| {
                let alive = now.duration_since(m.last_seen) < expiry;
                if !alive {
                    dead.push(m.conn.clone());
                }
                alive
            });
            if g.members.len() != before {
                changed.push(name.clone());
            }
        }
        for p in t.producers.values_mut() {
            p.retain(|_, m| {
                let alive = now.duration_since(m.last_seen) < expiry;
                if !alive {
                    dead.push(m.conn.clone());
                }
                alive
            });
        }
        t.consumers.retain(|_, g| !g.members.is_empty());
        t.producers.retain(|_, p| !p.is_empty());
        (dead, changed)
    }

    /// A slot for writing one notification to a client, if one is free
    /// ([`MAX_NOTIFY_IN_FLIGHT`]); held until the write is done.
    pub fn notify_slot(&self) -> Option<SemaphoreGuardArc> {
        self.notify_slots.try_acquire_arc()
    }

    /// The connections of a consumer group's members, with their client ids.
    pub fn consumer_connections(&self, group: &str) -> Vec<(String, Connection)> {
        self.lock()
            .consumers
            .get(group)
            .map(|g| {
                g.members
                    .values()
                    .map(|m| (m.client_id.clone(), m.conn.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// A snapshot of a consumer group.
    pub fn consumer_group(&self, group: &str) -> Option<ConsumerGroup> {
        self.lock().consumers.get(group).cloned()
    }

    /// Names of every consumer group with members.
    pub fn consumer_groups(&self) -> Vec<String> {
        self.lock().consumers.keys().cloned().collect()
    }

    /// The group's subscription to `topic`, from heartbeats.
    pub fn subscription(&self, group: &str, topic: &str) -> Option<SubscriptionData> {
        self.lock()
            .consumers
            .get(group)
            .and_then(|g| g.subscriptions.get(topic).cloned())
    }

    /// Producer and consumer connections (a connection counted once per group it
    /// belongs to, as RocketMQ's connection gauges count them).
    pub fn connection_counts(&self) -> (usize, usize) {
        let st = self.lock();
        (
            st.producers.values().map(HashMap::len).sum(),
            st.consumers.values().map(|g| g.members.len()).sum(),
        )
    }

    /// The connection of the producer whose client id is `client_id`, in any group
    /// (RocketMQ's `ProducerManager.findChannel`: replies go to the requester).
    pub fn producer_connection(&self, client_id: &str) -> Option<Connection> {
        self.lock()
            .producers
            .values()
            .flat_map(HashMap::values)
            .find(|m| m.client_id == client_id)
            .map(|m| m.conn.clone())
    }

    /// Connections of a producer group (transaction check-backs go to one of them).
    pub fn producer_members(&self, group: &str) -> Vec<Member> {
        self.lock()
            .producers
            .get(group)
            .map(|p| p.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Locks `mqs` for `client_id` in `group`; returns those now held by it. A lock held
    /// by another live client is refused; an expired one is taken over.
    pub fn lock_queues(
        &self,
        group: &str,
        client_id: &str,
        mqs: &[MessageQueue],
    ) -> Vec<MessageQueue> {
        let now = Instant::now();
        let mut t = self.lock();
        let locks = t.locks.entry(group.to_owned()).or_default();
        let mut ok = Vec::with_capacity(mqs.len());
        for mq in mqs {
            match locks.get_mut(mq) {
                Some((owner, at)) if owner == client_id => {
                    *at = now;
                    ok.push(mq.clone());
                }
                Some((_, at)) if now.duration_since(*at) < LOCK_EXPIRY => {}
                _ => {
                    locks.insert(mq.clone(), (client_id.to_owned(), now));
                    ok.push(mq.clone());
                }
            }
        }
        ok
    }

    /// Releases the locks `client_id` holds on `mqs` in `group`.
    pub fn unlock_queues(&self, group: &str, client_id: &str, mqs: &[MessageQueue]) {
        let mut t = self.lock();
        if let Some(locks) = t.locks.get_mut(group) {
            for mq in mqs {
                if locks.get(mq).is_some_and(|(owner, _)| owner == client_id) {
                    locks.remove(mq);
                }
            }
        }
    }
}

fn apply_consumer_data(g: &mut ConsumerGroup, c: &ConsumerData) {
    g.consume_type = c.consume_type.clone();
    g.message_model = c.message_model.clone();
    g.consume_from_where = c.consume_from_where.clone();
    for s in &c.subscription_data_set {
        let s = normalize_subscription(s.clone());
        match g.subscriptions.get(&s.topic) {
            Some(old) if old.sub_version > s.sub_version => {}
            _ => {
                g.subscriptions.insert(s.topic.clone(), s);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notifications_in_flight_are_bounded() {
        let c = Clients::default();
        let held: Vec<_> = (0..MAX_NOTIFY_IN_FLIGHT)
            .map(|_| c.notify_slot().expect("a free slot"))
            .collect();
        assert!(c.notify_slot().is_none(), "all taken");
        drop(held);
        assert!(c.notify_slot().is_some(), "given back when written");
    }

    #[test]
    fn cpp_tag_codes_are_recomputed_from_the_expression() {
        let s = SubscriptionData {
            topic: "t".into(),
            sub_string: "TagA || TagB".into(),
            code_set: vec![0, 0],
            ..Default::default()
        };
        let n = normalize_subscription(s);
        assert_eq!(n.tags_set, vec!["TagA", "TagB"]);
        assert_eq!(
            n.code_set,
            vec![java_string_hash("TagA"), java_string_hash("TagB")]
        );
    }
}
