//! Scheduled messages (nats-server 2.12, `allow_msg_schedules`): a message published with
//! `Nats-Schedule` is kept on its own subject as the schedule, and when it is due the stream
//! stores a copy on `Nats-Schedule-Target` (or the last message of `Nats-Schedule-Source`), as
//! nats-server's `scheduler.go` does: `Nats-Scheduler` names the schedule, `Nats-Schedule-Next`
//! says when it fires again, or `purge` for a one-shot, whose schedule is then removed.
//!
//! Patterns: `@at <RFC 3339>` (a delayed message), `@every <Go duration>` (at least 1s) and
//! six-field cron (`0 30 * * * *`, `@hourly`, ...; cron.rs), read in the IANA zone of
//! `Nats-Schedule-Time-Zone` (cron patterns only; UTC without one), whose copies say when they
//! fire next with that zone's offset, as nats-server's do.
//!
//! The due schedules are read at each of the stream's limits checks (every 250 ms, nats-server's
//! own minimum) and fired through the stream's ingest, so their copies are checked, stored,
//! acknowledged to nobody and delivered like any publish.

use std::collections::HashMap;

use jiff::tz::TimeZone;
use semaq_store::{PurgeRequest, StreamStore};
use semaq_wire::headers::{names, HeaderBlock};
use semaq_wire::{clock, subject, Headers};

use super::config::{Discard, StreamConfig};
use super::errors::ApiError;
use super::stream::{store_error, Inbound};
use crate::limits;

/// The schedule's pattern.
pub const SCHEDULE: &str = "Nats-Schedule";
/// Where a due schedule stores its copy.
pub const TARGET: &str = "Nats-Schedule-Target";
/// A subject whose last message is copied instead of the schedule's own body.
pub const SOURCE: &str = "Nats-Schedule-Source";
/// The `Nats-TTL` the copy gets.
pub const TTL: &str = "Nats-Schedule-TTL";
/// The `Nats-Rollup` the copy gets (only `sub`).
pub const ROLLUP: &str = "Nats-Schedule-Rollup";
/// The time zone of a cron pattern.
pub const TIME_ZONE: &str = "Nats-Schedule-Time-Zone";
/// On a copy: the schedule's subject.
pub const SCHEDULER: &str = "Nats-Scheduler";
/// On a copy: when the schedule fires next (RFC 3339), or `purge`.
pub const NEXT: &str = "Nats-Schedule-Next";
/// `Nats-Schedule-Next` of a one-shot: the schedule is removed once its copy is stored.
pub const NEXT_PURGE: &str = "purge";

const NANOS_PER_SECOND: i64 = 1_000_000_000;

/// Settings schedules cannot combine with, and the roll-ups they need, as nats-server has them.
pub fn check_config(config: &mut StreamConfig) -> Result<(), ApiError> {
    if !config.allow_msg_schedules {
        return Ok(());
    }
    if config.allow_msg_counter {
        return Err(ApiError::invalid_stream_config("counter stream cannot use message schedules"));
    }
    if config.discard == Discard::New {
        return Err(ApiError::invalid_stream_config("message scheduling cannot use discard new"));
    }
    if config.mirror.is_some() {
        return Err(error(400, 10186, "stream mirrors can not also schedule messages"));
    }
    if !config.sources.is_empty() {
        return Err(error(400, 10187, "stream source can not also schedule messages"));
    }
    // A schedule replaces the previous one on its subject: nats-server turns roll-ups on.
    config.allow_rollup_hdrs = true;
    config.deny_purge = false;
    Ok(())
}

/// Schedules cannot be switched off again.
pub fn check_update(old: &StreamConfig, new: &StreamConfig) -> Result<(), ApiError> {
    if old.allow_msg_schedules && !new.allow_msg_schedules {
        return Err(ApiError::invalid_stream_config("message schedules can not be disabled"));
    }
    Ok(())
}

