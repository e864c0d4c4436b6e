//! Token load: tokens in and out per model, subject, intent and agent, in time buckets.
//!
//! Counts come from the SPEC §2 headers (`Semaq-Tokens-In`, `Semaq-Tokens-Out`, `Semaq-Model`,
//! `Semaq-Intent`) on any publish, from an agent's reply (which names the agent and intent it
//! answered), or from payload fields a stream names in its metadata (`semaq.tokens_in_field`,
//! `semaq.tokens_out_field`, `semaq.model_field`) for messages without the headers.
//!
//! Each series keeps two rings: `TOKEN_FINE_BUCKETS` buckets of `TOKEN_FINE_BUCKET_SECONDS`
//! (10 s for an hour) and `TOKEN_COARSE_BUCKETS` of `TOKEN_COARSE_BUCKET_SECONDS` (1 min for a
//! day), 16 bytes a bucket, 28.8 KB a series. At most `TOKEN_SERIES_PER_DIMENSION_MAX` series per
//! dimension, then one `_other`: four dimensions of 129 series are at most 14.9 MB.

pub mod http;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use semaq_wire::headers::{names, Headers};
use serde::Serialize;

use crate::limits;
use crate::stats::bump;
use crate::sync::lock;

/// The series key that collects everything past the per-dimension bound.
pub const OVERFLOW_KEY: &str = "_other";
/// Bucket bounds of the token-usage histogram, as the OpenTelemetry GenAI conventions advise
/// for `gen_ai.client.token.usage`: powers of 4 from 1 to 4^13.
pub const USAGE_BUCKETS: [u64; 14] =
    [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864];

/// What token load is grouped by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dimension {
    /// `Semaq-Model`, or the stream's model field.
    Model,
    /// The subject's first `TOKEN_SUBJECT_DEPTH` tokens.
    Subject,
    /// The intent: `intent.NAME`, `Semaq-Intent`, or the intent a reply answered.
    Intent,
    /// The agent that answered.
    Agent,
}

const DIMENSIONS: [Dimension; 4] = [Dimension::Model, Dimension::Subject, Dimension::Intent, Dimension::Agent];

impl Dimension {
    /// The dimension a `by=` value names.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "model" => Some(Self::Model),
            "subject" => Some(Self::Subject),
            "intent" => Some(Self::Intent),
            "agent" => Some(Self::Agent),
            _ => None,
        }
    }

    /// Its `by=` name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Model => "model",
            Self::Subject => "subject",
            Self::Intent => "intent",
            Self::Agent => "agent",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// One message's tokens and what they are attributed to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage<'a> {
    /// Input (prompt) tokens.
    pub tokens_in: u64,
    /// Output (completion) tokens.
    pub tokens_out: u64,
    /// The model.
    pub model: Option<&'a str>,
    /// The subject it was published to.
    pub subject: &'a str,
    /// The intent.
    pub intent: Option<&'a str>,
    /// The agent that answered.
    pub agent: Option<&'a str>,
}

impl<'a> Usage<'a> {
    fn key(&self, dimension: Dimension) -> Option<&'a str> {
        match dimension {
            Dimension::Model => self.model,
            Dimension::Subject => Some(crate::stats::subject_prefix(self.subject, limits::TOKEN_SUBJECT_DEPTH)),
            Dimension::Intent => self.intent.or_else(|| self.subject.strip_prefix("intent.")),
            Dimension::Agent => self.agent,
        }
    }
}

/// A token-count header or field that is not a whole number up to `TOKENS_PER_MESSAGE_MAX`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} is not a token count: {value:?}")]
pub struct InvalidCount {
    field: &'static str,
    value: String,
}

fn count(field: &'static str, value: Option<&str>) -> Result<u64, InvalidCount> {
    let Some(value) = value else { return Ok(0) };
    match value.trim().parse::<u64>() {
        Ok(n) if n <= limits::TOKENS_PER_MESSAGE_MAX => Ok(n),
        _ => Err(InvalidCount { field, value: value.chars().take(64).collect() }),
    }
}

