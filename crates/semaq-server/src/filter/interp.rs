//! The fallback: the `cel` crate's interpreter, for expressions outside the native subset.
//! It binds the same names as the native plan, converted the same way.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use cel::objects::Key;
use cel::{Context, Env, ExecutionError, Program, Value};
use serde_json::Value as Json;

use super::message::Prepared;
use super::value::{number, Fail, Number};

/// The standard environment, built once.
pub fn env() -> Arc<Env> {
    static ENV: OnceLock<Arc<Env>> = OnceLock::new();
    ENV.get_or_init(|| Arc::new(Env::stdlib())).clone()
}

/// A program and the names it reads.
#[derive(Debug)]
pub struct Interpreted {
    program: Program,
    fields: Vec<String>,
    subject: bool,
    headers: bool,
    payload: bool,
}

impl Interpreted {
    /// Wraps a compiled program.
    pub fn new(program: Program) -> Self {
        let references = program.references();
        let variables = references.variables();
        let reserved = ["subject", "headers", "payload"];
        let fields = variables.iter().filter(|v| !reserved.contains(v)).map(|v| v.to_string()).collect();
        let (subject, headers, payload) = (
            references.has_variable("subject"),
            references.has_variable("headers"),
            references.has_variable("payload"),
        );
        Self { program, fields, subject, headers, payload }
    }

    /// Whether evaluation reads the payload.
    pub fn reads_payload(&self) -> bool {
        self.payload || !self.fields.is_empty()
    }

    /// Evaluates the program for one message.
    pub fn eval(&self, message: &Prepared<'_>) -> Result<Value, Fail> {
        let mut context = Context::with_env(env());
        if self.subject {
            context.add_variable_from_value("subject", message.subject.to_string());
        }
        if self.headers {
            let map: HashMap<String, String> =
                message.headers().iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            context.add_variable_from_value("headers", map);
        }
        let payload = if self.reads_payload() { message.payload().ok() } else { None };
        if let Some(json) = payload {
            self.bind_payload(&mut context, json);
        }
        self.program.execute(&context).map_err(|error| classify(&error, self.reads_payload() && payload.is_none()))
    }

    fn bind_payload(&self, context: &mut Context<'_, '_>, json: &Json) {
        if self.payload {
            context.add_variable_from_value("payload", to_cel(json));
        }
        if let Json::Object(map) = json {
            for name in &self.fields {
                if let Some(value) = map.get(name) {
                    context.add_variable_from_value(name.as_str(), to_cel(value));
                }
            }
        }
    }
}

fn classify(error: &ExecutionError, payload_missing: bool) -> Fail {
    match error {
        ExecutionError::UndeclaredReference(_) | ExecutionError::NoSuchKey(_) if payload_missing => Fail::NotJson,
        ExecutionError::UndeclaredReference(_) | ExecutionError::NoSuchKey(_) => Fail::Missing,
        _ => Fail::Error,
    }
}

/// A JSON value as a CEL value, numbers classified as the native evaluator does.
pub fn to_cel(json: &Json) -> Value {
    match json {
        Json::Null => Value::Null,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => match number(n) {
            Number::Int(i) => Value::Int(i),
            Number::UInt(u) => Value::UInt(u),
            Number::Double(d) => Value::Float(d),
        },
        Json::String(s) => Value::String(Arc::new(s.clone())),
        Json::Array(items) => Value::List(Arc::new(items.iter().map(to_cel).collect())),
        Json::Object(map) => {
            let entries: HashMap<Key, Value> = map.iter().map(|(k, v)| (Key::from(k.clone()), to_cel(v))).collect();
            Value::from(entries)
        }
    }
}
