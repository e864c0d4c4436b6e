//! `/metrics`: the Prometheus text format (0.0.4, or OpenMetrics when the scraper asks for it)
//! through the `prometheus-client` crate. Names are `semaq_*`, units last, counters end in
//! `_total`.
//!
//! Nearly everything is read at scrape time from state the server keeps anyway (a custom
//! [`Collector`]): connection and traffic counters, stream states, consumer infos, the filter
//! counters, the agent table's snapshot. The per-message work added for metrics is a few
//! relaxed atomics: per-stream publish outcomes, the publish-to-ack and store-sync histograms,
//! and, only with `metrics { detail: true }`, the per-subject-prefix counters.
//!
//! Default series are few (per server, per stream, per intent and agent); `detail` adds the
//! per-consumer, per-subject-prefix and per-shed-subject series, each bounded (see `limits.rs`).

use std::fmt::Error;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use serde_json::Value;

use super::Monitor;
use crate::jetstream::stream::Stream;
use crate::limits;
use crate::stats::{Histogram, PrefixRow};

/// The OpenMetrics content type, served when the scraper's `Accept` names it.
const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// `GET /metrics`.
pub async fn metrics(State(monitor): State<Arc<Monitor>>, headers: HeaderMap) -> Response {
    let openmetrics = headers
        .get(header::ACCEPT)
        .and_then(|accept| accept.to_str().ok())
        .is_some_and(|accept| accept.contains("application/openmetrics-text"));
    match render(monitor, openmetrics) {
        Ok(text) => {
            let content_type = if openmetrics {
                OPENMETRICS_CONTENT_TYPE
            } else {
                prometheus_client::encoding::prometheus_text::CONTENT_TYPE
            };
            ([(header::CONTENT_TYPE, content_type)], text).into_response()
        }
        Err(Error) => (StatusCode::INTERNAL_SERVER_ERROR, "metrics could not be encoded").into_response(),
    }
}

/// Encodes every series once.
pub fn render(monitor: Arc<Monitor>, openmetrics: bool) -> Result<String, Error> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Scrape(monitor)));
    let mut text = String::new();
    if openmetrics {
        prometheus_client::encoding::text::encode(&mut text, &registry)?;
    } else {
        prometheus_client::encoding::prometheus_text::encode(&mut text, &registry)?;
    }
    Ok(text)
}

/// The collector: reads the monitor's handles at each scrape.
#[derive(Debug)]
struct Scrape(Arc<Monitor>);

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), Error> {
        let monitor = &self.0;
        let mut out = Out { encoder: &mut encoder };
        server(monitor, &mut out)?;
        subjects(monitor, &mut out)?;
        filters(monitor, &mut out)?;
        jetstream(monitor, &mut out)?;
        agents(monitor, &mut out)?;
        tokens(monitor, &mut out)?;
        delivery_latency(monitor, &mut out)?;
        Ok(())
    }
}

/// Label pairs of one series.
type Labels<'a> = Vec<(&'static str, &'a str)>;

/// Writes metric families.
struct Out<'e, 'a> {
    encoder: &'e mut DescriptorEncoder<'a>,
}

impl Out<'_, '_> {
    /// One unlabelled counter.
    fn counter(&mut self, name: &str, help: &str, unit: Option<&Unit>, value: u64) -> Result<(), Error> {
        let mut metric = self.encoder.encode_descriptor(name, help, unit, MetricType::Counter)?;
        metric.encode_counter::<NoLabelSet, _, u64>(&value, None)
    }

    /// One unlabelled gauge.
    fn gauge(&mut self, name: &str, help: &str, unit: Option<&Unit>, value: f64) -> Result<(), Error> {
        let mut metric = self.encoder.encode_descriptor(name, help, unit, MetricType::Gauge)?;
        metric.encode_gauge(&value)
    }