/// The token counts, model and intent a header block carries; `Ok(None)` when it names no
/// token count.
pub fn from_headers<'a>(block: &'a [u8], subject: &'a str) -> Result<Option<Usage<'a>>, InvalidCount> {
    let [tokens_in, tokens_out, model, intent] =
        Headers::new(block).get_many(&[names::TOKENS_IN, names::TOKENS_OUT, names::MODEL, names::INTENT]);
    if tokens_in.is_none() && tokens_out.is_none() {
        return Ok(None);
    }
    Ok(Some(Usage {
        tokens_in: count(names::TOKENS_IN, tokens_in)?,
        tokens_out: count(names::TOKENS_OUT, tokens_out)?,
        model,
        subject,
        intent,
        agent: None,
    }))
}

/// The payload fields a stream names for token counts and the model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PayloadFields<'a> {
    /// `semaq.tokens_in_field`.
    pub tokens_in: Option<&'a str>,
    /// `semaq.tokens_out_field`.
    pub tokens_out: Option<&'a str>,
    /// `semaq.model_field`.
    pub model: Option<&'a str>,
}

impl<'a> PayloadFields<'a> {
    /// The fields stream metadata names, if it names a count field.
    pub fn from_metadata(metadata: &'a std::collections::BTreeMap<String, String>) -> Option<Self> {
        let field = |key: &str| metadata.get(key).map(|v| v.trim()).filter(|v| !v.is_empty());
        let fields = Self {
            tokens_in: field("semaq.tokens_in_field"),
            tokens_out: field("semaq.tokens_out_field"),
            model: field("semaq.model_field"),
        };
        (fields.tokens_in.is_some() || fields.tokens_out.is_some()).then_some(fields)
    }

    /// Reads a JSON payload's counts and model; `Ok(None)` when it is not a JSON object or has
    /// neither count.
    pub fn read(&self, payload: &[u8]) -> Result<Option<(u64, u64, Option<String>)>, InvalidCount> {
        let Ok(serde_json::Value::Object(object)) = serde_json::from_slice::<serde_json::Value>(payload) else {
            return Ok(None);
        };
        let number = |field: Option<&str>, name: &'static str| -> Result<Option<u64>, InvalidCount> {
            let Some(value) = field.and_then(|f| object.get(f)) else { return Ok(None) };
            match value.as_u64() {
                Some(n) if n <= limits::TOKENS_PER_MESSAGE_MAX => Ok(Some(n)),
                _ => Err(InvalidCount { field: name, value: value.to_string().chars().take(64).collect() }),
            }
        };
        let tokens_in = number(self.tokens_in, "semaq.tokens_in_field")?;
        let tokens_out = number(self.tokens_out, "semaq.tokens_out_field")?;
        if tokens_in.is_none() && tokens_out.is_none() {
            return Ok(None);
        }
        let model = self.model.and_then(|f| object.get(f)).and_then(|v| v.as_str()).map(str::to_string);
        Ok(Some((tokens_in.unwrap_or(0), tokens_out.unwrap_or(0), model)))
    }
}

/// Fixed-size buckets over time, the newest at `head`; older ones are overwritten.
#[derive(Debug)]
struct Ring {
    bucket_seconds: u64,
    slots: Box<[(u64, u64)]>,
    /// Bucket number (unix seconds / bucket size) of the newest bucket.
    head: u64,
}

impl Ring {
    fn new(bucket_seconds: u64, buckets: usize, now_s: u64) -> Self {
        Self { bucket_seconds, slots: vec![(0, 0); buckets].into_boxed_slice(), head: now_s / bucket_seconds }
    }

    fn len(&self) -> u64 {
        self.slots.len() as u64
    }

    fn slot(&self, bucket: u64) -> usize {
        (bucket % self.len()) as usize
    }

    /// Moves the newest bucket up to `bucket`, clearing the ones skipped (at most the ring).
    fn advance(&mut self, bucket: u64) {
        if bucket <= self.head {
            return;
        }
        let steps = (bucket - self.head).min(self.len());
        for k in 1..=steps {
            let slot = self.slot(self.head + k);
            self.slots[slot] = (0, 0);
        }
        self.head = bucket;
    }

    fn add(&mut self, now_s: u64, tokens_in: u64, tokens_out: u64) {
        let bucket = now_s / self.bucket_seconds;
        self.advance(bucket);
        if bucket + self.len() <= self.head {
            return;
        }
        let slot = self.slot(bucket);
        let (sum_in, sum_out) = &mut self.slots[slot];
        *sum_in = sum_in.saturating_add(tokens_in);
        *sum_out = sum_out.saturating_add(tokens_out);
    }

