//! Consumer config defaults and nats-server's checks.

use semaq_wire::{clock, subject};

use crate::jetstream::config::{
    AckPolicy, ConsumerConfig, DeliverPolicy, Retention, StreamConfig, MAX_ACK_PENDING_DEFAULT, MAX_WAITING_DEFAULT,
};
use crate::jetstream::errors::ApiError;
use crate::jetstream::is_valid_name;

/// Shortest idle heartbeat nats-server accepts, nanoseconds.
const HEARTBEAT_MIN_NS: i64 = 100_000_000;

/// The subject filters of a config; `[">"]` when unfiltered.
pub fn filters(config: &ConsumerConfig) -> Vec<String> {
    if !config.filter_subjects.is_empty() {
        return config.filter_subjects.clone();
    }
    match config.filter_subject.as_deref() {
        Some(filter) if !filter.is_empty() => vec![filter.to_string()],
        _ => vec![">".to_string()],
    }
}

/// Whether `subject` passes the consumer's filters.
pub fn filter_matches(config: &ConsumerConfig, subject: &str) -> bool {
    filters(config).iter().any(|filter| subject::matches(filter, subject))
}

/// Fills nats-server's defaults and checks the config against its stream.
pub fn normalize(mut config: ConsumerConfig, stream: &StreamConfig) -> Result<ConsumerConfig, ApiError> {
    if let (Some(durable), Some(name)) = (&config.durable_name, &config.name) {
        if durable != name {
            return Err(ApiError::durable_and_name_mismatch());
        }
    }
    // nats-server 2.10+: invalid names are an invalid config (10052), with these words.
    if config.name.as_deref().is_some_and(|name| !is_valid_name(name)) {
        return Err(ApiError::invalid_stream_config("consumer name can not contain '.', '*', '>', '\\', '/'"));
    }
    if config.durable_name.as_deref().is_some_and(|name| !is_valid_name(name)) {
        return Err(ApiError::invalid_stream_config("consumer durable name can not contain '.', '*', '>', '\\', '/'"));
    }
    check_filters(&config, stream)?;
    super::compile_filter(&config).map_err(|error| ApiError::invalid_filter(&error))?;
    super::check_priority(&config.metadata).map_err(ApiError::consumer_create)?;
    check_delivery(&config)?;
    check_pause(&config)?;
    super::groups::check_config(&mut config)?;
    check_timing(&config)?;
    check_workqueue(&config, stream)?;
    if config.num_replicas > 1 {
        return Err(ApiError::replicas_not_supported());
    }
    if config.ack_policy != AckPolicy::None {
        if let Some(first) = config.backoff.first() {
            // nats-server: the first backoff delay is the ack wait.
            config.ack_wait = *first;
        }
        if config.ack_wait == 0 {
            config.ack_wait = crate::jetstream::config::ACK_WAIT_DEFAULT_NS;
        }
        if config.max_ack_pending == 0 {
            config.max_ack_pending = MAX_ACK_PENDING_DEFAULT;
        }
    } else if config.max_ack_pending > 0 && config.deliver_subject.is_some() {
        return Err(ApiError::max_ack_pending_requires_ack());
    }
    if config.max_deliver == 0 {
        config.max_deliver = -1;
    }
    // Ephemerals always have an inactive threshold; nats-server stamps its default in the config.
    if config.durable_name.is_none() && config.inactive_threshold <= 0 {
        config.inactive_threshold = crate::limits::EPHEMERAL_INACTIVE_THRESHOLD.as_nanos() as i64;
    }
    if config.deliver_subject.is_none() && config.max_waiting == 0 {
        config.max_waiting = MAX_WAITING_DEFAULT;
    }
    Ok(config)
}

/// nats-server 2.10+'s filter rules: one of `filter_subject` or `filter_subjects`, no empty
/// entry, valid subjects that do not overlap. A filter outside the stream's subjects is allowed
/// since 2.10 (it matches nothing until the stream's subjects change), so `_stream` is unused.
fn check_filters(config: &ConsumerConfig, _stream: &StreamConfig) -> Result<(), ApiError> {
    let single = config.filter_subject.as_deref().filter(|f| !f.is_empty());
    if single.is_some() && !config.filter_subjects.is_empty() {
        return Err(ApiError::duplicate_filter_subjects());
    }
    if config.filter_subjects.iter().any(String::is_empty) {
        return Err(ApiError::empty_filter());
    }
    let given: Vec<&str> = single.into_iter().chain(config.filter_subjects.iter().map(String::as_str)).collect();
    for (i, filter) in given.iter().enumerate() {
        if !subject::is_valid_filter(filter) {
            return Err(ApiError::invalid_stream_config("invalid subject"));
        }
        if given.iter().enumerate().any(|(j, other)| i != j && subject::overlaps(filter, other)) {
            return Err(ApiError::overlapping_filter_subjects());
        }
    }
    Ok(())
}

