//! Requests in flight to agents, kept apart from the table so that an agent's reply needs no
//! table lock: the reply takes its request from its connection's shard and leaves what it
//! taught (the outcome) in a short queue that the next holder of the table lock applies.
//!
//! Why: every reply used to take the table's one lock, which every routed request takes too.
//! When the OS preempted a holder, the other worker thread slept on that lock for a time
//! slice; `bench intent-rr` showed such stalls of 2–24 ms, which is what a p99 is made of.
//! The shards and the queue are held for a map operation or a push, never across a decision.
//!
//! Lock order: the table, then a shard or the queue; a shard and the queue are never held
//! together, and nothing takes the table while holding either.

use foldhash::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::synapse::Outcome;
use crate::client::Client;
use crate::limits;
use crate::sync::lock;

/// Shards of the in-flight map, by the agent connection's id.
const SHARDS: usize = 16;

/// A request handed to an agent, awaiting its reply.
#[derive(Debug)]
pub struct Pending {
    /// The intent it was routed for (the table's key, shared).
    pub(super) intent: Arc<str>,
    /// The agent it was routed to.
    pub(super) agent_id: Arc<str>,
    /// That agent's connection.
    pub(super) client: Arc<Client>,
    /// When it was handed off, in the agents' clock.
    pub(super) started_us: u64,
    /// When it times out.
    pub(super) deadline_us: u64,
}

impl Pending {
    /// The intent it was routed for.
    pub fn intent(&self) -> &str {
        &self.intent
    }

    /// The time the request has taken by `now_us`.
    pub fn elapsed_us(&self, now_us: u64) -> u64 {
        now_us.saturating_sub(self.started_us)
    }
}

/// A finished request whose lesson waits for the table.
#[derive(Debug)]
pub struct Learned {
    /// The request.
    pub pending: Pending,
    /// What it came to.
    pub outcome: Outcome,
    /// When it finished.
    pub at_us: u64,
}

type Shard = HashMap<u64, HashMap<Box<str>, Pending>>;

/// Requests in flight by agent connection and reply subject, and lessons not yet applied.
#[derive(Debug)]
pub struct InFlight {
    shards: Box<[Mutex<Shard>]>,
    learned: Mutex<Vec<Learned>>,
    /// Requests waiting for capacity in the table: while any wait, a reply frees its slot at
    /// once (under the table lock) so the waiting request gets it without delay.
    waiting: AtomicUsize,
}

impl Default for InFlight {
    fn default() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::default())).collect(),
            learned: Mutex::new(Vec::new()),
            waiting: AtomicUsize::new(0),
        }
    }
}

impl InFlight {
    fn shard(&self, connection: u64) -> &Mutex<Shard> {
        // `SHARDS` fits any usize, and the remainder is below it.
        &self.shards[(connection % SHARDS as u64) as usize]
    }

    /// Records a request handed to an agent on `connection` that will answer on `reply`;
    /// returns an older request still in flight on the same reply subject.
    pub fn insert(&self, connection: u64, reply: &str, pending: Pending) -> Option<Pending> {
        pending.client.replies_owed.fetch_add(1, Ordering::Relaxed);
        let older = lock(self.shard(connection)).entry(connection).or_default().insert(reply.into(), pending);
        if let Some(older) = &older {
            older.client.replies_owed.fetch_sub(1, Ordering::Relaxed);
        }
        older
    }

    /// Takes the request that `subject`, published by `connection`, answers.
    pub fn take(&self, connection: u64, subject: &str) -> Option<Pending> {
        let pending = {
            let mut shard = lock(self.shard(connection));
            let of_connection = shard.get_mut(&connection)?;
            let pending = of_connection.remove(subject)?;
            if of_connection.is_empty() {
                shard.remove(&connection);
            }
            pending
        };
        pending.client.replies_owed.fetch_sub(1, Ordering::Relaxed);
        Some(pending)
    }

    /// Forgets the requests in flight to `agent_id` on `connection` (the agent left).
    pub fn forget_agent(&self, connection: u64, agent_id: &str) {
        let mut shard = lock(self.shard(connection));
        let Some(of_connection) = shard.get_mut(&connection) else { return };
        of_connection.retain(|_, pending| {
            let keep = &*pending.agent_id != agent_id;
            if !keep {
                pending.client.replies_owed.fetch_sub(1, Ordering::Relaxed);
            }
            keep
        });
        if of_connection.is_empty() {
            shard.remove(&connection);
        }
    }

    /// Forgets every request in flight on a closed connection.
    pub fn forget_connection(&self, connection: u64) {
        lock(self.shard(connection)).remove(&connection);
    }

    /// Takes every request past its deadline at `now_us`.
    pub fn take_late(&self, now_us: u64) -> Vec<Pending> {
        let mut late = Vec::new();
        for shard in self.shards.iter() {
            let mut shard = lock(shard);
            for of_connection in shard.values_mut() {
                let replies: Vec<Box<str>> =
                    of_connection.iter().filter(|(_, p)| p.deadline_us <= now_us).map(|(r, _)| r.clone()).collect();
                late.extend(replies.iter().filter_map(|reply| of_connection.remove(reply)));
            }
            shard.retain(|_, of_connection| !of_connection.is_empty());
        }
        for pending in &late {
            pending.client.replies_owed.fetch_sub(1, Ordering::Relaxed);
        }
        late
    }

