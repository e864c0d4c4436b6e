//! What a consumer has delivered, what awaits an ack, and who is waiting for messages.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use super::ahead::ReadAhead;
use super::persist::SavedState;
use super::validate;
use crate::filter::Filter;
use crate::jetstream::config::{ConsumerConfig, DeliverPolicy};
use crate::jetstream::stream::Stream;

/// One delivered message awaiting its ack.
#[derive(Debug, Clone)]
pub struct Pending {
    /// Consumer sequence of the latest delivery.
    pub consumer_seq: u64,
    /// Deliveries so far.
    pub deliveries: u64,
    /// When it is redelivered unless acked; `None` while queued for redelivery.
    pub deadline: Option<Instant>,
}

/// A pull request (`CONSUMER.MSG.NEXT`) waiting for messages.
#[derive(Debug, Clone)]
pub struct PullRequest {
    /// Where messages and status replies go.
    pub reply: String,
    /// Messages still wanted.
    pub batch_remaining: u64,
    /// Bytes still wanted, when limited.
    pub bytes_remaining: Option<u64>,
    /// When it ends with `408 Request Timeout`.
    pub expires: Option<Instant>,
    /// End with `404 No Messages` as soon as nothing is available.
    pub no_wait: bool,
    /// Interval of `100 Idle Heartbeat` status messages while idle.
    pub heartbeat: Option<Duration>,
    /// When the next heartbeat is due.
    pub next_heartbeat: Option<Instant>,
    /// Messages delivered to it so far.
    pub delivered: u64,
    /// Its priority group fields (nats-server 2.11).
    pub group: super::groups::PullGroup,
}

/// Matching messages from `from` to `last_seq`, counted while `removed` sequences (below
/// `last_seq`) held nothing.
#[derive(Debug, Clone, Copy)]
pub struct PendingCount {
    /// First sequence counted.
    pub from: u64,
    /// The stream's last sequence then.
    pub last_seq: u64,
    /// The stream's last sequence minus its message count then.
    pub removed: u64,
    /// Matching messages in `from..=last_seq`.
    pub count: u64,
}

/// A consumer's delivery state.
#[derive(Debug, Default)]
pub struct State {
    /// Messages of the current pump round taken off `num_pending` but not yet handed to the
    /// bus: consumer info waits for them, as nats-server's info never shows a message
    /// delivered before it is queued to the client (nats-py's KV watch reads `num_pending`
    /// right after subscribing, and ends its initial values early otherwise).
    pub in_transit: u64,
    /// Next stream sequence to read for a first delivery. A priority-ordered consumer's reads
    /// may run ahead of its deliveries: see `resume_seq`.
    pub next_seq: u64,
    /// Messages read ahead by a priority-ordered consumer, not yet delivered.
    pub ahead: ReadAhead,
    /// Stream sequences still to deliver first, in order (deliver policy `last_per_subject`).
    pub initial: VecDeque<u64>,
    /// Highest consumer sequence assigned.
    pub delivered_consumer_seq: u64,
    /// Stream sequence of the latest delivery.
    pub delivered_stream_seq: u64,
    /// Everything at or below this consumer sequence is acknowledged.
    pub ack_floor_consumer_seq: u64,
    /// Everything at or below this stream sequence is acknowledged.
    pub ack_floor_stream_seq: u64,
    /// Deliveries awaiting an ack, by stream sequence. Change only through the methods below,
    /// which keep `deadlines` in step.
    pub pending: BTreeMap<u64, Pending>,
    /// (deadline, stream sequence) of every pending delivery that has one, earliest first, so
    /// finding what is due never scans all pending deliveries.
    deadlines: BTreeSet<(Instant, u64)>,
    /// Stream sequences due for redelivery, oldest first.
    pub redeliveries: BTreeSet<u64>,
    /// Pull requests, oldest first.
    pub waiting: VecDeque<PullRequest>,
    /// Last time a client showed interest (pull request, ack, push subscriber).
    pub last_activity: Option<Instant>,
    /// When the latest delivery went out (consumer info's `delivered.last_active`).
    pub last_delivered: Option<Instant>,
    /// When the latest ack was applied (consumer info's `ack_floor.last_active`).
    pub last_acked: Option<Instant>,
    /// Whether a push consumer's deliver subject has a subscriber.
    pub push_bound: bool,
    /// A flow-control request awaits its response (push).
    pub flow_control_outstanding: Option<u64>,
    /// Bytes delivered and not yet confirmed by a flow-control response.
    pub flow_control_pending_bytes: u64,
    /// Pending bytes the outstanding request confirms once answered.
    pub flow_control_request_bytes: u64,
    /// Pending bytes past which delivery waits for a response (0: not started yet).
    pub flow_control_window_bytes: u64,
    /// The pending count after the latest delivery, kept to count the next one cheaply.
    pub pending_count: Option<PendingCount>,
    /// Flow-control requests sent.
    pub flow_control_count: u64,
    /// Last push delivery or heartbeat.
    pub last_push: Option<Instant>,
    /// Changed since last saved.
    pub dirty: bool,
    /// Stream sequences skipped by the content filter in this round, reported to the stream as
    /// acknowledged once the state is released (at most `FILTER_SKIP_MESSAGES_MAX`).
    pub skipped: Vec<u64>,
    /// Highest stream sequence the content filter skipped: the ack floor may rise to it once
    /// nothing below it is pending.
    pub skipped_through: u64,
    /// A `pinned_client` consumer's pinned client.
    pub pin: Option<super::groups::Pin>,
}