/// `pause_until` must be a time (nats-server decodes it as one: invalid JSON otherwise).
fn check_pause(config: &ConsumerConfig) -> Result<(), ApiError> {
    match config.pause_until.as_deref() {
        Some(text) if clock::parse_rfc3339(text).is_none() => {
            Err(ApiError::invalid_json(format!("parsing time {text:?}: not RFC 3339")))
        }
        _ => Ok(()),
    }
}

fn check_delivery(config: &ConsumerConfig) -> Result<(), ApiError> {
    match &config.deliver_subject {
        Some(deliver) => {
            if !subject::is_valid_literal(deliver) {
                return Err(ApiError::deliver_to_wildcards());
            }
            if config.max_waiting != 0 {
                return Err(ApiError::push_max_waiting());
            }
            if config.flow_control && config.idle_heartbeat <= 0 {
                return Err(ApiError::flow_control_needs_heartbeats());
            }
        }
        None => {
            if config.idle_heartbeat != 0 {
                return Err(ApiError::heartbeat_requires_push());
            }
            if config.flow_control {
                return Err(ApiError::flow_control_requires_push());
            }
            if config.max_waiting < 0 {
                return Err(ApiError::max_waiting_negative());
            }
        }
    }
    if config.idle_heartbeat > 0 && config.idle_heartbeat < HEARTBEAT_MIN_NS {
        return Err(ApiError::small_heartbeat());
    }
    check_deliver_policy(config)
}

/// Start options must fit the deliver policy, with nats-server's wording (err_code 10094).
fn check_deliver_policy(config: &ConsumerConfig) -> Result<(), ApiError> {
    let policy = match config.deliver_policy {
        DeliverPolicy::All => "all",
        DeliverPolicy::Last => "last",
        DeliverPolicy::LastPerSubject => "last per subject",
        DeliverPolicy::New => "new",
        DeliverPolicy::ByStartSequence => "by start sequence",
        DeliverPolicy::ByStartTime => "by start time",
    };
    let also_set = |what: &str| {
        ApiError::invalid_policy(format!(
            "consumer delivery policy is deliver {policy}, but optional start {what} is also set"
        ))
    };
    let not_set = |what: &str| {
        ApiError::invalid_policy(format!(
            "consumer delivery policy is deliver {policy}, but optional {what} is not set"
        ))
    };
    let has_sequence = config.opt_start_seq.unwrap_or(0) > 0;
    let has_time = config.opt_start_time.is_some();
    let unfiltered = config.filter_subject.as_deref().unwrap_or("").is_empty() && config.filter_subjects.is_empty();
    match config.deliver_policy {
        DeliverPolicy::ByStartSequence if !has_sequence => Err(not_set("start sequence")),
        DeliverPolicy::ByStartSequence if has_time => Err(also_set("time")),
        DeliverPolicy::ByStartTime if !has_time => Err(not_set("start time")),
        DeliverPolicy::ByStartTime if has_sequence => Err(also_set("start sequence")),
        DeliverPolicy::ByStartTime if config.opt_start_time.as_deref().and_then(clock::parse_rfc3339).is_none() => {
            Err(ApiError::bad_request())
        }
        DeliverPolicy::ByStartSequence | DeliverPolicy::ByStartTime => Ok(()),
        _ if has_sequence => Err(also_set("sequence")),
        _ if has_time => Err(also_set("time")),
        DeliverPolicy::LastPerSubject if unfiltered => Err(not_set("filter subject")),
        _ => Ok(()),
    }
}

fn check_timing(config: &ConsumerConfig) -> Result<(), ApiError> {
    if config.ack_wait < 0 {
        return Err(ApiError::ack_wait_negative());
    }
    if config.backoff.iter().any(|delay| *delay <= 0) {
        return Err(ApiError::backoff_negative());
    }
    if !config.backoff.is_empty() && config.max_deliver > 0 && config.max_deliver < config.backoff.len() as i64 {
        return Err(ApiError::max_deliver_backoff());
    }
    Ok(())
}

fn check_workqueue(config: &ConsumerConfig, stream: &StreamConfig) -> Result<(), ApiError> {
    if stream.retention != Retention::Workqueue {
        return Ok(());
    }
    if config.ack_policy != AckPolicy::Explicit {
        return Err(match (config.deliver_subject.is_none(), config.ack_policy) {
            (true, AckPolicy::None) => ApiError::pull_requires_ack_on_workqueue(),
            _ => ApiError::workqueue_requires_explicit_ack(),
        });
    }
    if config.deliver_policy != DeliverPolicy::All {
        return Err(ApiError::workqueue_deliver_all());
    }
    Ok(())
}

