//! Server-side content routing: CEL filters over message payloads and headers (SPEC §3).
//!
//! - `plan`: compiles the `cel` crate's AST into a native plan, refusing what can never work.
//! - `eval`, `value`: evaluate that plan over borrowed JSON, with CEL's rules.
//! - `interp`: the `cel` interpreter, for expressions outside the native subset.
//! - `message`: a message's headers and payload, parsed (or decoded with its schema) lazily and
//!   at most once; `cache`: stored payloads parsed once for all the consumers reading them.
//! - `subscriptions`: filtered core subscriptions (`$SEMAQ.API.SUB.CREATE` / `DELETE`).
//!
//! Bindings: each top-level payload field by name, `payload`, `subject`, `headers`. The three
//! reserved names win over payload fields of the same name. A Confluent wire-format payload
//! whose schema id the registry knows binds its decoded record (`registry::decode`).

mod cache;
mod eval;
mod interp;
pub mod message;
mod plan;
pub mod subscriptions;
#[cfg(test)]
mod tests;
mod value;

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

pub use self::cache::PayloadCache;
pub use self::message::{Context, PayloadIssue, Prepared};
pub use self::subscriptions::Filters;
use self::value::{Fail, Val};
use crate::limits;

/// Why an expression was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("filter error at line {line}, column {column}: {reason}")]
pub struct CompileError {
    /// 1-based line of the error.
    pub line: usize,
    /// 1-based column (in characters).
    pub column: usize,
    /// What is wrong.
    pub reason: String,
}

/// The outcome of one evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The expression is true: deliver.
    Match,
    /// The expression is false.
    NoMatch,
    /// It reads the payload, which is not JSON (or too large to parse).
    NotJson,
    /// It reads the payload, a wire-format payload of a known schema that does not decode.
    Undecodable,
    /// It reads a field the payload lacks.
    MissingField,
    /// A run-time error (wrong types, division by zero, a non-bool result).
    Error,
}

impl Verdict {
    /// Whether the message is delivered.
    pub fn matched(self) -> bool {
        self == Verdict::Match
    }
}

enum Program {
    Native(plan::Node),
    Interpreted(interp::Interpreted),
}

/// A compiled filter expression.
pub struct Filter {
    source: String,
    program: Program,
    reads_payload: bool,
}

impl std::fmt::Debug for Filter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Filter").field("source", &self.source).field("native", &self.is_native()).finish()
    }
}

impl Filter {
    /// Compiles `source`, refusing syntax errors, unknown functions and non-bool results.
    pub fn compile(source: &str) -> Result<Self, CompileError> {
        if source.len() > limits::FILTER_EXPRESSION_BYTES_MAX {
            let reason = format!("longer than {} bytes", limits::FILTER_EXPRESSION_BYTES_MAX);
            return Err(CompileError { line: 1, column: limits::FILTER_EXPRESSION_BYTES_MAX + 1, reason });
        }
        if source.trim().is_empty() {
            return Err(CompileError { line: 1, column: 1, reason: "empty expression".into() });
        }
        let program = interp::env().compile(source).map_err(parse_error)?;
        let compiled = plan::compile(program.expression()).map_err(|problem| {
            let (line, column) = program
                .source_info()
                .offset_for(problem.id)
                .map_or((1, 1), |(start, _)| line_column(source, start as usize));
            CompileError { line, column, reason: problem.reason }
        })?;
        let (program, reads_payload) = if compiled.native {
            (Program::Native(compiled.root), compiled.reads_payload)
        } else {
            let interpreted = interp::Interpreted::new(program);
            let reads = interpreted.reads_payload();
            (Program::Interpreted(interpreted), reads)
        };
        Ok(Self { source: source.to_string(), program, reads_payload })
    }

    /// The expression as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether it runs as a native plan (else in the interpreter).
    pub fn is_native(&self) -> bool {
        matches!(self.program, Program::Native(_))
    }

    /// Whether it may read the payload; when not, the payload is never parsed.
    pub fn reads_payload(&self) -> bool {
        self.reads_payload
    }

    /// Evaluates the filter for one message.
    pub fn evaluate(&self, message: &Prepared<'_>) -> Verdict {
        let verdict = self.run(message);
        if verdict == Verdict::NotJson && message.payload_issue() == Some(PayloadIssue::Undecodable) {
            return Verdict::Undecodable;
        }
        verdict
    }

    fn run(&self, message: &Prepared<'_>) -> Verdict {
        match &self.program {
            Program::Native(root) => verdict(eval::eval(root, message)),
            Program::Interpreted(interpreted) => match interpreted.eval(message) {
                Ok(cel::Value::Bool(true)) => Verdict::Match,
                Ok(cel::Value::Bool(false)) => Verdict::NoMatch,
                Ok(_) => Verdict::Error,
                Err(fail) => fail_verdict(fail),
            },
        }
    }

    /// Evaluates with the interpreter even when a native plan exists (the agreement tests).
    pub fn evaluate_interpreted(&self, message: &Prepared<'_>) -> Option<Verdict> {
        let program = interp::env().compile(&self.source).ok()?;
        let interpreted = interp::Interpreted::new(program);
        Some(match interpreted.eval(message) {
            Ok(cel::Value::Bool(true)) => Verdict::Match,
            Ok(cel::Value::Bool(false)) => Verdict::NoMatch,
            Ok(_) => Verdict::Error,
            Err(fail) => fail_verdict(fail),
        })
    }
}

