//! Values the native evaluator works on, borrowed from the parsed payload where possible, and
//! CEL's rules for comparing and combining them (the same rules the `cel` interpreter applies,
//! which the agreement tests check).

use std::borrow::Cow;
use std::cmp::Ordering;

use serde_json::Value as Json;

use super::message::Headers;

/// Why an evaluation produced no value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fail {
    /// A field or key the expression reads is absent.
    Missing,
    /// The expression reads the payload, which is not JSON.
    NotJson,
    /// Any other run-time error (wrong types, division by zero, overflow).
    Error,
}

/// One value during native evaluation.
#[derive(Debug, Clone)]
pub enum Val<'a> {
    /// `null`.
    Null,
    /// `bool`.
    Bool(bool),
    /// `int`.
    Int(i64),
    /// `uint`.
    UInt(u64),
    /// `double`.
    Double(f64),
    /// `string`.
    Str(Cow<'a, str>),
    /// A JSON array or object from the payload, not copied.
    Json(&'a Json),
    /// A list built by the expression.
    List(Vec<Val<'a>>),
    /// The message's headers.
    Headers(&'a Headers),
}

/// A JSON number as CEL sees it: `int` when it fits, then `uint`, else `double`.
pub enum Number {
    /// Fits `i64`.
    Int(i64),
    /// Positive beyond `i64`.
    UInt(u64),
    /// Has a fraction or exponent.
    Double(f64),
}

/// Classifies a JSON number; both evaluators use this, so they agree.
pub fn number(n: &serde_json::Number) -> Number {
    if let Some(i) = n.as_i64() {
        Number::Int(i)
    } else if let Some(u) = n.as_u64() {
        Number::UInt(u)
    } else {
        Number::Double(n.as_f64().unwrap_or(f64::NAN))
    }
}

impl<'a> Val<'a> {
    /// The value of a JSON node; arrays and objects stay borrowed.
    pub fn from_json(json: &'a Json) -> Self {
        match json {
            Json::Null => Val::Null,
            Json::Bool(b) => Val::Bool(*b),
            Json::Number(n) => match number(n) {
                Number::Int(i) => Val::Int(i),
                Number::UInt(u) => Val::UInt(u),
                Number::Double(d) => Val::Double(d),
            },
            Json::String(s) => Val::Str(Cow::Borrowed(s)),
            Json::Array(_) | Json::Object(_) => Val::Json(json),
        }
    }

    /// The boolean, or a run-time error for any other type.
    pub fn as_bool(&self) -> Result<bool, Fail> {
        match self {
            Val::Bool(b) => Ok(*b),
            _ => Err(Fail::Error),
        }
    }

    fn as_f64(&self) -> Option<f64> {
        match self {
            Val::Int(i) => Some(*i as f64),
            Val::UInt(u) => Some(*u as f64),
            Val::Double(d) => Some(*d),
            _ => None,
        }
    }

    /// Elements, when the value is a list.
    fn elements(&self) -> Option<Vec<Val<'a>>> {
        match self {
            Val::Json(Json::Array(items)) => Some(items.iter().map(Val::from_json).collect()),
            Val::List(items) => Some(items.clone()),
            _ => None,
        }
    }

    /// `.field` or `["key"]` on a map.
    pub fn get(&self, key: &str) -> Result<Val<'a>, Fail> {
        match self {
            Val::Json(Json::Object(map)) => map.get(key).map(Val::from_json).ok_or(Fail::Missing),
            Val::Headers(headers) => headers.get(key).map(|v| Val::Str(Cow::Borrowed(v))).ok_or(Fail::Missing),
            _ => Err(Fail::Error),
        }
    }

    /// `has(x.field)`.
    pub fn has(&self, key: &str) -> Result<bool, Fail> {
        match self {
            Val::Json(Json::Object(map)) => Ok(map.contains_key(key)),
            Val::Headers(headers) => Ok(headers.get(key).is_some()),
            _ => Err(Fail::Error),
        }
    }

    /// `x[index]`.
    pub fn index(&self, index: &Val<'_>) -> Result<Val<'a>, Fail> {
        match (self, index) {
            (Val::Json(Json::Object(_)) | Val::Headers(_), Val::Str(key)) => self.get(key),
            (Val::Json(Json::Array(items)), _) => {
                let at = list_index(index, items.len())?;
                Ok(Val::from_json(&items[at]))
            }
            (Val::List(items), _) => {
                let at = list_index(index, items.len())?;
                Ok(items[at].clone())
            }
            _ => Err(Fail::Error),
        }
    }

    /// `size(x)`: characters of a string, entries of a list or map.
    pub fn size(&self) -> Result<i64, Fail> {
        let size = match self {
            Val::Str(s) => s.chars().count(),
            Val::Json(Json::Array(items)) => items.len(),
            Val::Json(Json::Object(map)) => map.len(),
            Val::List(items) => items.len(),
            Val::Headers(headers) => headers.len(),
            _ => return Err(Fail::Error),
        };
        Ok(size as i64)
    }

    /// `needle in self`.
    pub fn contains(&self, needle: &Val<'_>) -> Result<bool, Fail> {
        match self {
            Val::Json(Json::Object(_)) | Val::Headers(_) => match needle {
                Val::Str(key) => self.has(key),
                _ => Ok(false),
            },
            _ => match self.elements() {
                Some(items) => Ok(items.iter().any(|item| equals(item, needle))),
                None => Err(Fail::Error),
            },
        }
    }
}

fn list_index(index: &Val<'_>, len: usize) -> Result<usize, Fail> {
    let at = match index {
        Val::Int(i) => usize::try_from(*i).map_err(|_| Fail::Error)?,
        Val::UInt(u) => usize::try_from(*u).map_err(|_| Fail::Error)?,
        Val::Double(d) if d.fract() == 0.0 && *d >= 0.0 => *d as usize,
        _ => return Err(Fail::Error),
    };
    if at < len {
        Ok(at)
    } else {
        Err(Fail::Error)
    }
}

/// CEL `==`: numbers compare across int, uint and double; other kinds only with their own.
pub fn equals(a: &Val<'_>, b: &Val<'_>) -> bool {
    if let Ok(ordering) = compare_numbers(a, b) {
        return ordering == Ordering::Equal;
    }
    match (a, b) {
        (Val::Null, Val::Null) => true,
        (Val::Bool(x), Val::Bool(y)) => x == y,
        (Val::Str(x), Val::Str(y)) => x == y,
        (Val::Json(Json::Object(x)), Val::Json(Json::Object(y))) => {
            x.len() == y.len()
                && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| equals(&Val::from_json(v), &Val::from_json(w))))
        }
        (Val::Headers(x), Val::Headers(y)) => std::ptr::eq(*x, *y),
        _ => match (a.elements(), b.elements()) {
            (Some(x), Some(y)) => x.len() == y.len() && x.iter().zip(&y).all(|(p, q)| equals(p, q)),
            _ => false,
        },
    }
}