/// When a pattern fires next after `ts` (the schedule's time), and whether it repeats; `None`
/// for a pattern this server does not take.
fn next_fire(pattern: &str, zone: Option<&TimeZone>, ts: i64, now: i64) -> Option<(i64, bool)> {
    let round = |ns: i64| (ns + NANOS_PER_SECOND / 2).div_euclid(NANOS_PER_SECOND) * NANOS_PER_SECOND;
    let simple = pattern.starts_with("@at ") || pattern.starts_with("@every ");
    if simple && zone.is_some() {
        // A time zone goes with cron patterns only.
        return None;
    }
    if let Some(at) = pattern.strip_prefix("@at ") {
        return clock::parse_rfc3339(at).map(|at| (at, false));
    }
    if let Some(every) = pattern.strip_prefix("@every ") {
        let every = i64::try_from(super::kv::parse_go_duration(every)?).ok()?;
        if every < NANOS_PER_SECOND {
            return None;
        }
        let mut next = round(ts).saturating_add(every);
        if next < now {
            next = round(now).saturating_add(every);
        }
        return Some((next, true));
    }
    let cron = super::cron::Cron::parse(pattern)?;
    let utc = TimeZone::UTC;
    let zone = zone.unwrap_or(&utc);
    let mut next = cron.next_after(ts, zone)?;
    if next < now {
        next = cron.next_after(round(now), zone)?;
    }
    Some((next, true))
}

/// A schedule's pattern read from its headers: `None` when it has none, else when it fires.
/// The zone is checked first, with or without a pattern, as nats-server does.
fn schedule_of(headers: &Headers<'_>, ts: i64, now: i64) -> Option<Result<(i64, bool), ApiError>> {
    let zone = match zone_of(headers) {
        Ok(zone) => zone,
        Err(error) => return Some(Err(error)),
    };
    let pattern = headers.get(SCHEDULE).filter(|p| !p.is_empty())?;
    Some(next_fire(pattern, zone.as_ref(), ts, now).ok_or_else(pattern_invalid))
}

/// The schedule's time zone: `None` without the header; refused when empty or unknown.
fn zone_of(headers: &Headers<'_>) -> Result<Option<TimeZone>, ApiError> {
    match headers.get(TIME_ZONE) {
        None => Ok(None),
        Some(name) => super::cron::load_zone(name)
            .map(Some)
            .ok_or_else(|| error(400, 10223, "message schedules time zone is invalid")),
    }
}

/// RFC 3339 as Go's `Format(time.RFC3339Nano)` writes a time read in `zone`: fraction trimmed,
/// `Z` for a zero offset, else the zone's `±hh:mm` at that instant.
fn go_rfc3339_in(unix_ns: i64, zone: Option<&TimeZone>) -> String {
    let offset = jiff::Timestamp::from_nanosecond(i128::from(unix_ns))
        .ok()
        .zip(zone)
        .map_or(0, |(at, zone)| i64::from(zone.to_offset(at).seconds()));
    if offset == 0 {
        return super::kv::go_rfc3339_nano(unix_ns);
    }
    let local = super::kv::go_rfc3339_nano(unix_ns.saturating_add(offset.saturating_mul(NANOS_PER_SECOND)));
    let sign = if offset < 0 { '-' } else { '+' };
    let minutes = offset.abs() / 60;
    format!("{}{sign}{:02}:{:02}", local.trim_end_matches('Z'), minutes / 60, minutes % 60)
}

fn error(code: u16, err_code: u32, description: &str) -> ApiError {
    ApiError { code, err_code, description: description.to_string() }
}

fn pattern_invalid() -> ApiError {
    error(400, 10189, "message schedules pattern is invalid")
}

fn disabled() -> ApiError {
    error(400, 10188, "message schedules is disabled")
}

fn target_invalid() -> ApiError {
    error(400, 10190, "message schedules target is invalid")
}

fn source_invalid() -> ApiError {
    error(400, 10203, "message schedules source is invalid")
}

fn rollup_invalid() -> ApiError {
    error(400, 10192, "message schedules invalid rollup")
}

fn scheduler_invalid() -> ApiError {
    error(400, 10212, "message schedules invalid scheduler")
}

