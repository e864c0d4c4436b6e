//! The ingest path: a drained batch of inbound messages checked (L2 schema, L3 producer
//! sequence, dedup, expected headers, limits), appended to the store, committed (in place or
//! through the pipeline) and acknowledged.

use super::*;

impl Stream {
    /// Checks and appends a batch, then commits it, leaving its acks in `acks`. Pipelined
    /// (`commits`: the stream's pipeline), the commit is left to the caller when it needs an
    /// fsync or must wait behind acks waiting for one: returns the last sequence it must cover.
    pub(super) fn store_batch(
        &self,
        batch: &mut Vec<Inbound>,
        (dedup, batches): (&mut Dedup, &mut Batches),
        acks: &mut Vec<PendingAck>,
        commits: Option<&Pipeline>,
    ) -> Option<u64> {
        let config = self.config();
        // L4 lineage, before the store lock: resolving a parent's Msg-Id reads other streams.
        let mut parents = crate::jetstream::lineage::Parents::check(self, &config, batch);
        let window_ns = self.duplicate_window_ns();
        // Before this stream's store lock: the quota reads the other streams' usage.
        let quota = self.jetstream().and_then(|jetstream| Quota::for_stream(&jetstream, self, config.storage));
        // L3: no producer entry is recorded while a removal's last snapshot round holds this
        // back (`stream/snapshot.rs`); taken before the store's lock (lock order).
        let _ingest = self.hold_ingest();
        // L3: a snapshot the batch's appends could need, before the lock is taken for it.
        let mut snapshot_failed = self.snapshot_before_batch(&config, batch, batches);
        let mut store = self.store();
        if !commits.is_some_and(Pipeline::busy) {
            self.take_drop_report(store.as_mut(), dedup);
        }
        let now = clock::unix_nanos_now();
        dedup.expire(now, window_ns);
        // Interest streams keep only what some consumer wants (nats-server's "no interest" skip).
        let interest: Option<Vec<Arc<crate::jetstream::config::ConsumerConfig>>> = (config.retention
            == crate::jetstream::config::Retention::Interest)
            .then(|| self.consumers().iter().map(|c| c.config()).collect());
        // L2: the bound schema version, resolved once per batch (None for unbound streams).
        let mut schema = crate::jetstream::schema::for_stream(&self.services, &config);
        let mut chain;
        let mut part = Part { quota, ..Part::default() };
        let mut messages = batch.drain(..).enumerate();
        // One round per part of the batch: an L3 snapshot splits it (`stream/split.rs`).
        loop {
            let mut producers = lock(&self.producers);
            if config.exactly_once() {
                // Also after an update raised the stream to L3. Its snapshot is left to the
                // unlocked paths: readers wait on this lock.
                producers.ensure_loaded_unwritten(store.as_mut());
            }
            // L4: the hash chain, held for the part (lock order: store, then chain).
            chain = self.provenance.as_deref().map(|provenance| provenance.writer(&config));
            let mut ingest = Ingest {
                config: &config,
                store: store.as_mut(),
                dedup: &mut *dedup,
                producers: &mut producers,
                schema: schema.as_mut(),
                chain: chain.as_mut(),
                interest: interest.as_deref(),
                now,
                window_ns,
                deferred_deletes: None,
                quota: part.quota.take(),
                held: Some(Vec::new()),
                snapshot_failed: snapshot_failed.clone(),
                purged: false,
            };
            let split = self.store_part(&mut ingest, &mut messages, (&mut parents, &mut *batches), acks, &mut part);
            part.quota = ingest.quota.take();
            part.purged |= ingest.purged;
            let held = ingest.held.take().unwrap_or_default();
            drop(ingest);
            drop(producers);
            if !split {
                break;
            }
            // The chain goes with the store (lock order); taken again for the next part.
            drop(chain);
            if std::mem::take(&mut part.commit_first) {
                store = self.commit_before_roll(store);
                part.committed = true;
                // Split before an append, nothing was removed since the last part.
                if held.is_empty() {
                    continue;
                }
            }
            let failed;
            (store, failed) = self.make_held(store, held, acks);
            snapshot_failed = failed.or(snapshot_failed);
        }
        let Part { stored_any, must_sync, purged, traced, .. } = part;
        // A purge is made durable before the ack that reports it, whatever the policy.
        let commits_now = match self.sync_policy {
            SyncPolicy::Always => must_sync,
            SyncPolicy::Interval(_) | SyncPolicy::Never => purged,
        };
        let mut written_ok = true;
        // Acks behind a commit in flight wait for it, duplicates' and refusals' too (a
        // duplicate may name a sequence whose fsync is still running).
        let deferred = commits.is_some_and(|commits| commits.acks_waiting() || (stored_any && must_sync));
        if deferred {
            traced.written(None::<&StoreError>);
        } else if stored_any {
            // An ack promises at least "handed to the OS": with `sync: always`, "on disk".
            let written = if commits_now {
                // L4: the chain comes after the store in the lock order, so its writer is let
                // go with the store and taken again after (nothing else appends to the chain;
                // the ticker meanwhile writes only checkpoints up to `committed_seq`).
                let chained = chain.take().is_some();
                let (synced, relocked) = self.commit(store);
                store = relocked;
                if chained {
                    chain = self.provenance.as_deref().map(|provenance| provenance.writer(&config));
                }
                synced
            } else {
                store.flush()
            };
            written_ok = written.is_ok();
            traced.written(written.as_ref().err());
            if let Err(error) = written {
                let out_of_space = matches!(error, StoreError::OutOfSpace(_));
                if out_of_space {
                    // The store undid the batch: what was derived from it (msg-ids, L3 producer
                    // sequences, the L4 chain head) goes back too.
                    *dedup = Dedup::default();
                    lock(&self.producers).unload();
                    if let Some(chain) = chain.as_mut() {
                        chain.reload(store.as_ref());
                    }
                    tracing::error!(stream = %self.name, %error, "disk full; refusing the batch's acks");
                } else {
                    tracing::error!(stream = %self.name, %error, "critical write error; refusing the batch's acks");
                }
                let refusal = store_error(error);
                for (_, outcome, _) in acks.iter_mut() {
                    if outcome.is_ok() {
                        *outcome = Err(refusal.clone());
                    }
                }
                batches.refuse_commits(&refusal);
            }
        }
        let state = store.state();
        if let Some(chain) = chain.as_mut() {
            // Deferred, nothing is durable yet; else the commit covered everything stored (L4
            // streams sync always).
            let durable_seq = if deferred { self.committed_seq() } else { state.last_seq };
            chain.finish_batch(written_ok, durable_seq);
        }
        drop(chain);
        self.stored_bytes.store(state.bytes, std::sync::atomic::Ordering::Relaxed);
        let last_seq = state.last_seq;
        if written_ok && !deferred {
            self.committed_seq.store(last_seq, std::sync::atomic::Ordering::Release);
        }
        drop(store);
        if let Some(schema) = schema.as_mut() {
            schema.announce();
        }
        if stored_any && !deferred {
            self.last_seq.send_replace(last_seq);
        }
        deferred.then_some(last_seq)
    }