/// Workqueue streams allow one unfiltered consumer, or filtered ones that do not overlap.
pub fn check_workqueue_unique(new: &ConsumerConfig, others: &[ConsumerConfig]) -> Result<(), ApiError> {
    let new_filters = filters(new);
    for other in others {
        let other_filters = filters(other);
        let unfiltered = |f: &[String]| f.iter().any(|s| s == ">");
        if unfiltered(&new_filters) || unfiltered(&other_filters) {
            return Err(ApiError::workqueue_multiple_unfiltered());
        }
        if new_filters.iter().any(|a| other_filters.iter().any(|b| subject::overlaps(a, b))) {
            return Err(ApiError::workqueue_not_unique());
        }
    }
    Ok(())
}

/// nats-server's update rules (`checkNewConsumerConfig`): these fields may not change; anything
/// else may. The reason goes into a 10012 error, in nats-server's words.
pub fn check_update(old: &ConsumerConfig, new: &ConsumerConfig) -> Result<(), ApiError> {
    let refuse = |what: &str| Err(ApiError::consumer_create(format!("{what} can not be updated")));
    if old.deliver_policy != new.deliver_policy {
        return refuse("deliver policy");
    }
    if old.mem_storage != new.mem_storage {
        return refuse("storage type");
    }
    if old.opt_start_seq.unwrap_or(0) != new.opt_start_seq.unwrap_or(0) {
        return refuse("start sequence");
    }
    let start_time = |c: &ConsumerConfig| c.opt_start_time.as_deref().and_then(clock::parse_rfc3339);
    if start_time(old) != start_time(new) {
        return refuse("start time");
    }
    if old.ack_policy != new.ack_policy {
        return refuse("ack policy");
    }
    if old.replay_policy != new.replay_policy {
        return refuse("replay policy");
    }
    if old.idle_heartbeat != new.idle_heartbeat {
        return refuse("heart beats");
    }
    if old.flow_control != new.flow_control {
        return refuse("flow control");
    }
    match (&old.deliver_subject, &new.deliver_subject) {
        (None, Some(_)) => return Err(ApiError::consumer_create("can not update pull consumer to push based")),
        (Some(_), None) => return Err(ApiError::consumer_create("can not update push consumer to pull based")),
        _ => {}
    }
    if old.max_waiting != new.max_waiting {
        return refuse("max waiting");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_parses_utc_and_offsets() {
        assert_eq!(clock::parse_rfc3339("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(clock::parse_rfc3339("1970-01-01T00:00:01.5Z"), Some(1_500_000_000));
        assert_eq!(clock::parse_rfc3339("1970-01-01T01:00:00+01:00"), Some(0));
        assert_eq!(clock::parse_rfc3339("2000-03-01T00:00:00Z"), Some(951_868_800_000_000_000));
        assert_eq!(clock::parse_rfc3339("nonsense"), None);
    }

    #[test]
    fn defaults_follow_nats_server() {
        let stream = StreamConfig { subjects: vec!["orders.>".into()], ..StreamConfig::default() };
        let explicit = ConsumerConfig { ack_policy: AckPolicy::Explicit, ..ConsumerConfig::default() };
        let config = normalize(explicit, &stream).unwrap();
        assert_eq!(config.ack_wait, 30_000_000_000);
        assert_eq!(config.max_ack_pending, 1000);
        assert_eq!(config.max_waiting, 512);
        assert_eq!(config.max_deliver, -1);
    }

    #[test]
    fn bad_configs_get_nats_error_codes() {
        let stream = StreamConfig { subjects: vec!["orders.>".into()], ..StreamConfig::default() };
        let check = |config: ConsumerConfig| normalize(config, &stream).unwrap_err().err_code;
        let with = |f: fn(&mut ConsumerConfig)| {
            let mut config = ConsumerConfig::default();
            f(&mut config);
            config
        };
        assert_eq!(check(with(|c| c.filter_subject = Some("payments.*.>.x".into()))), 10052);
        assert_eq!(check(with(|c| c.filter_subjects = vec!["orders.a".into(), String::new()])), 10139);
        assert_eq!(check(with(|c| c.durable_name = Some("a.b".into()))), 10052);
        assert_eq!(check(with(|c| c.idle_heartbeat = 1_000_000_000)), 10088);
        assert_eq!(check(with(|c| c.flow_control = true)), 10089);
        assert_eq!(
            check(with(|c| {
                c.filter_subject = Some("orders.a".into());
                c.filter_subjects = vec!["orders.b".into()]
            })),
            10136
        );
        assert_eq!(check(with(|c| c.filter_subjects = vec!["orders.*".into(), "orders.a".into()])), 10138);
        assert_eq!(check(with(|c| { c.deliver_subject = Some("x.*".into()) })), 10079);
        assert_eq!(
            check(with(|c| {
                c.backoff = vec![1, 2, 3];
                c.max_deliver = 2
            })),
            10116
        );
    }
}