    /// A labelled family of counters or gauges.
    fn family<L: EncodeLabelSet>(
        &mut self,
        (name, help, unit, kind): (&str, &str, Option<&Unit>, MetricType),
        rows: impl IntoIterator<Item = (L, f64)>,
    ) -> Result<(), Error> {
        let mut metric = self.encoder.encode_descriptor(name, help, unit, kind)?;
        for (labels, value) in rows {
            let mut series = metric.encode_family(&labels)?;
            if matches!(kind, MetricType::Counter) {
                series.encode_counter::<NoLabelSet, _, u64>(&(value as u64), None)?;
            } else {
                series.encode_gauge(&value)?;
            }
        }
        Ok(())
    }

    /// A labelled family of histograms: (labels, sum, count, per-bucket (upper bound, count)).
    fn histograms<L: EncodeLabelSet>(
        &mut self,
        (name, help, unit): (&str, &str, Option<&Unit>),
        rows: impl IntoIterator<Item = (L, f64, u64, Vec<(f64, u64)>)>,
    ) -> Result<(), Error> {
        let mut metric = self.encoder.encode_descriptor(name, help, unit, MetricType::Histogram)?;
        for (labels, sum, count, buckets) in rows {
            metric.encode_family(&labels)?.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)?;
        }
        Ok(())
    }

    /// One unlabelled histogram.
    fn histogram(&mut self, name: &str, help: &str, histogram: &Histogram) -> Result<(), Error> {
        let (sum, count, buckets) = histogram.snapshot();
        let mut metric = self.encoder.encode_descriptor(name, help, Some(&Unit::Seconds), MetricType::Histogram)?;
        metric.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }
}

const COUNTER: MetricType = MetricType::Counter;
const GAUGE: MetricType = MetricType::Gauge;

/// Connections, subscriptions, traffic, slow consumers, sheds, latencies, the process.
fn server(monitor: &Monitor, out: &mut Out<'_, '_>) -> Result<(), Error> {
    let stats = &monitor.bus.stats;
    let load = |counter: &std::sync::atomic::AtomicU64| counter.load(std::sync::atomic::Ordering::Relaxed);
    let bytes = Some(&Unit::Bytes);
    out.gauge("semaq_connections", "Open client connections.", None, monitor.bus.clients.len() as f64)?;
    out.counter(
        "semaq_connections_accepted",
        "Connections accepted since start.",
        None,
        load(&stats.total_connections),
    )?;
    out.counter(
        "semaq_connections_refused",
        "Connections refused at the connection limit.",
        None,
        load(&stats.refused_connections),
    )?;
    out.counter("semaq_auth_failures", "Authentication failures.", None, load(&stats.auth_failures))?;
    out.counter("semaq_slow_consumers", "Clients disconnected for not keeping up.", None, load(&stats.slow_consumers))?;
    out.gauge(
        "semaq_subscriptions",
        "Subscriptions held, internal ones included.",
        None,
        monitor.bus.subscription_count() as f64,
    )?;
    let ((in_msgs, in_bytes), (out_msgs, out_bytes)) = monitor.bus.traffic_totals();
    out.counter("semaq_in_messages", "Messages received from clients.", None, in_msgs)?;
    out.counter("semaq_in", "Bytes (headers and payloads) received from clients.", bytes, in_bytes)?;
    out.counter("semaq_out_messages", "Messages delivered to clients.", None, out_msgs)?;
    out.counter("semaq_out", "Bytes (headers and payloads) delivered to clients.", bytes, out_bytes)?;
    let (shed_msgs, shed_bytes) = stats.shed.total.snapshot();
    out.counter(
        "semaq_lossy_shed_messages",
        "Semaq-Lossy messages shed for clients past their high-water mark.",
        None,
        shed_msgs,
    )?;
    out.counter("semaq_lossy_shed", "Bytes of Semaq-Lossy messages shed.", bytes, shed_bytes)?;
    out.counter(
        "semaq_schema_refusals",
        "Messages refused by a schema (L2 streams).",
        None,
        load(&monitor.registry.refusals),
    )?;
    out.histogram(
        "semaq_jetstream_publish_ack",
        "Time from a JetStream publish's capture to its PubAck being sent.",
        &stats.publish_ack_latency,
    )?;
    out.histogram(
        "semaq_store_sync",
        "Time one stream store fsync took (one per ingest batch).",
        &stats.store_sync_latency,
    )?;
    out.gauge(
        "semaq_resident_memory",
        "Resident memory of the process.",
        bytes,
        super::resident_memory_bytes() as f64,
    )?;
    out.gauge(
        "semaq_uptime",
        "Time since the server started.",
        Some(&Unit::Seconds),
        monitor.identity.started.elapsed().as_secs_f64(),
    )?;
    let mut info = out.encoder.encode_descriptor("semaq_build", "The server's versions.", None, MetricType::Info)?;
    info.encode_info(&[
        ("version", crate::identity::SEMAQ_VERSION),
        ("nats_version", crate::identity::NATS_COMPATIBLE_VERSION),
    ])
}

