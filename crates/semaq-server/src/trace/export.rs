//! OTLP/HTTP export: the settings from the standard `OTEL_*` environment variables, and the
//! task that posts batches of finished spans (protobuf) to the collector over HTTP/1.1.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use super::otlp::{self, Resource};
use super::span::{Sampler, SpanData};
use crate::limits;

/// Where and how spans are exported.
#[derive(Debug, Clone, PartialEq)]
pub struct ExportConfig {
    /// The collector's `host:port`.
    pub authority: String,
    /// The request path, `/v1/traces` unless a traces endpoint names another.
    pub path: String,
    /// Extra request headers (`OTEL_EXPORTER_OTLP_HEADERS`).
    pub headers: Vec<(String, String)>,
    /// How long one export may take.
    pub timeout: Duration,
    /// Which traces are recorded.
    pub sampler: Sampler,
    /// Resource attributes, `service.name` first.
    pub resource: Vec<(String, String)>,
}

impl ExportConfig {
    /// Reads the `OTEL_*` variables through `var`; `Ok(None)` when no endpoint is set (or the
    /// SDK or the traces exporter is switched off); `Err` names a value it cannot use.
    /// `sample_ratio` (the config file's `tracing { sample_ratio }`) stands in for
    /// `OTEL_TRACES_SAMPLER`/`_ARG` when those are unset.
    pub fn from_env(var: impl Fn(&str) -> Option<String>, sample_ratio: Option<f64>) -> Result<Option<Self>, String> {
        let var = |name: &str| var(name).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
        if var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
            || var("OTEL_TRACES_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none"))
        {
            return Ok(None);
        }
        let url = match (var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), var("OTEL_EXPORTER_OTLP_ENDPOINT")) {
            (Some(traces), _) => traces,
            (None, Some(base)) => format!("{}/v1/traces", base.trim_end_matches('/')),
            (None, None) => return Ok(None),
        };
        let (authority, path) = split_url(&url)?;
        let mut headers = Vec::new();
        for name in ["OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"] {
            headers.extend(var(name).map(|list| parse_pairs(&list)).unwrap_or_default());
        }
        let timeout_ms = var("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT").or_else(|| var("OTEL_EXPORTER_OTLP_TIMEOUT"));
        let timeout = match timeout_ms {
            Some(ms) => Duration::from_millis(ms.parse().map_err(|_| format!("OTEL_EXPORTER_OTLP_TIMEOUT: {ms:?}"))?),
            None => limits::TRACE_EXPORT_TIMEOUT,
        };
        let sampler = sampler(var("OTEL_TRACES_SAMPLER"), var("OTEL_TRACES_SAMPLER_ARG"), sample_ratio)?;
        let mut resource: Vec<(String, String)> =
            var("OTEL_RESOURCE_ATTRIBUTES").map(|list| parse_pairs(&list)).unwrap_or_default();
        let service = var("OTEL_SERVICE_NAME")
            .or_else(|| resource.iter().find(|(k, _)| k == "service.name").map(|(_, v)| v.clone()))
            .unwrap_or_else(|| "semaq-server".to_string());
        resource.retain(|(k, _)| k != "service.name");
        resource.insert(0, ("service.name".to_string(), service));
        Ok(Some(Self { authority, path, headers, timeout, sampler, resource }))
    }
}

/// `http://host:port/path` into (`host:port`, `/path`); https is refused (no TLS client here).
fn split_url(url: &str) -> Result<(String, String), String> {
    let Some(rest) = url.strip_prefix("http://") else {
        return Err(format!("OTLP endpoint {url:?}: only http:// endpoints are supported"));
    };
    let (authority, path) = match rest.find('/') {
        Some(at) => (&rest[..at], &rest[at..]),
        None => (rest, "/"),
    };
    if authority.is_empty() {
        return Err(format!("OTLP endpoint {url:?} names no host"));
    }
    let authority = if authority.rsplit_once(':').is_some_and(|(_, port)| port.parse::<u16>().is_ok()) {
        authority.to_string()
    } else {
        format!("{authority}:80")
    };
    Ok((authority, path.to_string()))
}