impl State {
    /// The starting position for a new consumer, by its deliver policy.
    pub fn positioned(stream: &Stream, config: &ConsumerConfig) -> Self {
        let store = stream.store();
        let stream_state = store.state();
        let first = stream_state.first_seq.max(1);
        let mut state = State { last_activity: Some(Instant::now()), ..State::default() };
        state.next_seq = match config.deliver_policy {
            DeliverPolicy::All => first,
            DeliverPolicy::New => stream_state.last_seq + 1,
            DeliverPolicy::ByStartSequence => config.opt_start_seq.unwrap_or(first).max(first),
            DeliverPolicy::ByStartTime => {
                let start_ns = config.opt_start_time.as_deref().and_then(semaq_wire::clock::parse_rfc3339).unwrap_or(0);
                first_at_or_after(&**store, start_ns, first, stream_state.last_seq)
            }
            DeliverPolicy::Last => {
                let filters = validate::filters(config);
                let last = filters
                    .iter()
                    .filter_map(|filter| store.get_last_for_subject(filter).ok().flatten().map(|m| m.seq))
                    .max();
                last.unwrap_or(stream_state.last_seq + 1)
            }
            DeliverPolicy::LastPerSubject => {
                let mut seqs = BTreeSet::new();
                for filter in validate::filters(config) {
                    for subject in store.subjects_state(Some(&filter)).keys() {
                        if let Ok(Some(message)) = store.get_last_for_subject(subject) {
                            seqs.insert(message.seq);
                        }
                    }
                }
                state.initial = seqs.into_iter().collect();
                stream_state.last_seq + 1
            }
        };
        state.ack_floor_stream_seq = state.next_seq.saturating_sub(1);
        state.delivered_stream_seq = state.ack_floor_stream_seq;
        state
    }

    /// State read back from disk; pending deliveries are redelivered after one ack wait.
    /// A position past the stream's end (its tail was lost in a crash, so those sequences will
    /// be used again) is pulled back to the end, so the consumer does not skip new messages.
    pub fn restore(mut saved: SavedState, ack_wait: Duration, stream_last_seq: u64) -> Self {
        if saved.next_seq > stream_last_seq + 1 {
            tracing::warn!("consumer state is past the stream's last sequence {stream_last_seq}; resuming from there");
            saved.next_seq = stream_last_seq + 1;
            saved.delivered_stream_seq = saved.delivered_stream_seq.min(stream_last_seq);
            saved.ack_floor_stream_seq = saved.ack_floor_stream_seq.min(stream_last_seq);
            saved.pending.retain(|(seq, _, _)| *seq <= stream_last_seq);
        }
        let deadline = Instant::now() + ack_wait;
        let pending: BTreeMap<u64, Pending> = saved
            .pending
            .into_iter()
            .map(|(stream_seq, consumer_seq, deliveries)| {
                (stream_seq, Pending { consumer_seq, deliveries, deadline: Some(deadline) })
            })
            .collect();
        let deadlines = pending.keys().map(|seq| (deadline, *seq)).collect();
        State {
            deadlines,
            next_seq: saved.next_seq,
            delivered_consumer_seq: saved.delivered_consumer_seq,
            delivered_stream_seq: saved.delivered_stream_seq,
            ack_floor_consumer_seq: saved.ack_floor_consumer_seq,
            ack_floor_stream_seq: saved.ack_floor_stream_seq,
            pending,
            last_activity: Some(Instant::now()),
            ..State::default()
        }
    }