/// With `detail`: traffic per subject prefix, and sheds per subject.
fn subjects(monitor: &Monitor, out: &mut Out<'_, '_>) -> Result<(), Error> {
    if !monitor.options.metrics.detail {
        return Ok(());
    }
    let rows = monitor.bus.stats.subjects.snapshot();
    let bytes = Some(&Unit::Bytes);
    let series =
        |pick: fn(&PrefixRow) -> u64| rows.iter().map(move |row| (vec![("prefix", row.0.as_str())], pick(row) as f64));
    let help_in = "Messages received from clients per subject prefix (the rest under _other).";
    out.family(("semaq_subject_in_messages", help_in, None, COUNTER), series(|r| r.1 .0))?;
    out.family(("semaq_subject_in", "Bytes received per subject prefix.", bytes, COUNTER), series(|r| r.1 .1))?;
    let help_out = "Messages delivered to clients per subject prefix.";
    out.family(("semaq_subject_out_messages", help_out, None, COUNTER), series(|r| r.2 .0))?;
    out.family(("semaq_subject_out", "Bytes delivered per subject prefix.", bytes, COUNTER), series(|r| r.2 .1))?;
    let shed = monitor.bus.stats.shed.subjects();
    let help_shed = "Semaq-Lossy messages shed per subject (the rest under _other).";
    out.family(
        ("semaq_subject_lossy_shed_messages", help_shed, None, COUNTER),
        shed.iter().map(|(subject, n)| (vec![("subject", subject.as_str())], *n as f64)),
    )
}

/// CEL filter counters (core subscriptions and consumers together).
fn filters(monitor: &Monitor, out: &mut Out<'_, '_>) -> Result<(), Error> {
    let counts = monitor.filters.stats.snapshot();
    out.gauge("semaq_filter_subscriptions", "Open filtered core subscriptions.", None, monitor.filters.len() as f64)?;
    out.counter("semaq_filter_evaluations", "Filter evaluations.", None, counts.evaluations)?;
    out.counter("semaq_filter_matches", "Filter evaluations that matched.", None, counts.matches)?;
    out.counter(
        "semaq_filter_non_matches",
        "Filter evaluations that did not match, for any reason.",
        None,
        counts.non_matches,
    )?;
    let reasons: [(&str, u64); 4] = [
        ("not_json", counts.not_json),
        ("missing_field", counts.missing_field),
        ("runtime_error", counts.runtime_errors),
        ("undecodable", counts.undecodable),
    ];
    out.family(
        (
            "semaq_filter_non_matches_by_reason",
            "Non-matches for a reason other than a false expression.",
            None,
            COUNTER,
        ),
        reasons.iter().map(|(reason, n)| (vec![("reason", *reason)], *n as f64)),
    )
}

/// A stream and the account label its series carry: none for the home account's streams (as
/// when there was one JetStream), the account's name for every other account's.
type AccountStream<'a> = (Option<&'a str>, Arc<Stream>);

/// The labels of one stream's series.
fn stream_labels<'a>((account, stream): &'a AccountStream<'a>) -> Labels<'a> {
    match account {
        Some(account) => vec![("account", *account), ("stream", stream.name.as_str())],
        None => vec![("stream", stream.name.as_str())],
    }
}