    /// The sums of buckets `first..=last`, zero for those outside the ring.
    fn read(&self, first: u64, last: u64) -> (Vec<u64>, Vec<u64>) {
        let oldest = (self.head + 1).saturating_sub(self.len());
        (first..=last)
            .map(|bucket| match bucket >= oldest && bucket <= self.head {
                true => self.slots[self.slot(bucket)],
                false => (0, 0),
            })
            .unzip()
    }
}

/// One key's load.
#[derive(Debug)]
struct Series {
    fine: Ring,
    coarse: Ring,
    total_in: u64,
    total_out: u64,
    /// Per-message token counts by [`USAGE_BUCKETS`], input then output; the last counts the rest.
    usage: [[u64; USAGE_BUCKETS.len() + 1]; 2],
    usage_sum: [u64; 2],
}

impl Series {
    fn new(now_s: u64) -> Self {
        Self {
            fine: Ring::new(limits::TOKEN_FINE_BUCKET_SECONDS, limits::TOKEN_FINE_BUCKETS, now_s),
            coarse: Ring::new(limits::TOKEN_COARSE_BUCKET_SECONDS, limits::TOKEN_COARSE_BUCKETS, now_s),
            total_in: 0,
            total_out: 0,
            usage: [[0; USAGE_BUCKETS.len() + 1]; 2],
            usage_sum: [0; 2],
        }
    }

    fn add(&mut self, now_s: u64, tokens_in: u64, tokens_out: u64) {
        self.fine.add(now_s, tokens_in, tokens_out);
        self.coarse.add(now_s, tokens_in, tokens_out);
        self.total_in = self.total_in.saturating_add(tokens_in);
        self.total_out = self.total_out.saturating_add(tokens_out);
        for (kind, tokens) in [tokens_in, tokens_out].into_iter().enumerate() {
            let bucket = USAGE_BUCKETS.iter().position(|bound| tokens <= *bound).unwrap_or(USAGE_BUCKETS.len());
            self.usage[kind][bucket] += 1;
            self.usage_sum[kind] = self.usage_sum[kind].saturating_add(tokens);
        }
    }
}

/// A window's load, as `/api/tokens` serves it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Report {
    /// The dimension.
    pub by: &'static str,
    /// The window asked for, in seconds.
    pub window_seconds: u64,
    /// Each bucket's width.
    pub bucket_seconds: u64,
    /// Unix seconds at the start of the first bucket.
    pub start: u64,
    /// Buckets in each series.
    pub buckets: usize,
    /// One series per key, the largest total first.
    pub series: Vec<SeriesReport>,
    /// Token counts refused as not numbers (headers and payload fields) since start.
    pub invalid: u64,
}

/// One key's load in a [`Report`].
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SeriesReport {
    /// The model, subject prefix, intent or agent (`_other` past the bound).
    pub key: String,
    /// Input tokens per bucket.
    pub tokens_in: Vec<u64>,
    /// Output tokens per bucket.
    pub tokens_out: Vec<u64>,
    /// Input tokens in the window.
    pub total_in: u64,
    /// Output tokens in the window.
    pub total_out: u64,
}

/// A model's token-usage histogram, for `gen_ai_client_token_usage`.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageHistogram {
    /// The model.
    pub model: String,
    /// `input` or `output` (`gen_ai.token.type`).
    pub token_type: &'static str,
    /// Messages per bucket of [`USAGE_BUCKETS`], not cumulative; the last past the largest bound.
    pub counts: Vec<u64>,
    /// Tokens in all.
    pub sum: u64,
}

/// A window that `/api/tokens` cannot serve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    /// Not a number with a unit s, m, h or d.
    #[error("window must be a number with a unit s, m, h or d (like 10m or 1h), not {0:?}")]
    Unreadable(String),
    /// Shorter than one bucket or longer than a day.
    #[error("window must be from 10s to 24h, not {0:?}")]
    OutOfRange(String),
}