    /// Stores the batch's messages until the end, or until an L3 producer snapshot is needed
    /// (`stream/split.rs`): before an append it must precede (the message is kept in `part`
    /// to resume with), or after a message whose removal was held for it. Returns whether it
    /// stopped for a snapshot.
    fn store_part(
        &self,
        ingest: &mut Ingest<'_, '_>,
        messages: &mut impl Iterator<Item = (usize, Inbound)>,
        (parents, batches): (&mut crate::jetstream::lineage::Parents, &mut Batches),
        acks: &mut Vec<PendingAck>,
        part: &mut Part,
    ) -> bool {
        let config = ingest.config;
        loop {
            let (mut message, resumed) = match part.resume.take() {
                Some(Resume::Message(message)) => (message, true),
                Some(Resume::Commit(commit)) => {
                    if self.store_commit(ingest, commit, batches, acks, part) {
                        return true;
                    }
                    continue;
                }
                None => {
                    let Some((index, mut message)) = messages.next() else { return false };
                    self.ingest_budget.give_back(message.size());
                    // L4 lineage: what was decided before the store lock (a refusal, or the resolved parents).
                    if let Err(refused) = parents.apply(index, &mut message) {
                        acks.push((message.reply, Err(refused), None));
                        continue;
                    }
                    // Atomic batches are staged until their commit, then stored whole (batch.rs).
                    match batches.route(config, message, std::time::Instant::now()) {
                        Route::Single(message) => (message, false),
                        Route::Staged => continue,
                        Route::Refused(reply, error) => {
                            acks.push((reply, Err(error), None));
                            continue;
                        }
                        Route::Commit(commit) => {
                            if self.store_commit(ingest, commit, batches, acks, part) {
                                return true;
                            }
                            continue;
                        }
                    }
                }
            };
            let committed = std::mem::take(&mut part.committed);
            if !resumed || committed {
                if !committed && commit_before_append(ingest, &message) {
                    (part.resume, part.commit_first) = (Some(Resume::Message(message)), true);
                    return true;
                }
                if append_needs_snapshot(ingest, &message) {
                    part.resume = Some(Resume::Message(message));
                    return true;
                }
            }
            let outcome = self.ingest_one(ingest, &mut message, false);
            if let Some(carried) = message.trace.take() {
                part.traced.stored(carried, &self.name, &message.subject, &outcome);
            }
            let stored = matches!(outcome, Ok((_, false)));
            part.stored_any |= stored;
            part.must_sync |= stored && !defers_sync(config, &message.subject);
            // nats-server's PubAck of a counter stream carries the subject's new value.
            let counted = config.allow_msg_counter && stored;
            let value = counted.then(|| crate::jetstream::counters::value_of(&message.payload)).flatten();
            acks.push((message.reply, outcome, value));
            if let Some(held) = ingest.held.as_mut().filter(|held| !held.is_empty()) {
                let ack = acks.len() - 1;
                held.iter_mut().for_each(|held| _ = held.ack.get_or_insert(ack));
                return true;
            }
        }
    }