    /// Leaves a lesson for the table; gives it back when the queue is full or a request is
    /// waiting for capacity, for the caller to apply under the table lock at once.
    pub fn defer(&self, learned: Learned) -> Result<(), Learned> {
        if self.waiting.load(Ordering::Acquire) > 0 {
            return Err(learned);
        }
        let mut queue = lock(&self.learned);
        if queue.len() >= limits::AGENT_LESSONS_QUEUED_MAX {
            return Err(learned);
        }
        queue.push(learned);
        Ok(())
    }

    /// Moves the queued lessons into `out` (whose buffer is kept for the next call).
    pub fn drain_into(&self, out: &mut Vec<Learned>) {
        out.clear();
        std::mem::swap(&mut *lock(&self.learned), out);
    }

    /// Counts requests that start or stop waiting for capacity.
    pub fn set_waiting(&self, waiting: usize) {
        self.waiting.store(waiting, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{Shed, SubjectTraffic};

    fn client(id: u64) -> Arc<Client> {
        let addr = "127.0.0.1:4222".parse().expect("address");
        Arc::new(Client::new(
            id,
            addr,
            1 << 20,
            false,
            Arc::new(Shed::default()),
            Arc::new(SubjectTraffic::new(0)),
            Arc::default(),
        ))
    }

    fn pending(client: &Arc<Client>, agent: &str, deadline_us: u64) -> Pending {
        Pending { intent: "pay".into(), agent_id: agent.into(), client: client.clone(), started_us: 0, deadline_us }
    }

    fn owed(client: &Client) -> usize {
        client.replies_owed.load(Ordering::Relaxed)
    }

    #[test]
    fn a_reply_takes_its_request_once_and_only_from_the_agents_connection() {
        let (in_flight, agent) = (InFlight::default(), client(7));
        assert!(in_flight.insert(7, "_INBOX.a", pending(&agent, "a1", 100)).is_none());
        assert_eq!(owed(&agent), 1);
        assert!(in_flight.take(8, "_INBOX.a").is_none(), "another connection cannot answer it");
        assert_eq!(in_flight.take(7, "_INBOX.a").map(|p| p.elapsed_us(40)), Some(40));
        assert!(in_flight.take(7, "_INBOX.a").is_none());
        assert_eq!(owed(&agent), 0);
    }

    #[test]
    fn a_reused_reply_subject_hands_back_the_older_request() {
        let (in_flight, agent) = (InFlight::default(), client(1));
        in_flight.insert(1, "r", pending(&agent, "a1", 100));
        let older = in_flight.insert(1, "r", pending(&agent, "a2", 100));
        assert_eq!(older.map(|p| p.agent_id), Some("a1".into()));
        assert_eq!(owed(&agent), 1);
    }

    #[test]
    fn late_requests_and_departed_agents_are_forgotten_with_their_debts() {
        let (in_flight, agent) = (InFlight::default(), client(3));
        in_flight.insert(3, "early", pending(&agent, "a1", 10));
        in_flight.insert(3, "late", pending(&agent, "a1", 1_000));
        in_flight.insert(3, "other", pending(&agent, "a2", 1_000));
        let late: Vec<u64> = in_flight.take_late(10).iter().map(|p| p.deadline_us).collect();
        assert_eq!(late, [10]);
        in_flight.forget_agent(3, "a1");
        assert!(in_flight.take(3, "late").is_none());
        assert_eq!(owed(&agent), 1, "a2's request is still owed");
        in_flight.forget_connection(3);
        assert!(in_flight.take(3, "other").is_none());
    }

    #[test]
    fn lessons_wait_for_the_table_unless_a_request_waits_for_capacity() {
        let (in_flight, agent) = (InFlight::default(), client(1));
        let lesson =
            |agent: &Arc<Client>| Learned { pending: pending(agent, "a1", 9), outcome: Outcome::Error, at_us: 5 };
        assert!(in_flight.defer(lesson(&agent)).is_ok());
        in_flight.set_waiting(1);
        assert!(in_flight.defer(lesson(&agent)).is_err(), "a waiting request needs the slot now");
        in_flight.set_waiting(0);
        let mut drained = Vec::new();
        in_flight.drain_into(&mut drained);
        assert_eq!(drained.len(), 1);
        in_flight.drain_into(&mut drained);
        assert!(drained.is_empty());
    }

    #[test]
    fn the_lesson_queue_is_bounded() {
        let (in_flight, agent) = (InFlight::default(), client(1));
        for _ in 0..limits::AGENT_LESSONS_QUEUED_MAX {
            let lesson = Learned { pending: pending(&agent, "a1", 9), outcome: Outcome::Timeout, at_us: 1 };
            assert!(in_flight.defer(lesson).is_ok());
        }
        let one_more = Learned { pending: pending(&agent, "a1", 9), outcome: Outcome::Timeout, at_us: 1 };
        assert!(in_flight.defer(one_more).is_err());
    }
}