fn verdict(result: Result<Val<'_>, Fail>) -> Verdict {
    match result {
        Ok(Val::Bool(true)) => Verdict::Match,
        Ok(Val::Bool(false)) => Verdict::NoMatch,
        Ok(_) => Verdict::Error,
        Err(fail) => fail_verdict(fail),
    }
}

fn fail_verdict(fail: Fail) -> Verdict {
    match fail {
        Fail::Missing => Verdict::MissingField,
        Fail::NotJson => Verdict::NotJson,
        Fail::Error => Verdict::Error,
    }
}

fn parse_error(errors: cel::ParseErrors) -> CompileError {
    match errors.errors.first() {
        Some(first) => CompileError {
            line: first.pos.0.max(1) as usize,
            column: first.pos.1.max(1) as usize,
            reason: first.msg.clone(),
        },
        None => CompileError { line: 1, column: 1, reason: "does not parse".into() },
    }
}

/// 1-based line and column of character offset `offset`.
fn line_column(source: &str, offset: usize) -> (usize, usize) {
    let (mut line, mut column) = (1, 1);
    for c in source.chars().take(offset) {
        if c == '\n' {
            line += 1;
            column = 1;
        } else {
            column += 1;
        }
    }
    (line, column)
}

/// Server-wide filter counters, shown in `/varz` as `semaq_filters`.
#[derive(Debug, Default)]
pub struct FilterStats {
    evaluations: AtomicU64,
    matches: AtomicU64,
    non_matches: AtomicU64,
    not_json: AtomicU64,
    missing_field: AtomicU64,
    runtime_errors: AtomicU64,
    undecodable: AtomicU64,
    /// Payloads parsed as JSON for filters.
    pub payload_parses: AtomicU64,
    /// Wire-format payloads decoded with their schema for filters.
    pub payload_decodes: AtomicU64,
    /// Stored payloads a consumer found already parsed or decoded.
    pub payload_cache_hits: AtomicU64,
}

/// A snapshot of [`FilterStats`].
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct FilterCounts {
    /// Evaluations in all.
    pub evaluations: u64,
    /// Evaluations that matched.
    pub matches: u64,
    /// Evaluations that did not match, for any reason (the next three included).
    pub non_matches: u64,
    /// Non-matches because the payload is not JSON.
    pub not_json: u64,
    /// Non-matches because a field was missing.
    pub missing_field: u64,
    /// Non-matches because of a run-time error.
    pub runtime_errors: u64,
    /// Non-matches because a wire-format payload of a known schema did not decode.
    pub undecodable: u64,
    /// Payloads parsed as JSON (once per message however many filters read it).
    pub payload_parses: u64,
    /// Wire-format payloads decoded with their schema (Avro, Protobuf).
    pub payload_decodes: u64,
    /// Stored payloads a consumer found already parsed or decoded by another.
    pub payload_cache_hits: u64,
}

impl FilterStats {
    /// Counts one verdict.
    pub fn record(&self, verdict: Verdict) {
        self.evaluations.fetch_add(1, Ordering::Relaxed);
        let specific = match verdict {
            Verdict::Match => {
                self.matches.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Verdict::NoMatch => None,
            Verdict::NotJson => Some(&self.not_json),
            Verdict::MissingField => Some(&self.missing_field),
            Verdict::Error => Some(&self.runtime_errors),
            Verdict::Undecodable => Some(&self.undecodable),
        };
        self.non_matches.fetch_add(1, Ordering::Relaxed);
        if let Some(counter) = specific {
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Current values.
    pub fn snapshot(&self) -> FilterCounts {
        FilterCounts {
            evaluations: self.evaluations.load(Ordering::Relaxed),
            matches: self.matches.load(Ordering::Relaxed),
            non_matches: self.non_matches.load(Ordering::Relaxed),
            not_json: self.not_json.load(Ordering::Relaxed),
            missing_field: self.missing_field.load(Ordering::Relaxed),
            runtime_errors: self.runtime_errors.load(Ordering::Relaxed),
            undecodable: self.undecodable.load(Ordering::Relaxed),
            payload_parses: self.payload_parses.load(Ordering::Relaxed),
            payload_decodes: self.payload_decodes.load(Ordering::Relaxed),
            payload_cache_hits: self.payload_cache_hits.load(Ordering::Relaxed),
        }
    }
}

/// Evaluates `filter` on a stored message for a consumer: a wire-format payload is decoded
/// with the server's registry, and the parse is shared with the other consumers reading the
/// same message (the server's [`PayloadCache`]). The verdict is not counted here.
pub fn evaluate_stored(filters: Option<&Filters>, filter: &Filter, message: &semaq_store::StoredMessage) -> Verdict {
    let context = filters.map_or_else(Context::default, |filters| Context {
        registry: filters.registry.as_deref(),
        cache: Some(&filters.cache),
        stats: Some(&filters.stats),
    });
    let prepared = Prepared::new(&message.subject, message.headers.as_deref(), &message.payload).with_context(context);
    filter.evaluate(&prepared)
}