    /// Stores an atomic batch at its commit. Returns whether the part ends here: before the
    /// batch, for a commit aside (its rolls could otherwise complete a pending seal under the
    /// lock, and its appends cannot be split; it is resumed after), or after it, for a removal
    /// held for an L3 snapshot.
    fn store_commit(
        &self,
        ingest: &mut Ingest<'_, '_>,
        mut commit: batch::Commit,
        batches: &mut Batches,
        acks: &mut Vec<PendingAck>,
        part: &mut Part,
    ) -> bool {
        let committed = std::mem::take(&mut part.committed);
        if !committed && batch::commit_before(ingest, &commit) {
            (part.resume, part.commit_first) = (Some(Resume::Commit(commit)), true);
            return true;
        }
        if commit_needs_snapshot(ingest, &commit) {
            // Written with the lock let go before the batch is resumed (`stream/split.rs`).
            part.resume = Some(Resume::Commit(commit));
            return true;
        }
        let spanned: Vec<_> = (commit.messages.iter_mut())
            .filter_map(|m| m.trace.take().map(|carried| (carried, m.subject.clone())))
            .collect();
        let stored = batch::commit(self, ingest, commit, batches, acks);
        part.traced.committed(&self.name, spanned, stored);
        part.stored_any |= stored;
        part.must_sync |= stored;
        ingest.held.as_ref().is_some_and(|held| !held.is_empty())
    }