fn compare_numbers(a: &Val<'_>, b: &Val<'_>) -> Result<Ordering, Fail> {
    match (a, b) {
        (Val::Int(x), Val::Int(y)) => Ok(x.cmp(y)),
        (Val::UInt(x), Val::UInt(y)) => Ok(x.cmp(y)),
        (Val::Int(x), Val::UInt(y)) => Ok(u64::try_from(*x).map_or(Ordering::Less, |x| x.cmp(y))),
        (Val::UInt(x), Val::Int(y)) => Ok(u64::try_from(*y).map_or(Ordering::Greater, |y| x.cmp(&y))),
        _ => match (a.as_f64(), b.as_f64()) {
            (Some(x), Some(y)) => x.partial_cmp(&y).ok_or(Fail::Error),
            _ => Err(Fail::Error),
        },
    }
}

/// CEL `<`, `<=`, `>`, `>=`: numbers across types, strings and bools with their own kind.
pub fn compare(a: &Val<'_>, b: &Val<'_>) -> Result<Ordering, Fail> {
    match (a, b) {
        (Val::Str(x), Val::Str(y)) => Ok(x.as_ref().cmp(y.as_ref())),
        (Val::Bool(x), Val::Bool(y)) => Ok(x.cmp(y)),
        _ => compare_numbers(a, b),
    }
}

/// An arithmetic operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arith {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `%`
    Rem,
}

/// CEL arithmetic: operands of one numeric type (no mixing), checked for overflow and zero.
pub fn arith<'a>(op: Arith, a: Val<'a>, b: Val<'a>) -> Result<Val<'a>, Fail> {
    match (a, b) {
        (Val::Int(x), Val::Int(y)) => int_arith(op, x, y).map(Val::Int),
        (Val::UInt(x), Val::UInt(y)) => uint_arith(op, x, y).map(Val::UInt),
        (Val::Double(x), Val::Double(y)) => match op {
            Arith::Add => Ok(Val::Double(x + y)),
            Arith::Sub => Ok(Val::Double(x - y)),
            Arith::Mul => Ok(Val::Double(x * y)),
            Arith::Div => Ok(Val::Double(x / y)),
            Arith::Rem => Err(Fail::Error),
        },
        (Val::Str(x), Val::Str(y)) if op == Arith::Add => Ok(Val::Str(Cow::Owned(format!("{x}{y}")))),
        (a, b) if op == Arith::Add => match (a.elements(), b.elements()) {
            (Some(mut x), Some(y)) => {
                x.extend(y);
                Ok(Val::List(x))
            }
            _ => Err(Fail::Error),
        },
        _ => Err(Fail::Error),
    }
}

fn int_arith(op: Arith, x: i64, y: i64) -> Result<i64, Fail> {
    let result = match op {
        Arith::Add => x.checked_add(y),
        Arith::Sub => x.checked_sub(y),
        Arith::Mul => x.checked_mul(y),
        Arith::Div => x.checked_div(y),
        Arith::Rem => x.checked_rem(y),
    };
    result.ok_or(Fail::Error)
}

fn uint_arith(op: Arith, x: u64, y: u64) -> Result<u64, Fail> {
    let result = match op {
        Arith::Add => x.checked_add(y),
        Arith::Sub => x.checked_sub(y),
        Arith::Mul => x.checked_mul(y),
        Arith::Div => x.checked_div(y),
        Arith::Rem => x.checked_rem(y),
    };
    result.ok_or(Fail::Error)
}

/// CEL unary `-`.
pub fn negate(value: Val<'_>) -> Result<Val<'_>, Fail> {
    match value {
        Val::Int(i) => i.checked_neg().map(Val::Int).ok_or(Fail::Error),
        Val::Double(d) => Ok(Val::Double(-d)),
        _ => Err(Fail::Error),
    }
}