/// A client's publish against the schedule rules, in nats-server's order; a schedule gets the
/// `Nats-Rollup: sub` that makes it replace the previous one on its subject.
pub fn check_publish(config: &StreamConfig, store: &dyn StreamStore, message: &mut Inbound) -> Result<(), ApiError> {
    let Some(block) = message.headers.clone() else { return Ok(()) };
    let headers = Headers::new(&block);
    if headers.get_many(&[SCHEDULE, NEXT, SCHEDULER, TIME_ZONE]).iter().all(Option::is_none) {
        return Ok(());
    }
    let now = clock::unix_nanos_now();
    match schedule_of(&headers, now, now) {
        Some(Err(error)) => return Err(if config.allow_msg_schedules { error } else { disabled() }),
        Some(Ok(_)) => check_schedule(config, &headers, message)?,
        None => {}
    }
    let scheduler = headers.get(SCHEDULER);
    match headers.get(NEXT) {
        Some(next) if !next.is_empty() => {
            // Clients may only purge a schedule this way.
            let scheduler = scheduler.unwrap_or_default();
            let named = !scheduler.is_empty() && scheduler != message.subject && subject::is_valid_literal(scheduler);
            if next != NEXT_PURGE || !named {
                return Err(scheduler_invalid());
            }
            if !config.allow_msg_schedules {
                return Err(disabled());
            }
            let last = store.get_last_for_subject(scheduler).map_err(store_error)?;
            let not_a_schedule = |headers: &[u8]| Headers::new(headers).get(SCHEDULE).is_none_or(str::is_empty);
            if last.is_some_and(|m| m.headers.as_deref().is_none_or(not_a_schedule)) {
                return Err(scheduler_invalid());
            }
        }
        _ if scheduler.is_some_and(|s| !s.is_empty()) => return Err(scheduler_invalid()),
        _ => {}
    }
    Ok(())
}

/// The headers of a schedule: TTL, rollup, target and source.
fn check_schedule(config: &StreamConfig, headers: &Headers<'_>, message: &mut Inbound) -> Result<(), ApiError> {
    if !config.allow_msg_schedules {
        return Err(disabled());
    }
    let ttl = headers.get(TTL).filter(|t| !t.is_empty());
    if ttl.is_some_and(|ttl| super::kv::parse_ttl(ttl).is_none()) {
        return Err(error(400, 10191, "message schedules invalid per-message TTL"));
    }
    if headers.get(ROLLUP).is_some_and(|r| !r.is_empty() && r != "sub") {
        return Err(rollup_invalid());
    }
    if ttl.is_some() && !config.allow_msg_ttl {
        return Err(ApiError::msg_ttl_disabled());
    }
    let target = headers.get(TARGET).unwrap_or_default();
    if target.is_empty() || !subject::is_valid_literal(target) || target == message.subject {
        return Err(target_invalid());
    }
    let source = headers.get(SOURCE).unwrap_or_default();
    if !source.is_empty() && (source == target || source == message.subject || !subject::is_valid_literal(source)) {
        return Err(source_invalid());
    }
    let covers = |wanted: &str| config.subjects.iter().any(|s| subject::overlaps(s, wanted));
    if !covers(target) {
        return Err(target_invalid());
    }
    if !source.is_empty() && !covers(source) {
        return Err(source_invalid());
    }
    match headers.get(names::ROLLUP) {
        None => {
            let mut block =
                HeaderBlock::parse(message.headers.as_deref().unwrap_or_default()).map_err(|_| target_invalid())?;
            block.insert(names::ROLLUP, "sub");
            message.headers = Some(block.encode());
        }
        Some("sub") => {}
        Some(_) => return Err(rollup_invalid()),
    }
    Ok(())
}

/// A schedule waiting on its subject.
#[derive(Debug, Clone, Copy)]
struct Waiting {
    seq: u64,
    at: i64,
}

/// The schedules of one stream, by subject. Lock order: after the store's.
#[derive(Debug, Default)]
pub struct Table {
    /// Whether it was rebuilt from the store since start.
    loaded: bool,
    by_subject: HashMap<String, Waiting>,
}