/// `k=v,k2=v2` (W3C baggage form, values percent-decoded), skipping entries without `=`.
fn parse_pairs(list: &str) -> Vec<(String, String)> {
    list.split(',')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (percent_decode(k.trim()), percent_decode(v.trim())))
        .filter(|(k, _)| !k.is_empty())
        .collect()
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let decoded = (bytes[at] == b'%')
            .then(|| bytes.get(at + 1..at + 3))
            .flatten()
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match decoded {
            Some(byte) => {
                out.push(byte);
                at += 3;
            }
            None => {
                out.push(bytes[at]);
                at += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The sampler `OTEL_TRACES_SAMPLER` and its argument name (default `parentbased_always_on`).
fn sampler(name: Option<String>, arg: Option<String>, sample_ratio: Option<f64>) -> Result<Sampler, String> {
    let ratio = || -> Result<f64, String> {
        match &arg {
            Some(text) => text
                .parse::<f64>()
                .ok()
                .filter(|r| (0.0..=1.0).contains(r))
                .ok_or_else(|| format!("OTEL_TRACES_SAMPLER_ARG {text:?} is not a ratio in [0, 1]")),
            None => Ok(1.0),
        }
    };
    let Some(name) = name else {
        return Ok(Sampler::ParentBased(Box::new(match sample_ratio {
            Some(ratio) => Sampler::Ratio(ratio),
            None => Sampler::AlwaysOn,
        })));
    };
    Ok(match name.to_ascii_lowercase().as_str() {
        "always_on" => Sampler::AlwaysOn,
        "always_off" => Sampler::AlwaysOff,
        "traceidratio" => Sampler::Ratio(ratio()?),
        "parentbased_always_on" => Sampler::ParentBased(Box::new(Sampler::AlwaysOn)),
        "parentbased_always_off" => Sampler::ParentBased(Box::new(Sampler::AlwaysOff)),
        "parentbased_traceidratio" => Sampler::ParentBased(Box::new(Sampler::Ratio(ratio()?))),
        other => return Err(format!("OTEL_TRACES_SAMPLER {other:?} is not supported")),
    })
}

/// Posts the spans from `spans` in batches until the queue closes.
pub async fn run(config: ExportConfig, mut spans: mpsc::Receiver<Box<SpanData>>) {
    let resource = Resource {
        attributes: config.resource.clone(),
        scope: "semaq-server".to_string(),
        version: env!("CARGO_PKG_VERSION").to_string(),
    };
    let mut batch = Vec::with_capacity(limits::TRACE_EXPORT_BATCH_SPANS_MAX);
    let mut failures = 0u64;
    loop {
        if spans.recv_many(&mut batch, limits::TRACE_EXPORT_BATCH_SPANS_MAX).await == 0 {
            return;
        }
        // Gather what else finishes shortly, so one request carries a publish's whole trace.
        let gather = tokio::time::sleep(limits::TRACE_EXPORT_DELAY);
        tokio::pin!(gather);
        while batch.len() < limits::TRACE_EXPORT_BATCH_SPANS_MAX {
            let room = limits::TRACE_EXPORT_BATCH_SPANS_MAX - batch.len();
            tokio::select! {
                _ = &mut gather => break,
                received = spans.recv_many(&mut batch, room) => if received == 0 { break },
            }
        }
        let body = otlp::encode_request(&resource, &batch);
        batch.clear();
        match tokio::time::timeout(config.timeout, post(&config, &body)).await {
            Ok(Ok(())) => failures = 0,
            Ok(Err(error)) => report(&mut failures, &error),
            Err(_) => report(&mut failures, "timed out"),
        }
    }
}

/// Logs the first failure of a run of them, then every hundredth.
fn report(failures: &mut u64, error: &str) {
    if failures.is_multiple_of(100) {
        tracing::warn!(%error, "OTLP trace export failed; the batch is dropped");
    }
    *failures += 1;
}

/// One `POST` with `Connection: close`; Ok when the collector answers 2xx.
async fn post(config: &ExportConfig, body: &[u8]) -> Result<(), String> {
    let mut socket = tokio::net::TcpStream::connect(&config.authority).await.map_err(|e| e.to_string())?;
    let mut request = format!(
        "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/x-protobuf\r\nContent-Length: {}\r\nConnection: close\r\n",
        config.path,
        config.authority,
        body.len()
    );
    for (name, value) in &config.headers {
        if !name.contains(['\r', '\n', ':']) && !value.contains(['\r', '\n']) {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
    }
    request.push_str("\r\n");
    socket.write_all(request.as_bytes()).await.map_err(|e| e.to_string())?;
    socket.write_all(body).await.map_err(|e| e.to_string())?;
    let mut head = [0u8; 64];
    let mut read = 0;
    while read < 12 {
        match socket.read(&mut head[read..]).await.map_err(|e| e.to_string())? {
            0 => break,
            n => read += n,
        }
    }
    let status_line = String::from_utf8_lossy(&head[..read]);
    let code = status_line.split_whitespace().nth(1).unwrap_or("");
    if code.starts_with('2') {
        Ok(())
    } else {
        Err(format!("collector answered {:?}", status_line.lines().next().unwrap_or("")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
    }

    #[test]
    fn no_endpoint_is_off() {
        assert_eq!(ExportConfig::from_env(env(&[("OTEL_SERVICE_NAME", "x")]), None), Ok(None));
        let off = [("OTEL_EXPORTER_OTLP_ENDPOINT", "http://h:1"), ("OTEL_SDK_DISABLED", "true")];
        assert_eq!(ExportConfig::from_env(env(&off), None), Ok(None));
    }

    #[test]
    fn the_standard_variables_are_read() {
        let vars = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "api-key=a%20b, x=1"),
            ("OTEL_SERVICE_NAME", "broker"),
            ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.25"),
        ];
        let config = ExportConfig::from_env(env(&vars), Some(0.5)).expect("valid").expect("on");
        assert_eq!(config.authority, "collector:4318");
        assert_eq!(config.path, "/v1/traces");
        assert_eq!(config.headers, [("api-key".into(), "a b".into()), ("x".into(), "1".into())]);
        assert_eq!(config.resource[0], ("service.name".into(), "broker".into()));
        assert_eq!(config.sampler, Sampler::ParentBased(Box::new(Sampler::Ratio(0.25))));
        let traces = [("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c/custom")];
        let config = ExportConfig::from_env(env(&traces), Some(0.5)).expect("valid").expect("on");
        assert_eq!((config.authority.as_str(), config.path.as_str()), ("c:80", "/custom"));
        assert_eq!(config.sampler, Sampler::ParentBased(Box::new(Sampler::Ratio(0.5))));
        assert!(ExportConfig::from_env(env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "https://c")]), None).is_err());
        let bad = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c"),
            ("OTEL_TRACES_SAMPLER_ARG", "2"),
            ("OTEL_TRACES_SAMPLER", "traceidratio"),
        ];
        assert!(ExportConfig::from_env(env(&bad), None).is_err());
    }
}