/// Streams (state, publishes, refusals by reason), consumers (with `detail`), the API: every
/// account's JetStream.
fn jetstream(monitor: &Monitor, out: &mut Out<'_, '_>) -> Result<(), Error> {
    let Some(jetstreams) = &monitor.jetstream else { return Ok(()) };
    let load = |counter: &std::sync::atomic::AtomicU64| counter.load(std::sync::atomic::Ordering::Relaxed);
    let accounts = jetstreams.all();
    let home = monitor.options.home_account();
    let streams: Vec<AccountStream<'_>> = (accounts.iter())
        .flat_map(|jetstream| {
            let name = jetstream.account().name.as_str();
            let label = (name != home).then_some(name);
            jetstream.streams().into_iter().map(move |stream| (label, stream))
        })
        .collect();
    let consumers: usize = streams.iter().map(|(_, s)| s.consumer_count()).sum();
    let (requests, errors) =
        (accounts.iter()).fold((0, 0), |(r, e), js| (r + load(&js.api_requests), e + load(&js.api_errors)));
    out.gauge("semaq_jetstream_streams", "Streams, all accounts together.", None, streams.len() as f64)?;
    out.gauge("semaq_jetstream_consumers", "Consumers, all streams together.", None, consumers as f64)?;
    out.counter("semaq_jetstream_api_requests", "JetStream API requests answered.", None, requests)?;
    out.counter("semaq_jetstream_api_errors", "JetStream API requests answered with an error.", None, errors)?;

    let named = &streams[..streams.len().min(limits::METRICS_STREAMS_MAX)];
    let states: Vec<_> =
        named.iter().map(|entry| (stream_labels(entry), entry.1.state(), entry.1.consumer_count())).collect();
    let per_stream = |value: fn(&semaq_store::StreamState, usize) -> f64| {
        states.iter().map(move |(labels, state, consumers)| (labels.clone(), value(state, *consumers)))
    };
    out.family(
        ("semaq_stream_messages", "Messages stored per stream.", None, GAUGE),
        per_stream(|s, _| s.msgs as f64),
    )?;
    out.family(
        ("semaq_stream", "Bytes stored per stream.", Some(&Unit::Bytes), GAUGE),
        per_stream(|s, _| s.bytes as f64),
    )?;
    out.family(
        ("semaq_stream_first_seq", "First sequence stored per stream.", None, GAUGE),
        per_stream(|s, _| s.first_seq as f64),
    )?;
    out.family(
        ("semaq_stream_last_seq", "Last sequence stored per stream.", None, GAUGE),
        per_stream(|s, _| s.last_seq as f64),
    )?;
    out.family(("semaq_stream_consumers", "Consumers per stream.", None, GAUGE), per_stream(|_, c| c as f64))?;
    let publishes = named.iter().map(|entry| (stream_labels(entry), load(&entry.1.publishes.stored) as f64));
    let help = "Publishes stored per stream (an atomic batch counts once, at its commit).";
    out.family(("semaq_stream_publishes", help, None, COUNTER), publishes)?;
    let duplicates = named.iter().map(|entry| (stream_labels(entry), load(&entry.1.publishes.duplicates) as f64));
    let help = "Publishes acknowledged as duplicates per stream (Nats-Msg-Id or L3 producer sequence).";
    out.family(("semaq_stream_duplicates", help, None, COUNTER), duplicates)?;
    // Only reasons that happened: 13 reasons for each of many streams would be mostly zeros.
    let refusals: Vec<(Labels<'_>, f64)> = named
        .iter()
        .flat_map(|entry| {
            entry.1.publishes.refusals().into_iter().filter(|(_, n)| *n > 0).map(move |(reason, n)| {
                let mut labels = stream_labels(entry);
                labels.push(("reason", reason.label()));
                (labels, n as f64)
            })
        })
        .collect();
    let help = "Publishes refused per stream and reason (schema, level, event_time, lineage, limits, dedup, ...).";
    out.family(("semaq_stream_refusals", help, None, COUNTER), refusals)?;
    if monitor.options.metrics.detail {
        consumers_detail(named, out)?;
    }
    Ok(())
}

/// With `detail`: each consumer's pending, ack pending, redelivered and waiting counts.
fn consumers_detail(streams: &[AccountStream<'_>], out: &mut Out<'_, '_>) -> Result<(), Error> {
    let infos: Vec<(Labels<'_>, String, Value)> = streams
        .iter()
        .flat_map(|entry| entry.1.consumers().into_iter().map(move |c| (stream_labels(entry), c)))
        .take(limits::METRICS_CONSUMERS_MAX)
        .map(|(labels, consumer)| {
            let info = consumer.info();
            let name = info["name"].as_str().unwrap_or_default().to_string();
            (labels, name, info)
        })
        .collect();
    let fields: [(&str, &str, &str); 6] = [
        ("semaq_consumer_pending_messages", "Messages not yet delivered per consumer (num_pending).", "/num_pending"),
        (
            "semaq_consumer_ack_pending_messages",
            "Messages delivered and not yet acked (num_ack_pending).",
            "/num_ack_pending",
        ),
        (
            "semaq_consumer_redelivered_messages",
            "Messages delivered more than once and not yet acked.",
            "/num_redelivered",
        ),
        ("semaq_consumer_waiting_requests", "Pull requests waiting (num_waiting).", "/num_waiting"),
        ("semaq_consumer_delivered_stream_seq", "Last stream sequence delivered.", "/delivered/stream_seq"),
        ("semaq_consumer_ack_floor_stream_seq", "Stream sequence below which all is acked.", "/ack_floor/stream_seq"),
    ];
    for (name, help, pointer) in fields {
        let rows = infos.iter().map(|(labels, consumer, info)| {
            let value = info.pointer(pointer).and_then(Value::as_f64).unwrap_or(0.0);
            let mut labels = labels.clone();
            labels.push(("consumer", consumer.as_str()));
            (labels, value)
        });
        out.family((name, help, None, GAUGE), rows)?;
    }
    Ok(())
}

/// The agent network, read from the snapshot `/semaq/agents` serves.
fn agents(monitor: &Monitor, out: &mut Out<'_, '_>) -> Result<(), Error> {
    let snapshot = monitor.agents.snapshot();
    let empty = Vec::new();
    let agents = snapshot["agents"].as_array().unwrap_or(&empty);
    let intents = snapshot["intents"].as_array().unwrap_or(&empty);
    out.gauge("semaq_agents", "Live agents.", None, agents.len() as f64)?;
    let number = |value: &Value, key: &str| value[key].as_f64().unwrap_or(0.0);
    let per_intent = |key: &'static str| {
        intents
            .iter()
            .map(move |intent| (vec![("intent", intent["name"].as_str().unwrap_or_default())], number(intent, key)))
    };
    out.family(("semaq_intent_routed", "Requests routed per intent.", None, COUNTER), per_intent("routed"))?;
    out.family(
        ("semaq_intent_unroutable", "Requests no agent could take per intent.", None, COUNTER),
        per_intent("unroutable"),
    )?;
    out.family(
        ("semaq_intent_waiting_requests", "Requests waiting for capacity per intent.", None, GAUGE),
        per_intent("waiting"),
    )?;
    let members: Vec<(&str, &Value)> = intents
        .iter()
        .flat_map(|intent| {
            let name = intent["name"].as_str().unwrap_or_default();
            intent["agents"].as_array().unwrap_or(&empty).iter().map(move |member| (name, member))
        })
        .collect();
    let per_member = |key: &'static str| {
        members.iter().map(move |(intent, member)| {
            let agent = member["agent_id"].as_str().unwrap_or_default();
            (vec![("intent", *intent), ("agent", agent)], number(member, key))
        })
    };
    let families: [(&str, &str, MetricType, &'static str); 6] = [
        ("semaq_agent_weight", "Learned routing weight per intent and agent.", GAUGE, "weight"),
        (
            "semaq_agent_in_flight_requests",
            "Requests in flight per intent and agent (the agent's, all intents).",
            GAUGE,
            "in_flight",
        ),
        ("semaq_agent_requests", "Requests routed per intent and agent.", COUNTER, "routed"),
        ("semaq_agent_ok", "Requests answered without error per intent and agent.", COUNTER, "ok"),
        ("semaq_agent_errors", "Requests answered with an error per intent and agent.", COUNTER, "errors"),
        ("semaq_agent_timeouts", "Requests unanswered in time per intent and agent.", COUNTER, "timeouts"),
    ];
    for (name, help, kind, key) in families {
        out.family((name, help, None, kind), per_member(key))?;
    }
    Ok(())
}

/// Token load as the OpenTelemetry GenAI conventions name it: `gen_ai.client.token.usage`, a
/// histogram of tokens per message by `gen_ai.token.type` and `gen_ai.request.model`, in
/// Prometheus spelling; and the token counts refused as not numbers.
fn tokens(monitor: &Monitor, out: &mut Out<'_, '_>) -> Result<(), Error> {
    let usage = monitor.tokens.usage_by_model();
    let bounds = crate::tokens::USAGE_BUCKETS.iter().map(|b| *b as f64).chain(std::iter::once(f64::INFINITY));
    let rows = usage.iter().map(|h| {
        let labels = vec![("gen_ai_token_type", h.token_type), ("gen_ai_request_model", h.model.as_str())];
        let buckets: Vec<(f64, u64)> = bounds.clone().zip(h.counts.iter().copied()).collect();
        (labels, h.sum as f64, h.counts.iter().sum::<u64>(), buckets)
    });
    let help = "Tokens per message, by token type (input, output) and model (Semaq-Tokens-In/Out, payload fields).";
    out.histograms(("gen_ai_client_token_usage", help, None), rows)?;
    let invalid = "Token counts refused as not whole numbers (headers and payload fields).";
    out.counter("semaq_token_counts_invalid", invalid, None, monitor.tokens.invalid())?;
    let dropped = "Trace spans dropped because the OTLP export queue was full.";
    out.counter("semaq_trace_spans_dropped", dropped, None, crate::trace::dropped_spans())
}

/// Publish-to-delivery latency per stream and subject prefix, and the share within the objective.
fn delivery_latency(monitor: &Monitor, out: &mut Out<'_, '_>) -> Result<(), Error> {
    let latency = &monitor.latency;
    let objective = latency.objective_us() as f64 / 1e6;
    out.gauge(
        "semaq_delivery_latency_objective_seconds",
        "The latency objective, publish to delivery.",
        None,
        objective,
    )?;
    let all = latency.buckets();
    for (kind, label) in [("stream", "stream"), ("subject", "prefix")] {
        let rows = all.iter().filter(|b| b.kind == kind).map(|b| {
            let mut previous = 0;
            let mut buckets: Vec<(f64, u64)> = b
                .cumulative
                .iter()
                .map(|(bound_us, at_or_below)| {
                    let count = at_or_below.saturating_sub(previous);
                    previous = *at_or_below;
                    (*bound_us as f64 / 1e6, count)
                })
                .collect();
            buckets.push((f64::INFINITY, b.count.saturating_sub(previous)));
            (vec![(label, b.key.as_str())], b.sum_us as f64 / 1e6, b.count, buckets)
        });
        let name = format!("semaq_{kind}_delivery_latency");
        let help = format!("Store to first delivery by a consumer, per {label}.");
        out.histograms((&name, &help, Some(&Unit::Seconds)), rows)?;
        let within = all.iter().filter(|b| b.kind == kind).map(|b| {
            let share = if b.count == 0 { 1.0 } else { b.within as f64 / b.count as f64 };
            (vec![(label, b.key.as_str())], share)
        });
        let name = format!("semaq_{kind}_delivery_within_objective_ratio");
        let help = format!("Share of first deliveries within the latency objective, per {label}.");
        out.family((&name, &help, None, GAUGE), within)?;
    }
    Ok(())
}