    /// Makes the store's changes durable with its lock let go for the fsyncs (the three steps
    /// of `semaq_store::commit`), so consumers, stream info and direct gets never wait for the
    /// disk; returns the outcome and the lock, taken again. Only the ingest task appends, so
    /// the ticket stays valid; whatever runs under the lock meanwhile syncs its own changes.
    pub(super) fn commit<'s>(&'s self, store: StoreGuard<'s>) -> (semaq_store::StoreResult<()>, StoreGuard<'s>) {
        self.commit_as(store, false)
    }

    /// [`Stream::commit`] for work aside from ingest (a purge, a delete, retention's removals,
    /// a timer's sync): a full disk it meets, whose reload dropped appends the ingest task's
    /// commit still waits for, fails here and is reported to that commit, which refuses them
    /// (`StreamStore::sync_begin_aside`).
    pub(in crate::jetstream) fn commit_aside<'s>(
        &'s self,
        store: StoreGuard<'s>,
    ) -> (semaq_store::StoreResult<()>, StoreGuard<'s>) {
        self.commit_as(store, true)
    }

    fn commit_as<'s>(
        &'s self,
        mut store: StoreGuard<'s>,
        aside: bool,
    ) -> (semaq_store::StoreResult<()>, StoreGuard<'s>) {
        let started = Instant::now();
        let latency = &self.services.bus.stats.store_sync_latency;
        let begun = if aside { store.sync_begin_aside() } else { store.sync_begin() };
        let ticket = match begun {
            Ok(ticket) => ticket,
            Err(error) => return (Err(error), store),
        };
        if ticket.is_empty() {
            latency.observe(started.elapsed());
            return self.finish_sync(store, ticket.run());
        }
        drop(store);
        crate::jetstream::failpoint::sync_delay();
        let synced = ticket.run();
        latency.observe(started.elapsed());
        self.finish_sync(self.store(), synced)
    }

    /// Step 3 of a commit under the store's lock; the checkpoint it may have made due is then
    /// written with the lock let go (taken again, returned). Blocks for the disk's time.
    pub(super) fn finish_sync<'s>(
        &'s self,
        mut store: StoreGuard<'s>,
        synced: semaq_store::Synced,
    ) -> (semaq_store::StoreResult<()>, StoreGuard<'s>) {
        match store.sync_finish_deferring(synced) {
            Ok(Some(checkpoint)) => {
                drop(store);
                checkpoint.run();
                (Ok(()), self.store())
            }
            Ok(None) => (Ok(()), store),
            Err(error) => (Err(error), store),
        }
    }

    /// Inside a batch, before an append that would roll into a full queue of pending seals: a
    /// commit aside completes them with the store's lock let go for its fsyncs, so the roll
    /// begins one more and fsyncs nothing (readers never wait for the disk). Aside, so that a
    /// full disk it meets is reported to the batch's own commit, which refuses what the reload
    /// dropped. A failure leaves the roll to complete the oldest seal in place, as before.
    pub(super) fn commit_before_roll<'s>(&'s self, store: StoreGuard<'s>) -> StoreGuard<'s> {
        let (committed, store) = tokio::task::block_in_place(|| self.commit_aside(store));
        if let Err(error) = committed {
            tracing::error!(stream = %self.name, %error, "cannot complete the pending seals before a roll");
        }
        store
    }

    /// Before a batch, when nothing this task appended waits for a commit: takes the report of a
    /// full disk met aside (a delete's or a snapshot's commit) that no commit of its own took,
    /// so that changes resume; what was derived from appends goes, as after any full disk.
    pub(super) fn take_drop_report(&self, store: &mut dyn StreamStore, dedup: &mut Dedup) {
        if let Err(error) = store.report_dropped() {
            *dedup = Dedup::default();
            lock(&self.producers).unload();
            tracing::error!(stream = %self.name, %error, "disk full; taking writes again");
        }
    }

    /// Checks and stores one message: the L2 schema (unless the caller checked it), the L3
    /// producer sequence, then [`store_one`] (dedup, expected headers, limits); an interest
    /// stream drops at once what no consumer wants. Atomic batches store each message here too.
    pub(in crate::jetstream) fn ingest_one(
        &self,
        ingest: &mut Ingest<'_, '_>,
        message: &mut Inbound,
        schema_checked: bool,
    ) -> PublishOutcome {
        let exactly_once = ingest.config.exactly_once();
        // L3: read on the headers as sent (a handle to them: lineage below may replace them, but
        // only when there is no claim, so the claim stays true of what is stored).
        let sent_headers = message.headers.clone().filter(|_| exactly_once);
        let claim = producers::claim(sent_headers.as_deref())?;
        if !schema_checked && ingest.schema.as_deref().is_some_and(SchemaCheck::may_evolve) {
            // L4 context first: a message refused for it must not auto-evolve the schema.
            crate::jetstream::provenance::check_before_schema(ingest, message, claim)?;
        }
        if let Some(schema) = ingest.schema.as_deref_mut() {
            if !schema_checked {
                schema.check(&message.payload)?;
            }
            if claim.is_none() {
                // A claim already names the producer; otherwise L2 lineage records one.
                crate::jetstream::schema::record_producer(&self.services.bus.clients, message);
            }
        }
        if let Some(claim) = claim {
            if let Verdict::Duplicate { stream_seq } = ingest.producers.check(claim)? {
                return Ok((stream_seq, true));
            }
        }
        if exactly_once {
            self.before_append(ingest, message)?;
        }
        let (subject, headers) = (&message.subject, message.headers.as_deref());
        let sourced = message.is_sourced();
        let store = &*ingest.store;
        if let Some(counted) =
            crate::jetstream::counters::apply(ingest.config, store, subject, headers, &message.payload, sourced)?
        {
            message.payload = counted.payload;
            if let Some(headers) = counted.headers {
                message.headers = Some(headers);
            }
        }
        if !message.internal && !sourced {
            crate::jetstream::schedules::check_publish(ingest.config, &*ingest.store, message)?;
        }
        let kv = crate::jetstream::kv::check(ingest.config, ingest.store, message)?;
        let outcome = store_one(
            ingest.config,
            ingest.store,
            ingest.dedup,
            message,
            (ingest.now, ingest.window_ns),
            ingest.chain.as_deref_mut(),
            ingest.quota.as_ref(),
        )?;
        let (seq, false) = outcome else { return Ok(outcome) };
        kv.stored(self, ingest, message, seq)?;
        if ingest.config.allow_msg_schedules {
            self.schedule_stored(ingest, message, seq)?;
        }
        if let Some(fields) = crate::tokens::PayloadFields::from_metadata(&ingest.config.metadata) {
            let tokens = &self.services.tokens;
            tokens.record_payload(&fields, &message.subject, message.headers.as_deref(), &message.payload);
        }
        if ingest.config.level() >= 4 {
            self.msg_ids.record(message.headers.as_deref(), seq, ingest.now, ingest.window_ns);
        }
        if exactly_once {
            let model = ingest.store.size_model();
            let stored = model.message_bytes(&message.subject, message.headers.as_deref(), &message.payload);
            ingest.producers.appended(stored);
            if let Some(claim) = claim {
                ingest.producers.record(claim, seq);
            }
        }
        if let Some(consumers) = ingest.interest {
            let wanted =
                consumers.iter().any(|c| crate::jetstream::consumer::validate::filter_matches(c, &message.subject));
            if !wanted {
                // The sequence is used and acknowledged, but nothing is kept.
                match &mut ingest.deferred_deletes {
                    Some(deferred) => deferred.push(seq),
                    None => ingest.drop_unwanted(seq)?,
                }
            }
        }
        Ok((seq, false))
    }

    /// Schedules: a stored schedule waits; a one-shot's stored copy removes its schedule.
    fn schedule_stored(&self, ingest: &mut Ingest<'_, '_>, message: &Inbound, seq: u64) -> Result<(), ApiError> {
        let purged = lock(&self.schedules).stored(message, seq, ingest.now);
        if let Some(scheduler) = purged {
            ingest.purge(crate::jetstream::schedules::schedule_purge(&scheduler))?;
        }
        Ok(())
    }

    /// Stores the copies of the schedules due now, through the same checks as any publish.
    pub(super) fn fire_schedules(&self, dedup: &mut Dedup, batches: &mut Batches, acks: &mut Vec<PendingAck>) {
        if !self.config().allow_msg_schedules {
            return;
        }
        let mut fired = {
            let store = self.store();
            let mut table = lock(&self.schedules);
            table.ensure_loaded(&**store);
            table.fire(&**store, clock::unix_nanos_now())
        };
        // They count against the ingest queue's bytes like any publish (store_batch gives back).
        fired.retain(|m| self.ingest_budget.try_take(m.size()));
        if !fired.is_empty() {
            tokio::task::block_in_place(|| self.store_batch(&mut fired, (dedup, batches), acks, None));
            self.send_acks(acks);
        }
    }

    /// L3: before an append that the store's limits could answer by removing a message the
    /// producer snapshot does not cover yet, brings the snapshot up to date. The batch was split
    /// before the message, or (an atomic batch) the snapshot written before its commit, without
    /// the lock (`stream/split.rs`, `snapshot_before_batch`), so it is fresh here, unless that
    /// failed: then the message is refused, with no fsync under the lock (`snapshot_missing`).
    fn before_append(&self, ingest: &mut Ingest<'_, '_>, message: &Inbound) -> Result<(), ApiError> {
        let model = ingest.store.size_model();
        let stored = model.message_bytes(&message.subject, message.headers.as_deref(), &message.payload);
        if ingest.producers.append_needs_snapshot(ingest.store.limits(), stored) {
            return Err(ingest.snapshot_missing());
        }
        Ok(())
    }

    pub(super) fn send_acks(&self, acks: &mut Vec<PendingAck>) {
        let no_ack = self.config().no_ack;
        let domain = &self.services.options.jetstream_domain;
        let mut flush = FlushSet::default();
        let mut body = String::with_capacity(64);
        for (reply, outcome, value) in acks.drain(..) {
            match &outcome {
                Ok((_, false)) => bump(&self.publishes.stored),
                Ok((_, true)) => bump(&self.publishes.duplicates),
                Err(error) => self.publishes.refuse(error.refusal()),
            }
            let Some(reply) = reply else { continue };
            if no_ack && !reply.starts_with(crate::jetstream::sources::ACK_PREFIX) {
                continue;
            }
            body.clear();
            match (outcome, domain, value) {
                // The common case, written without building a JSON tree.
                (Ok((seq, false)), None, None) => {
                    let _ = write!(body, r#"{{"stream":"{}","seq":{seq}}}"#, self.name);
                }
                (outcome, domain, value) => {
                    let mut ack = pub_ack_json(&self.name, domain.as_deref(), outcome);
                    if let Some(value) = value {
                        ack["val"] = json!(value);
                    }
                    body.push_str(&ack.to_string());
                }
            }
            let message =
                Message { subject: &reply, reply: None, headers: None, payload: body.as_bytes(), publisher: None };
            self.services.bus.publish_batched(&reply, &message, &mut flush);
        }
        flush.flush();
        acks.clear();
    }
}