impl Table {
    /// After `message` was stored as `seq` at `ts`: a schedule waits, anything else on its
    /// subject ends the one there; a copy moves its schedule on. Returns the schedule subject a
    /// one-shot's copy purges.
    pub fn stored(&mut self, message: &Inbound, seq: u64, ts: i64) -> Option<String> {
        let block = message.headers.as_deref().unwrap_or_default();
        let headers = Headers::new(block);
        let scheduler = headers.get(SCHEDULER).filter(|s| !s.is_empty());
        match schedule_of(&headers, ts, clock::unix_nanos_now()) {
            Some(Ok((at, _))) => {
                self.by_subject.insert(message.subject.clone(), Waiting { seq, at });
            }
            _ if scheduler.is_none() => {
                self.by_subject.remove(&message.subject);
            }
            _ => {}
        }
        let scheduler = scheduler?;
        match headers.get(NEXT)? {
            NEXT_PURGE => {
                self.by_subject.remove(scheduler);
                Some(scheduler.to_string())
            }
            next => {
                if let (Some(at), Some(waiting)) = (clock::parse_rfc3339(next), self.by_subject.get_mut(scheduler)) {
                    waiting.at = at;
                }
                None
            }
        }
    }

    /// Reads the schedules back after a restart (once): the last message of every subject.
    pub fn ensure_loaded(&mut self, store: &dyn StreamStore) {
        if self.loaded {
            return;
        }
        self.loaded = true;
        let now = clock::unix_nanos_now();
        for subject in store.subjects_state(None).into_keys().take(limits::SCHEDULES_PER_STREAM_MAX) {
            let Ok(Some(last)) = store.get_last_for_subject(&subject) else { continue };
            let headers = Headers::new(last.headers.as_deref().unwrap_or_default());
            if let Some(Ok((at, _))) = schedule_of(&headers, last.timestamp_ns, now) {
                self.by_subject.insert(subject, Waiting { seq: last.seq, at });
            }
        }
    }

    /// The copies of the schedules due at `now`, oldest schedule first. Each fired schedule is
    /// put off until its copy moves it on (a copy the stream refuses is retried a while later).
    pub fn fire(&mut self, store: &dyn StreamStore, now: i64) -> Vec<Inbound> {
        let mut due: Vec<(String, Waiting)> =
            self.by_subject.iter().filter(|(_, w)| w.at <= now).map(|(s, w)| (s.clone(), *w)).collect();
        due.sort_by_key(|(_, waiting)| waiting.seq);
        due.truncate(limits::SCHEDULES_FIRED_PER_CHECK_MAX);
        let mut copies = Vec::with_capacity(due.len());
        for (subject, waiting) in due {
            match copy_of(store, &subject, waiting, now) {
                Some(copy) => {
                    let retry =
                        now.saturating_add(i64::try_from(limits::SCHEDULE_RETRY.as_nanos()).unwrap_or(i64::MAX));
                    if let Some(entry) = self.by_subject.get_mut(&subject) {
                        entry.at = retry;
                    }
                    copies.push(copy);
                }
                None => {
                    self.by_subject.remove(&subject);
                }
            }
        }
        copies
    }
}

/// The copy a due schedule stores, as nats-server's `getScheduledMessages` builds it.
fn copy_of(store: &dyn StreamStore, subject: &str, waiting: Waiting, now: i64) -> Option<Inbound> {
    let schedule = store.get(waiting.seq).ok().flatten()?;
    let block = schedule.headers.clone().unwrap_or_default();
    let headers = Headers::new(&block);
    let (next, repeat) = schedule_of(&headers, waiting.at, now)?.ok()?;
    let target = headers.get(TARGET).filter(|t| !t.is_empty())?.to_string();
    let ttl = headers.get(TTL).filter(|t| !t.is_empty()).map(str::to_string);
    let rollup = headers.get(ROLLUP).filter(|r| !r.is_empty()).map(str::to_string);
    let source = headers.get(SOURCE).filter(|s| !s.is_empty());
    let body = match source.and_then(|source| store.get_last_for_subject(source).ok().flatten()) {
        Some(last) => last,
        None => schedule,
    };
    let mut copy = HeaderBlock::parse(body.headers.as_deref().unwrap_or_default()).unwrap_or_default();
    copy.entries.retain(|(name, _)| {
        let lower = name.to_ascii_lowercase();
        !lower.starts_with("nats-schedule")
            && !lower.starts_with("nats-expected-")
            && ![names::MSG_ID, names::TTL, names::ROLLUP].iter().any(|n| n.eq_ignore_ascii_case(name))
    });
    copy.insert(SCHEDULER, subject);
    let zone = zone_of(&headers).ok().flatten();
    let next = if repeat { go_rfc3339_in(next, zone.as_ref()) } else { NEXT_PURGE.to_string() };
    copy.insert(NEXT, &next);
    if let Some(ttl) = ttl {
        copy.insert(names::TTL, &ttl);
    }
    if let Some(rollup) = rollup {
        copy.insert(names::ROLLUP, &rollup);
    }
    Some(Inbound {
        subject: target,
        reply: None,
        headers: Some(copy.encode()),
        payload: body.payload,
        publisher: None,
        received: std::time::Instant::now(),
        trace: None,
        internal: true,
    })
}