    /// What is saved for a durable consumer.
    pub fn save(&self) -> SavedState {
        SavedState {
            next_seq: self.resume_seq(),
            delivered_consumer_seq: self.delivered_consumer_seq,
            delivered_stream_seq: self.delivered_stream_seq,
            ack_floor_consumer_seq: self.ack_floor_consumer_seq,
            ack_floor_stream_seq: self.ack_floor_stream_seq,
            pending: self.pending.iter().map(|(seq, p)| (*seq, p.consumer_seq, p.deliveries)).collect(),
        }
    }

    /// Tracks a delivery awaiting its ack.
    pub fn insert_pending(&mut self, seq: u64, pending: Pending) {
        self.remove_pending(seq);
        if let Some(at) = pending.deadline {
            self.deadlines.insert((at, seq));
        }
        self.pending.insert(seq, pending);
    }

    /// Stops tracking a delivery (acked, terminated, gone from the stream, out of deliveries).
    pub fn remove_pending(&mut self, seq: u64) -> Option<Pending> {
        let removed = self.pending.remove(&seq)?;
        if let Some(at) = removed.deadline {
            self.deadlines.remove(&(at, seq));
        }
        self.redeliveries.remove(&seq);
        Some(removed)
    }

    /// A purge moved this consumer to `first_seq`: what lies below counts as delivered and
    /// acknowledged, as nats-server's `consumer.purge` has it (never backwards); `gone` says
    /// which pending deliveries above it the purge removed too (a purge narrower than the
    /// consumer's filters), which are then dropped as well.
    pub fn stream_purged(&mut self, first_seq: u64, gone: &dyn Fn(u64) -> bool) {
        let floor = first_seq.saturating_sub(1);
        self.next_seq = self.next_seq.max(first_seq);
        self.delivered_stream_seq = self.delivered_stream_seq.max(floor);
        self.ahead.forget_below(first_seq);
        self.initial.retain(|seq| *seq >= first_seq);
        if self.ack_floor_stream_seq < floor {
            self.ack_floor_stream_seq = floor;
            let dropped: Vec<u64> = self.pending.keys().copied().filter(|&seq| seq < first_seq || gone(seq)).collect();
            for seq in dropped {
                if let Some(pending) = self.remove_pending(seq) {
                    self.ack_floor_consumer_seq = self.ack_floor_consumer_seq.max(pending.consumer_seq);
                }
            }
        }
        if self.pending.is_empty() {
            self.ack_floor_consumer_seq = self.delivered_consumer_seq;
            self.ack_floor_stream_seq = self.ack_floor_stream_seq.max(self.delivered_stream_seq);
        }
        self.pending_count = None;
        self.dirty = true;
    }

    /// Moves a pending delivery's redelivery time; `None` while it waits in the redelivery queue.
    pub fn set_deadline(&mut self, seq: u64, deadline: Option<Instant>) {
        let Some(pending) = self.pending.get_mut(&seq) else { return };
        if let Some(at) = pending.deadline {
            self.deadlines.remove(&(at, seq));
        }
        pending.deadline = deadline;
        if let Some(at) = deadline {
            self.deadlines.insert((at, seq));
        }
    }

    /// Pending deliveries whose deadline is at or before `now`.
    pub fn due(&self, now: Instant) -> Vec<u64> {
        self.deadlines.iter().take_while(|(at, _)| *at <= now).map(|(_, seq)| *seq).collect()
    }

    /// The earliest redelivery time.
    pub fn earliest_deadline(&self) -> Option<Instant> {
        self.deadlines.first().map(|(at, _)| *at)
    }

    /// Deliveries that were redelivered at least once.
    pub fn num_redelivered(&self) -> usize {
        self.pending.values().filter(|p| p.deliveries > 1).count()
    }