/// What the parts of one ingest batch share (see [`Stream::store_part`]).
#[derive(Default)]
struct Part {
    /// The account's and the server's byte limits, handed from part to part.
    quota: Option<Quota>,
    /// What to go on with: the split came before its appends.
    resume: Option<Resume>,
    /// The split is for a commit aside before `resume`'s appends (a roll would otherwise
    /// complete a pending seal under the lock; `StreamStore::commit_before_append(s)`).
    commit_first: bool,
    /// That commit was made: `resume` is appended without asking again.
    committed: bool,
    stored_any: bool,
    /// Whether something stored needs its own fsync before its ack (see `defers_sync`).
    must_sync: bool,
    /// Whether a stored message purged (see `Ingest::purged`).
    purged: bool,
    traced: crate::trace::Stores,
}

/// What a part of a batch split before its appends goes on with.
enum Resume {
    /// A message on its own.
    Message(Inbound),
    /// An atomic batch, stored whole.
    Commit(batch::Commit),
}

/// Whether `message`'s append would roll into a full queue of pending seals, whose oldest the
/// store would then complete in place, its fsyncs under the lock (`Stream::commit_before_roll`).
fn commit_before_append(ingest: &Ingest<'_, '_>, message: &Inbound) -> bool {
    ingest.store.commit_before_append(&message.subject, message.headers.as_deref(), &message.payload)
}