/// Reads a window such as `10m`, `1h` or `1d`, from one fine bucket to a day.
pub fn parse_window(text: &str) -> Result<Duration, WindowError> {
    let unreadable = || WindowError::Unreadable(text.chars().take(32).collect());
    let split = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(unreadable)?;
    let value: u64 = text[..split].parse().map_err(|_| unreadable())?;
    let unit = match &text[split..] {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(unreadable()),
    };
    let seconds = value.checked_mul(unit).ok_or_else(|| WindowError::OutOfRange(text.chars().take(32).collect()))?;
    let coarse_span = limits::TOKEN_COARSE_BUCKET_SECONDS * limits::TOKEN_COARSE_BUCKETS as u64;
    if seconds < limits::TOKEN_FINE_BUCKET_SECONDS || seconds > coarse_span {
        return Err(WindowError::OutOfRange(text.chars().take(32).collect()));
    }
    Ok(Duration::from_secs(seconds))
}

/// The token load, shared by the publish path and the monitoring endpoints.
#[derive(Debug, Default)]
pub struct Tokens {
    series: Mutex<[HashMap<Box<str>, Series>; 4]>,
    invalid: AtomicU64,
}

fn now_s() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl Tokens {
    /// Counts one message's tokens in every dimension it names.
    pub fn record(&self, usage: &Usage<'_>) {
        self.record_at(usage, now_s());
    }

    /// Counts a token count that was not a number.
    pub fn record_invalid(&self) {
        bump(&self.invalid);
    }

    /// Token counts refused since start.
    pub fn invalid(&self) -> u64 {
        self.invalid.load(Ordering::Relaxed)
    }

    /// Counts a header block's tokens, if it names any; a count that is not a number is
    /// counted as invalid and nothing else.
    pub fn record_headers(&self, block: &[u8], subject: &str, routed: Option<(&str, &str)>) {
        match from_headers(block, subject) {
            Ok(Some(mut usage)) => {
                if let Some((agent, intent)) = routed {
                    usage.agent = Some(agent);
                    usage.intent = usage.intent.or(Some(intent));
                }
                self.record(&usage);
            }
            Ok(None) => {}
            Err(_) => self.record_invalid(),
        }
    }

    /// Counts a stored message's tokens from the payload fields its stream names, unless its
    /// headers carried counts (the publish already counted those).
    pub fn record_payload(&self, fields: &PayloadFields<'_>, subject: &str, headers: Option<&[u8]>, payload: &[u8]) {
        if headers.is_some_and(|block| from_headers(block, subject).is_ok_and(|usage| usage.is_some())) {
            return;
        }
        match fields.read(payload) {
            Ok(Some((tokens_in, tokens_out, model))) => {
                let model = model.as_deref().or_else(|| headers.and_then(|b| Headers::new(b).get(names::MODEL)));
                self.record(&Usage { tokens_in, tokens_out, model, subject, ..Usage::default() });
            }
            Ok(None) => {}
            Err(_) => self.record_invalid(),
        }
    }

    fn record_at(&self, usage: &Usage<'_>, now_s: u64) {
        let mut series = lock(&self.series);
        for dimension in DIMENSIONS {
            let Some(key) = usage.key(dimension) else { continue };
            let map = &mut series[dimension.index()];
            let key = match map.contains_key(key) || map.len() < limits::TOKEN_SERIES_PER_DIMENSION_MAX {
                true => key,
                false => OVERFLOW_KEY,
            };
            if !map.contains_key(key) {
                map.insert(key.into(), Series::new(now_s));
            }
            if let Some(entry) = map.get_mut(key) {
                entry.add(now_s, usage.tokens_in, usage.tokens_out);
            }
        }
    }

    /// The load of the last `window` by `by`: 10 s buckets up to an hour, 1 min up to a day.
    pub fn report(&self, by: Dimension, window: Duration) -> Report {
        self.report_at(by, window, now_s())
    }

    fn report_at(&self, by: Dimension, window: Duration, now_s: u64) -> Report {
        let fine_span = limits::TOKEN_FINE_BUCKET_SECONDS * limits::TOKEN_FINE_BUCKETS as u64;
        let bucket_seconds = match window.as_secs() <= fine_span {
            true => limits::TOKEN_FINE_BUCKET_SECONDS,
            false => limits::TOKEN_COARSE_BUCKET_SECONDS,
        };
        let buckets = window.as_secs().div_ceil(bucket_seconds).max(1);
        let last = now_s / bucket_seconds;
        let first = (last + 1).saturating_sub(buckets);
        let series = lock(&self.series);
        let mut reports: Vec<SeriesReport> = series[by.index()]
            .iter()
            .map(|(key, series)| {
                let ring =
                    if bucket_seconds == limits::TOKEN_FINE_BUCKET_SECONDS { &series.fine } else { &series.coarse };
                let (tokens_in, tokens_out) = ring.read(first, last);
                SeriesReport {
                    key: key.to_string(),
                    total_in: tokens_in.iter().sum(),
                    total_out: tokens_out.iter().sum(),
                    tokens_in,
                    tokens_out,
                }
            })
            .filter(|s| s.total_in + s.total_out > 0)
            .collect();
        drop(series);
        reports.sort_by(|a, b| (b.total_in + b.total_out).cmp(&(a.total_in + a.total_out)).then(a.key.cmp(&b.key)));
        Report {
            by: by.name(),
            window_seconds: window.as_secs(),
            bucket_seconds,
            start: first * bucket_seconds,
            buckets: (last + 1 - first) as usize,
            series: reports,
            invalid: self.invalid(),
        }
    }

    /// Every model's token-usage histograms, input and output.
    pub fn usage_by_model(&self) -> Vec<UsageHistogram> {
        let series = lock(&self.series);
        let mut out = Vec::new();
        for (model, series) in &series[Dimension::Model.index()] {
            for (kind, token_type) in ["input", "output"].into_iter().enumerate() {
                out.push(UsageHistogram {
                    model: model.to_string(),
                    token_type,
                    counts: series.usage[kind].to_vec(),
                    sum: series.usage_sum[kind],
                });
            }
        }
        out.sort_by(|a, b| (&a.model, a.token_type).cmp(&(&b.model, b.token_type)));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_800_000_000;

    fn usage<'a>(model: &'a str, subject: &'a str, tokens_in: u64, tokens_out: u64) -> Usage<'a> {
        Usage { tokens_in, tokens_out, model: Some(model), subject, ..Usage::default() }
    }

    #[test]
    fn sums_land_in_the_bucket_of_their_time_per_model() {
        let tokens = Tokens::default();
        tokens.record_at(&usage("llama", "ai.chat.x", 10, 100), T0);
        tokens.record_at(&usage("llama", "ai.chat.y", 5, 50), T0 + 1);
        tokens.record_at(&usage("gpt", "ai.chat.x", 7, 70), T0 + 25);
        let report = tokens.report_at(Dimension::Model, Duration::from_secs(60), T0 + 25);
        assert_eq!((report.bucket_seconds, report.buckets), (10, 6));
        let llama = report.series.iter().find(|s| s.key == "llama").unwrap();
        let gpt = report.series.iter().find(|s| s.key == "gpt").unwrap();
        assert_eq!((llama.total_in, llama.total_out), (15, 150));
        assert_eq!(llama.tokens_out, vec![0, 0, 0, 150, 0, 0]);
        assert_eq!(gpt.tokens_in, vec![0, 0, 0, 0, 0, 7]);
        assert_eq!(report.series[0].key, "llama", "largest first");
    }

    #[test]
    fn subjects_group_by_their_first_two_tokens_and_intents_by_name() {
        let tokens = Tokens::default();
        tokens.record_at(&usage("m", "ai.chat.a.b", 1, 0), T0);
        tokens.record_at(&usage("m", "ai.chat", 1, 0), T0);
        tokens.record_at(&usage("m", "intent.summarize", 1, 0), T0);
        let by_subject = tokens.report_at(Dimension::Subject, Duration::from_secs(60), T0);
        let keys: Vec<&str> = by_subject.series.iter().map(|s| s.key.as_str()).collect();
        assert_eq!(keys, vec!["ai.chat", "intent.summarize"]);
        let by_intent = tokens.report_at(Dimension::Intent, Duration::from_secs(60), T0);
        assert_eq!(by_intent.series.len(), 1);
        assert_eq!(by_intent.series[0].key, "summarize");
    }

    #[test]
    fn old_buckets_are_forgotten_and_a_day_uses_minutes() {
        let tokens = Tokens::default();
        tokens.record_at(&usage("m", "s", 1, 1), T0);
        let hour_later = tokens.report_at(Dimension::Model, Duration::from_secs(3600), T0 + 3700);
        assert!(hour_later.series.is_empty(), "out of the 10 s ring after an hour");
        let day = tokens.report_at(Dimension::Model, Duration::from_secs(86_400), T0 + 3700);
        assert_eq!((day.bucket_seconds, day.buckets), (60, 1440));
        assert_eq!(day.series[0].total_in, 1);
    }

    #[test]
    fn keys_past_the_bound_go_to_other() {
        let tokens = Tokens::default();
        let models: Vec<String> = (0..limits::TOKEN_SERIES_PER_DIMENSION_MAX + 5).map(|n| format!("m{n}")).collect();
        for model in &models {
            tokens.record_at(&usage(model, "s", 1, 0), T0);
        }
        let report = tokens.report_at(Dimension::Model, Duration::from_secs(60), T0);
        assert_eq!(report.series.len(), limits::TOKEN_SERIES_PER_DIMENSION_MAX + 1);
        let other = report.series.iter().find(|s| s.key == OVERFLOW_KEY).unwrap();
        assert_eq!(other.total_in, 5);
    }

    #[test]
    fn headers_give_counts_and_bad_counts_are_refused() {
        let block = b"NATS/1.0\r\nSemaq-Tokens-In: 12\r\nSemaq-Model: llama\r\n\r\n";
        let got = from_headers(block, "ai.x").unwrap().unwrap();
        assert_eq!((got.tokens_in, got.tokens_out, got.model), (12, 0, Some("llama")));
        assert_eq!(from_headers(b"NATS/1.0\r\nSemaq-Model: llama\r\n\r\n", "ai.x"), Ok(None));
        assert!(from_headers(b"NATS/1.0\r\nSemaq-Tokens-Out: lots\r\n\r\n", "ai.x").is_err());
        assert!(from_headers(b"NATS/1.0\r\nSemaq-Tokens-Out: -3\r\n\r\n", "ai.x").is_err());
        let tokens = Tokens::default();
        tokens.record_headers(b"NATS/1.0\r\nSemaq-Tokens-In: 1e9\r\n\r\n", "ai.x", None);
        assert_eq!(tokens.invalid(), 1);
    }

    #[test]
    fn payload_fields_give_counts_and_the_model() {
        let metadata = [("semaq.tokens_in_field", "input_tokens"), ("semaq.model_field", "model")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let fields = PayloadFields::from_metadata(&metadata).unwrap();
        let got = fields.read(br#"{"input_tokens": 40, "model": "gpt"}"#).unwrap();
        assert_eq!(got, Some((40, 0, Some("gpt".to_string()))));
        assert_eq!(fields.read(b"not json").unwrap(), None);
        assert!(fields.read(br#"{"input_tokens": "forty"}"#).is_err());
    }

    #[test]
    fn windows_are_read_and_bounded() {
        assert_eq!(parse_window("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_window("1d"), Ok(Duration::from_secs(86_400)));
        assert!(matches!(parse_window("5s"), Err(WindowError::OutOfRange(_))));
        assert!(matches!(parse_window("2d"), Err(WindowError::OutOfRange(_))));
        assert!(matches!(parse_window("99999999999999999999h"), Err(WindowError::Unreadable(_))));
        assert!(matches!(parse_window("18446744073709551615d"), Err(WindowError::OutOfRange(_))));
        assert!(matches!(parse_window("h"), Err(WindowError::Unreadable(_))));
        assert!(matches!(parse_window("10 minutes"), Err(WindowError::Unreadable(_))));
    }

    #[test]
    fn usage_histograms_count_messages_by_size() {
        let tokens = Tokens::default();
        tokens.record_at(&usage("m", "s", 3, 1000), T0);
        tokens.record_at(&usage("m", "s", 3, 2000), T0);
        let histograms = tokens.usage_by_model();
        let input = &histograms[0];
        assert_eq!((input.token_type, input.counts[1], input.sum), ("input", 2, 6));
        let output = &histograms[1];
        assert_eq!((output.counts[5], output.counts[6], output.sum), (1, 1, 3000));
    }
}
