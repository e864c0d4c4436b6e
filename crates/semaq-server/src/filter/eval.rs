//! Evaluates a native plan against one prepared message. The logical operators follow the
//! `cel` interpreter exactly (an error on one side of `&&`/`||` is absorbed when the other side
//! decides), so both evaluators give the same verdict.

use std::borrow::Cow;
use std::cmp::Ordering;

use super::message::{PayloadIssue, Prepared};
use super::plan::{Cmp, Const, Node, StrFn};
use super::value::{arith, compare, equals, negate, Fail, Val};

/// Evaluates `node` for `message`.
pub fn eval<'a>(node: &'a Node, message: &'a Prepared<'a>) -> Result<Val<'a>, Fail> {
    match node {
        Node::Const(constant) => Ok(constant_value(constant)),
        Node::Subject => Ok(Val::Str(Cow::Borrowed(message.subject))),
        Node::Headers => Ok(Val::Headers(message.headers())),
        Node::Payload => payload(message).map(Val::from_json),
        Node::Field(name) => field(message, name),
        Node::Select(operand, field) => eval(operand, message)?.get(field),
        Node::Has(operand, field) => eval(operand, message)?.has(field).map(Val::Bool),
        Node::Index(operand, index) => {
            let operand = eval(operand, message)?;
            operand.index(&eval(index, message)?)
        }
        Node::Not(operand) => eval(operand, message)?.as_bool().map(|b| Val::Bool(!b)),
        Node::Neg(operand) => negate(eval(operand, message)?),
        Node::And(a, b) => logical(a, b, message, false),
        Node::Or(a, b) => logical(a, b, message, true),
        Node::Cond(parts) => {
            let [condition, then, otherwise] = &**parts;
            if eval(condition, message)?.as_bool()? {
                eval(then, message)
            } else {
                eval(otherwise, message)
            }
        }
        Node::Cmp(cmp, a, b) => {
            let a = eval(a, message)?;
            let b = eval(b, message)?;
            comparison(*cmp, &a, &b).map(Val::Bool)
        }
        Node::Arith(op, a, b) => {
            let a = eval(a, message)?;
            arith(*op, a, eval(b, message)?)
        }
        Node::In(needle, haystack) => {
            let needle = eval(needle, message)?;
            eval(haystack, message)?.contains(&needle).map(Val::Bool)
        }
        Node::List(items) => items.iter().map(|item| eval(item, message)).collect::<Result<_, _>>().map(Val::List),
        Node::Size(operand) => eval(operand, message)?.size().map(Val::Int),
        Node::Str(function, target, argument) => {
            let target = eval(target, message)?;
            let argument = eval(argument, message)?;
            string_function(*function, &target, &argument).map(Val::Bool)
        }
        Node::Matches(target, regex) => match eval(target, message)? {
            Val::Str(text) => Ok(Val::Bool(regex.is_match(&text))),
            _ => Err(Fail::Error),
        },
        Node::Interpreted => Err(Fail::Error),
    }
}

fn constant_value(constant: &Const) -> Val<'_> {
    match constant {
        Const::Null => Val::Null,
        Const::Bool(b) => Val::Bool(*b),
        Const::Int(i) => Val::Int(*i),
        Const::UInt(u) => Val::UInt(*u),
        Const::Double(d) => Val::Double(*d),
        Const::Str(s) => Val::Str(Cow::Borrowed(s)),
    }
}

fn payload<'a>(message: &'a Prepared<'a>) -> Result<&'a serde_json::Value, Fail> {
    // The verdict tells an undecodable payload apart afterwards (`Filter::evaluate`).
    message.payload().map_err(|issue| match issue {
        PayloadIssue::NotJson | PayloadIssue::TooLarge | PayloadIssue::Undecodable => Fail::NotJson,
    })
}

fn field<'a>(message: &'a Prepared<'a>, name: &str) -> Result<Val<'a>, Fail> {
    match payload(message)? {
        serde_json::Value::Object(map) => map.get(name).map(Val::from_json).ok_or(Fail::Missing),
        _ => Err(Fail::Missing),
    }
}

/// `&&` (`short` false) and `||` (`short` true), as the interpreter evaluates them: the left
/// side decides alone when it equals `short`; otherwise the right side's error propagates, and
/// a left error is absorbed only by a right side equal to `short`.
fn logical<'a>(a: &'a Node, b: &'a Node, message: &'a Prepared<'a>, short: bool) -> Result<Val<'a>, Fail> {
    let left = eval(a, message).and_then(|value| value.as_bool());
    if left == Ok(short) {
        return Ok(Val::Bool(short));
    }
    let right = eval(b, message)?;
    match (left, right) {
        (Ok(_), Val::Bool(right)) => Ok(Val::Bool(right)),
        (Err(_), Val::Bool(right)) if right == short => Ok(Val::Bool(short)),
        (Err(fail), _) => Err(fail),
        (Ok(_), _) => Err(Fail::Error),
    }
}

fn comparison(cmp: Cmp, a: &Val<'_>, b: &Val<'_>) -> Result<bool, Fail> {
    Ok(match cmp {
        Cmp::Eq => equals(a, b),
        Cmp::Ne => !equals(a, b),
        Cmp::Lt => compare(a, b)? == Ordering::Less,
        Cmp::Le => compare(a, b)? != Ordering::Greater,
        Cmp::Gt => compare(a, b)? == Ordering::Greater,
        Cmp::Ge => compare(a, b)? != Ordering::Less,
    })
}

fn string_function(function: StrFn, target: &Val<'_>, argument: &Val<'_>) -> Result<bool, Fail> {
    let (Val::Str(target), Val::Str(argument)) = (target, argument) else { return Err(Fail::Error) };
    Ok(match function {
        StrFn::StartsWith => target.starts_with(argument.as_ref()),
        StrFn::EndsWith => target.ends_with(argument.as_ref()),
        StrFn::Contains => target.contains(argument.as_ref()),
    })
}