/// L3: whether the atomic batch `commit` may purge (a rollup, a one-shot schedule's copy) or
/// its appends evict past the producer snapshot, which a plain message stored before it in
/// this ingest batch left stale: inside its appends nothing can be held, so the ingest batch is
/// split before it, for the snapshot to be written without the lock. Not after that failed
/// (`snapshot_failed`): the message that needs it is refused instead.
fn commit_needs_snapshot(ingest: &Ingest<'_, '_>, commit: &batch::Commit) -> bool {
    if !ingest.config.exactly_once() || ingest.held.is_none() || ingest.snapshot_failed.is_some() {
        return false;
    }
    let purges = commit.messages.iter().any(super::snapshot::may_purge);
    let model = ingest.store.size_model();
    let stored: u64 = (commit.messages.iter())
        .map(|message| model.message_bytes(&message.subject, message.headers.as_deref(), &message.payload))
        .sum();
    ingest.producers.batch_needs_snapshot(ingest.store.limits(), (commit.messages.len() as u64, stored), purges)
}

/// L3: whether the store's limits could answer `message`'s append by removing a message the
/// producer snapshot does not cover yet (then the batch is split before it).
fn append_needs_snapshot(ingest: &Ingest<'_, '_>, message: &Inbound) -> bool {
    if !ingest.config.exactly_once() || ingest.held.is_none() {
        return false;
    }
    let model = ingest.store.size_model();
    let stored = model.message_bytes(&message.subject, message.headers.as_deref(), &message.payload);
    ingest.producers.append_needs_snapshot(ingest.store.limits(), stored)
}