    /// Messages in the stream not yet delivered to this consumer (matching its filters).
    /// With a content filter, only messages passing it count (the scan is bounded).
    pub fn num_pending(&self, stream: &Stream, config: &ConsumerConfig, filter: Option<&Filter>) -> u64 {
        let store = stream.store();
        let stream_state = store.state();
        let from = self.next_seq.max(stream_state.first_seq);
        let initial = (self.initial.len() + self.ahead.len()) as u64;
        if stream_state.last_seq < from {
            return initial;
        }
        if filter.is_none() && validate::filters(config).iter().any(|f| f == ">") {
            // Messages from the read position on; deletes below it do not count against them.
            return initial + stream_state.msgs.min(stream_state.last_seq - from + 1);
        }
        if filter.is_none() {
            // Subject filters only: counted from the store's metadata, no message read.
            let scan_max = crate::limits::NUM_PENDING_SCAN_MESSAGES_MAX as u64;
            let counts = validate::filters(config)
                .iter()
                .map(|f| store.count_matching(from..u64::MAX, Some(f), scan_max))
                .collect::<Option<Vec<u64>>>();
            if let Some(counts) = counts {
                return initial + counts.iter().sum::<u64>();
            }
        }
        // Content-filtered, or too many to count from the metadata: read each matching message
        // (the scan is bounded).
        let mut count = 0;
        let mut seq = from;
        let mut steps = 0;
        let filters = Some(&*stream.services().filters);
        let passes = |f: &Filter, m: &_| crate::filter::evaluate_stored(filters, f, m).matched();
        while let Ok(Some(message)) = next_matching(&**store, seq, config) {
            count += u64::from(filter.is_none_or(|f| passes(f, &message)));
            seq = message.seq + 1;
            steps += 1;
            if steps >= crate::limits::NUM_PENDING_SCAN_MESSAGES_MAX {
                break;
            }
        }
        initial + count
    }

    /// Where first deliveries resume after a restart: the lowest message read ahead and not yet
    /// delivered, else the read position.
    pub fn resume_seq(&self) -> u64 {
        self.ahead.first().map_or(self.next_seq, |first| first.min(self.next_seq))
    }

    /// The highest the ack floor may be: below every message read ahead and not yet delivered.
    pub fn ack_floor_cap(&self) -> u64 {
        self.ahead.first().map_or(u64::MAX, |first| first.saturating_sub(1))
    }

    /// Whether `seq` is acknowledged (or skipped) by this consumer.
    pub fn has_acked(&self, seq: u64) -> bool {
        seq <= self.ack_floor_stream_seq
            || (seq < self.next_seq && !self.pending.contains_key(&seq) && !self.ahead.contains(seq))
    }

    /// Moves the ack floor up to just below the oldest pending delivery.
    pub fn update_ack_floor(&mut self) {
        let cap = self.ack_floor_cap();
        match self.pending.iter().next() {
            Some((seq, pending)) => {
                self.ack_floor_stream_seq = seq.saturating_sub(1).min(cap);
                self.ack_floor_consumer_seq = pending.consumer_seq.saturating_sub(1);
            }
            None => {
                let floor = self.delivered_stream_seq.max(self.skipped_through).min(cap);
                self.ack_floor_stream_seq = floor.max(self.ack_floor_stream_seq);
                self.ack_floor_consumer_seq = self.delivered_consumer_seq;
            }
        }
        self.dirty = true;
    }
}

/// The first message at or after `from` matching the consumer's filters.
pub fn next_matching(
    store: &dyn semaq_store::StreamStore,
    from: u64,
    config: &ConsumerConfig,
) -> semaq_store::StoreResult<Option<semaq_store::StoredMessage>> {
    let filters = validate::filters(config);
    if filters.len() == 1 {
        let filter = filters[0].as_str();
        return store.get_next(from, (filter != ">").then_some(filter));
    }
    let mut best: Option<semaq_store::StoredMessage> = None;
    for filter in &filters {
        if let Some(message) = store.get_next(from, Some(filter))? {
            if best.as_ref().is_none_or(|b| message.seq < b.seq) {
                best = Some(message);
            }
        }
    }
    Ok(best)
}

/// Binary search for the first sequence whose message is at or after `start_ns`.
fn first_at_or_after(store: &dyn semaq_store::StreamStore, start_ns: i64, first: u64, last: u64) -> u64 {
    let (mut low, mut high) = (first, last + 1);
    while low < high {
        let middle = low + (high - low) / 2;
        match store.get_next(middle, None) {
            Ok(Some(message)) if message.timestamp_ns < start_ns => low = message.seq + 1,
            Ok(Some(_)) => high = middle,
            _ => high = middle,
        }
    }
    low
}