/// A one-shot's copy was stored: the purge that removes its schedule (durable with the batch's commit).
pub fn schedule_purge(scheduler: &str) -> PurgeRequest {
    PurgeRequest { subject: Some(scheduler.to_string()), keep: None, up_to_seq: None }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: i64 = NANOS_PER_SECOND;

    #[test]
    fn at_fires_once_at_its_time() {
        let at = clock::parse_rfc3339("2030-01-01T00:00:00Z").expect("time");
        assert_eq!(next_fire("@at 2030-01-01T00:00:00Z", None, 0, 0), Some((at, false)));
        assert_eq!(next_fire("@at tomorrow", None, 0, 0), None);
        assert_eq!(next_fire("@at 2030-01-01T00:00:00Z", Some(&TimeZone::UTC), 0, 0), None, "no zone with @at");
    }

    #[test]
    fn every_repeats_from_the_schedule_time_rounded_to_the_second() {
        assert_eq!(next_fire("@every 5s", None, 10 * SECOND + SECOND / 2, 0), Some((16 * SECOND, true)));
        assert_eq!(next_fire("@every 5s", None, 10 * SECOND, 100 * SECOND), Some((105 * SECOND, true)), "late");
        assert_eq!(next_fire("@every 500ms", None, 0, 0), None, "under a second");
        assert_eq!(next_fire("0 * * * * *", Some(&TimeZone::UTC), 0, 0), Some((60 * SECOND, true)), "cron, in UTC");
        assert_eq!(next_fire("30 * * * * *", None, 0, 100 * SECOND), Some((150 * SECOND, true)), "late cron");
    }

    #[test]
    fn zones_are_known_by_their_exact_iana_names_and_only_with_cron() {
        for known in ["UTC", "Local", "Etc/UTC", "America/New_York", "Europe/Amsterdam", "US/Eastern", "Etc/GMT+5"] {
            assert!(super::super::cron::load_zone(known).is_some(), "{known}");
        }
        for unknown in ["", "Not/A/Zone", "america/new_york", "utc", "../etc/passwd", "/usr/share/zoneinfo/UTC"] {
            assert!(super::super::cron::load_zone(unknown).is_none(), "{unknown:?}");
        }
        let amsterdam = super::super::cron::load_zone("Europe/Amsterdam");
        assert_eq!(next_fire("@every 5s", amsterdam.as_ref(), 0, 0), None, "no zone with @every");
    }

    #[test]
    fn a_zoned_next_time_is_written_with_the_zones_offset_as_go_writes_it() {
        let new_york = super::super::cron::load_zone("America/New_York");
        let at = |text: &str| clock::parse_rfc3339(text).expect("time");
        let summer = at("2026-07-01T12:00:00Z");
        assert_eq!(go_rfc3339_in(summer, new_york.as_ref()), "2026-07-01T08:00:00-04:00");
        assert_eq!(go_rfc3339_in(at("2026-12-01T12:00:00.5Z"), new_york.as_ref()), "2026-12-01T07:00:00.5-05:00");
        assert_eq!(go_rfc3339_in(summer, Some(&TimeZone::UTC)), "2026-07-01T12:00:00Z");
        let kolkata = super::super::cron::load_zone("Asia/Kolkata");
        assert_eq!(go_rfc3339_in(summer, kolkata.as_ref()), "2026-07-01T17:30:00+05:30");
    }
}