/// The PubAck body for one outcome.
pub fn pub_ack_json(stream: &str, domain: Option<&str>, outcome: PublishOutcome) -> Value {
    match outcome {
        Ok((seq, duplicate)) => {
            let mut ack = json!({ "stream": stream, "seq": seq });
            if duplicate {
                ack["duplicate"] = json!(true);
            }
            if let Some(domain) = domain {
                ack["domain"] = json!(domain);
            }
            ack
        }
        Err(error) => {
            let mut body = error.to_json("io.nats.jetstream.api.v1.pub_ack_response");
            body.as_object_mut().map(|o| o.remove("type"));
            // nats-server names the stream (and sequence 0) in a refused PubAck too.
            body["stream"] = json!(stream);
            body["seq"] = json!(0);
            body
        }
    }
}

/// Checks and stores one message (on L4 streams through `chain`, which checks and chains it).
fn store_one(
    config: &StreamConfig,
    store: &mut dyn StreamStore,
    dedup: &mut Dedup,
    message: &Inbound,
    (now, window_ns): (i64, i64),
    chain: Option<&mut crate::jetstream::provenance::ChainWriter<'_>>,
    quota: Option<&Quota>,
) -> PublishOutcome {
    if config.sealed {
        return Err(ApiError::sealed());
    }
    let size = message.headers.as_ref().map_or(0, Bytes::len) + message.payload.len();
    if config.max_msg_size >= 0 && size as i64 > config.max_msg_size {
        return Err(ApiError::message_too_large());
    }
    let found = message.headers.as_deref().map(|block| Headers::new(block).get_many(&EXPECTATION_HEADERS));
    let [msg_id, stream, last_seq, last_subject_seq, last_msg_id] = found.unwrap_or_default();
    if (msg_id.is_some() || last_msg_id.is_some()) && !dedup.loaded {
        *dedup = recover_dedup(store, window_ns);
        dedup.expire(now, window_ns);
    }
    let expected = Expected { stream, last_seq, last_subject_seq, last_msg_id };
    check_expectations(config, store, dedup, &expected, &message.subject)?;
    if let Some(id) = msg_id {
        if let Some(seq) = dedup.by_id.get(id) {
            return Ok((*seq, true));
        }
    }
    if let Some(quota) = quota {
        let bytes = store.size_model().message_bytes(&message.subject, message.headers.as_deref(), &message.payload);
        quota.check(store.state().bytes, bytes)?;
    }
    let seq = match chain {
        Some(chain) => chain.append(store, message, now)?,
        None => {
            store.append(&message.subject, message.headers.as_deref(), &message.payload, now).map_err(store_error)?.0
        }
    };
    match msg_id {
        Some(id) => dedup.record(id, seq, now),
        // Every stored message sets the last id, empty when it has none (as nats-server).
        None => dedup.last_msg_id = None,
    }
    Ok((seq, false))
}

/// What `store_one` reads from a message's headers, in one pass: the id and the expectations.
const EXPECTATION_HEADERS: [&str; 5] = [
    header::MSG_ID,
    header::EXPECTED_STREAM,
    header::EXPECTED_LAST_SEQUENCE,
    header::EXPECTED_LAST_SUBJECT_SEQUENCE,
    header::EXPECTED_LAST_MSG_ID,
];

/// The `Nats-Expected-*` headers of one message.
struct Expected<'a> {
    stream: Option<&'a str>,
    last_seq: Option<&'a str>,
    last_subject_seq: Option<&'a str>,
    last_msg_id: Option<&'a str>,
}

fn check_expectations(
    config: &StreamConfig,
    store: &mut dyn StreamStore,
    dedup: &Dedup,
    expected: &Expected<'_>,
    subject: &str,
) -> Result<(), ApiError> {
    if let Some(expected) = expected.stream {
        if expected != config.name {
            return Err(ApiError::expected_stream_mismatch());
        }
    }
    if let Some(expected) = expected.last_seq {
        let last = store.state().last_seq;
        if expected.parse::<u64>().ok() != Some(last) {
            return Err(ApiError::wrong_last_sequence(last));
        }
    }
    if let Some(expected) = expected.last_subject_seq {
        let last = store.get_last_for_subject(subject).map_err(store_error)?.map_or(0, |m| m.seq);
        if expected.parse::<u64>().ok() != Some(last) {
            return Err(ApiError::wrong_last_sequence(last));
        }
    }
    if let Some(expected) = expected.last_msg_id {
        let last = dedup.last_msg_id.as_deref().unwrap_or("");
        if expected != last {
            return Err(ApiError::wrong_last_msg_id(last));
        }
    }
    Ok(())
}
