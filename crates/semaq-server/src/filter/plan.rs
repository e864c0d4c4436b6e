//! Compiles the `cel` crate's AST into a native plan, checking types where they are known at
//! compile time (literals, `subject`, `headers`), so a filter that can never return a bool, or
//! that calls an unknown function, is refused at creation with its position.
//!
//! Payload fields are dynamic: their types are only known per message. A construct outside the
//! native subset (comprehensions, maps, conversions, `matches`, ...) marks the plan as needing
//! the interpreter; type checks still run over the rest of the expression.

use cel::common::ast::{operators, CallExpr, Expr, IdedExpr, LiteralValue};

use super::value::Arith;
use crate::limits;

/// A node of the native plan.
#[derive(Debug, Clone)]
pub enum Node {
    /// A literal.
    Const(Const),
    /// `subject`.
    Subject,
    /// `headers`.
    Headers,
    /// `payload`.
    Payload,
    /// A top-level payload field by name.
    Field(Box<str>),
    /// `operand.field`.
    Select(Box<Node>, Box<str>),
    /// `has(operand.field)`.
    Has(Box<Node>, Box<str>),
    /// `operand[index]`.
    Index(Box<Node>, Box<Node>),
    /// `!x`.
    Not(Box<Node>),
    /// `-x`.
    Neg(Box<Node>),
    /// `a && b`.
    And(Box<Node>, Box<Node>),
    /// `a || b`.
    Or(Box<Node>, Box<Node>),
    /// `c ? a : b`.
    Cond(Box<[Node; 3]>),
    /// `==`, `!=`, `<`, `<=`, `>`, `>=`.
    Cmp(Cmp, Box<Node>, Box<Node>),
    /// `+`, `-`, `*`, `/`, `%`.
    Arith(Arith, Box<Node>, Box<Node>),
    /// `a in b`.
    In(Box<Node>, Box<Node>),
    /// `[a, b, ...]`.
    List(Vec<Node>),
    /// `size(x)` or `x.size()`.
    Size(Box<Node>),
    /// `s.startsWith(t)`, `s.endsWith(t)`, `s.contains(t)`.
    Str(StrFn, Box<Node>, Box<Node>),
    /// `s.matches("literal")`: the regex compiled once, not per message as the interpreter does.
    Matches(Box<Node>, Box<regex::Regex>),
    /// Outside the native subset: the whole filter runs in the interpreter.
    Interpreted,
}

/// A literal value.
#[derive(Debug, Clone)]
pub enum Const {
    /// `null`
    Null,
    /// `true`, `false`
    Bool(bool),
    /// `1`
    Int(i64),
    /// `1u`
    UInt(u64),
    /// `1.0`
    Double(f64),
    /// `"text"`
    Str(Box<str>),
}

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

/// A string function compiled natively.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StrFn {
    /// `startsWith`
    StartsWith,
    /// `endsWith`
    EndsWith,
    /// `contains`
    Contains,
}

/// What a node is known to produce at compile time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ty {
    /// `bool`
    Bool,
    /// `int`
    Int,
    /// `uint`
    UInt,
    /// `double`
    Double,
    /// `string`
    Str,
    /// `null`
    Null,
    /// a list
    List,
    /// a map
    Map,
    /// only known per message
    Dyn,
}

impl Ty {
    fn name(self) -> &'static str {
        match self {
            Ty::Bool => "bool",
            Ty::Int => "int",
            Ty::UInt => "uint",
            Ty::Double => "double",
            Ty::Str => "string",
            Ty::Null => "null_type",
            Ty::List => "list",
            Ty::Map => "map",
            Ty::Dyn => "dyn",
        }
    }

    fn is_number(self) -> bool {
        matches!(self, Ty::Int | Ty::UInt | Ty::Double)
    }

    fn known(self) -> bool {
        self != Ty::Dyn
    }
}

/// A compile-time problem at one AST node.
#[derive(Debug, Clone)]
pub struct Problem {
    /// The node it concerns.
    pub id: u64,
    /// What is wrong.
    pub reason: String,
}

/// Functions the interpreter knows (standard library and macros), beyond the native subset.
const INTERPRETED_FUNCTIONS: &[&str] = &[
    "matches",
    "int",
    "uint",
    "double",
    "string",
    "bytes",
    "bool",
    "dyn",
    "type",
    "max",
    "min",
    operators::NOT_STRICTLY_FALSE,
    operators::OPT_SELECT,
    operators::OPT_INDEX,
];

/// A compiled plan: the root node, its static type and whether it is fully native.
pub struct Compiled {
    /// The root.
    pub root: Node,
    /// No node needs the interpreter.
    pub native: bool,
    /// The plan reads the payload (a field or `payload`).
    pub reads_payload: bool,
}

/// Compiles an AST, refusing what can never work.
pub fn compile(expr: &IdedExpr) -> Result<Compiled, Problem> {
    let mut compiler = Compiler { native: true, reads_payload: false, comprehension_depth: 0 };
    let (root, ty) = compiler.node(expr)?;
    if ty.known() && ty != Ty::Bool {
        return Err(Problem { id: expr.id, reason: format!("a filter must be a bool, this is a {}", ty.name()) });
    }
    Ok(Compiled { root, native: compiler.native, reads_payload: compiler.reads_payload })
}

struct Compiler {
    native: bool,
    reads_payload: bool,
    comprehension_depth: usize,
}

type Typed = (Node, Ty);

fn problem(id: u64, reason: impl Into<String>) -> Problem {
    Problem { id, reason: reason.into() }
}

impl Compiler {
    fn node(&mut self, expr: &IdedExpr) -> Result<Typed, Problem> {
        match &expr.expr {
            Expr::Literal(literal) => Ok(self.literal(literal)),
            Expr::Ident(name) => Ok(self.ident(name)),
            Expr::Select(select) => {
                let (operand, ty) = self.node(&select.operand)?;
                if ty.known() && ty != Ty::Map {
                    return Err(problem(expr.id, format!("a {} has no field '{}'", ty.name(), select.field)));
                }
                let field: Box<str> = select.field.as_str().into();
                if select.test {
                    return Ok((Node::Has(Box::new(operand), field), Ty::Bool));
                }
                let result = if matches!(operand, Node::Headers) { Ty::Str } else { Ty::Dyn };
                Ok((Node::Select(Box::new(operand), field), result))
            }
            Expr::Call(call) => self.call(expr.id, call),
            Expr::List(list) => {
                let mut elements = Vec::with_capacity(list.elements.len());
                for element in &list.elements {
                    elements.push(self.node(element)?.0);
                }
                if !list.optional_indices.is_empty() {
                    return Ok(self.interpreted(Ty::List));
                }
                Ok((Node::List(elements), Ty::List))
            }
            Expr::Comprehension(comprehension) => {
                if self.comprehension_depth >= 1 {
                    return Err(problem(expr.id, "nested comprehensions are not allowed in filters (bounded work)"));
                }
                self.comprehension_depth += 1;
                let parts = [&comprehension.iter_range, &comprehension.accu_init, &comprehension.loop_step];
                for part in parts {
                    self.node_loose(part)?;
                }
                self.comprehension_depth -= 1;
                Ok(self.interpreted(Ty::Dyn))
            }
            Expr::Map(_) => Ok(self.interpreted(Ty::Map)),
            Expr::Struct(_) | Expr::Unspecified => Ok(self.interpreted(Ty::Dyn)),
        }
    }

    /// Compiles for checks only, where names may be comprehension variables.
    fn node_loose(&mut self, expr: &IdedExpr) -> Result<(), Problem> {
        let reads_payload = self.reads_payload;
        self.node(expr)?;
        // Comprehension variables look like fields; the interpreter decides what they are.
        self.reads_payload = reads_payload || self.reads_payload;
        Ok(())
    }

    fn interpreted(&mut self, ty: Ty) -> Typed {
        self.native = false;
        self.reads_payload = true;
        (Node::Interpreted, ty)
    }

    fn literal(&mut self, literal: &LiteralValue) -> Typed {
        match literal {
            LiteralValue::Boolean(b) => (Node::Const(Const::Bool(*b.inner())), Ty::Bool),
            LiteralValue::Int(i) => (Node::Const(Const::Int(*i.inner())), Ty::Int),
            LiteralValue::UInt(u) => (Node::Const(Const::UInt(*u.inner())), Ty::UInt),
            LiteralValue::Double(d) => (Node::Const(Const::Double(*d.inner())), Ty::Double),
            LiteralValue::String(s) => (Node::Const(Const::Str(s.inner().into())), Ty::Str),
            LiteralValue::Null => (Node::Const(Const::Null), Ty::Null),
            LiteralValue::Bytes(_) => self.interpreted(Ty::Dyn),
        }
    }

    fn ident(&mut self, name: &str) -> Typed {
        match name {
            "subject" => (Node::Subject, Ty::Str),
            "headers" => (Node::Headers, Ty::Map),
            "payload" => {
                self.reads_payload = true;
                (Node::Payload, Ty::Dyn)
            }
            _ => {
                self.reads_payload = true;
                (Node::Field(name.into()), Ty::Dyn)
            }
        }
    }

    fn call(&mut self, id: u64, call: &CallExpr) -> Result<Typed, Problem> {
        let name = call.func_name.as_str();
        let target = match &call.target {
            Some(target) => Some(self.node(target)?),
            None => None,
        };
        let mut args = Vec::with_capacity(call.args.len());
        for arg in &call.args {
            args.push(self.node(arg)?);
        }
        if let Some(node) = self.operator(id, name, target.is_some(), &mut args)? {
            return Ok(node);
        }
        self.function(id, name, target, args)
    }

    fn operator(&mut self, id: u64, name: &str, member: bool, args: &mut Vec<Typed>) -> Result<Option<Typed>, Problem> {
        if member {
            return Ok(None);
        }
        let typed = match (name, args.len()) {
            (operators::LOGICAL_AND | operators::LOGICAL_OR, 2) => {
                let (b, bt) = take(args);
                let (a, at) = take(args);
                check_bool(id, name, at)?;
                check_bool(id, name, bt)?;
                let node = if name == operators::LOGICAL_AND { Node::And } else { Node::Or };
                (node(Box::new(a), Box::new(b)), Ty::Bool)
            }
            (operators::LOGICAL_NOT, 1) => {
                let (a, at) = take(args);
                check_bool(id, name, at)?;
                (Node::Not(Box::new(a)), Ty::Bool)
            }
            (operators::NEGATE, 1) => {
                let (a, at) = take(args);
                if at.known() && !matches!(at, Ty::Int | Ty::Double) {
                    return Err(no_overload(id, "-", &[at]));
                }
                (Node::Neg(Box::new(a)), at)
            }
            (operators::CONDITIONAL, 3) => {
                let (c, ct) = args.remove(0);
                let (a, at) = args.remove(0);
                let (b, bt) = args.remove(0);
                check_bool(id, name, ct)?;
                (Node::Cond(Box::new([c, a, b])), if at == bt { at } else { Ty::Dyn })
            }
            (operators::IN, 2) => {
                let (b, bt) = take(args);
                let (a, _) = take(args);
                if bt.known() && !matches!(bt, Ty::List | Ty::Map) {
                    return Err(no_overload(id, "in", &[bt]));
                }
                (Node::In(Box::new(a), Box::new(b)), Ty::Bool)
            }
            (operators::INDEX, 2) => {
                let (b, _) = take(args);
                let (a, at) = take(args);
                if at.known() && !matches!(at, Ty::List | Ty::Map) {
                    return Err(problem(id, format!("a {} cannot be indexed", at.name())));
                }
                let ty = if matches!(a, Node::Headers) { Ty::Str } else { Ty::Dyn };
                (Node::Index(Box::new(a), Box::new(b)), ty)
            }
            _ => match (comparison(name), arithmetic(name)) {
                (Some(cmp), _) if args.len() == 2 => self.comparison(id, cmp, args)?,
                (_, Some(op)) if args.len() == 2 => self.arithmetic(id, op, args)?,
                _ => return Ok(None),
            },
        };
        Ok(Some(typed))
    }

    fn comparison(&mut self, id: u64, cmp: Cmp, args: &mut Vec<Typed>) -> Result<Typed, Problem> {
        let (b, bt) = take(args);
        let (a, at) = take(args);
        let ordered = !matches!(cmp, Cmp::Eq | Cmp::Ne);
        let comparable = !at.known()
            || !bt.known()
            || (at.is_number() && bt.is_number())
            || (at == bt && matches!(at, Ty::Str | Ty::Bool));
        if ordered && !comparable {
            return Err(no_overload(id, cmp_symbol(cmp), &[at, bt]));
        }
        Ok((Node::Cmp(cmp, Box::new(a), Box::new(b)), Ty::Bool))
    }

    fn arithmetic(&mut self, id: u64, op: Arith, args: &mut Vec<Typed>) -> Result<Typed, Problem> {
        let (b, bt) = take(args);
        let (a, at) = take(args);
        let ty = match (at, bt) {
            (Ty::Dyn, _) | (_, Ty::Dyn) => Ty::Dyn,
            (x, y) if x == y && x.is_number() && !(x == Ty::Double && op == Arith::Rem) => x,
            (Ty::Str, Ty::Str) | (Ty::List, Ty::List) if op == Arith::Add => at,
            _ => return Err(no_overload(id, arith_symbol(op), &[at, bt])),
        };
        Ok((Node::Arith(op, Box::new(a), Box::new(b)), ty))
    }

    fn function(&mut self, id: u64, name: &str, target: Option<Typed>, mut args: Vec<Typed>) -> Result<Typed, Problem> {
        let (target, args_len) = match target {
            // `x.size()` is `size(x)`.
            Some(target) if name == "size" && args.is_empty() => {
                args.push(target);
                (None, 1)
            }
            target => (target, args.len()),
        };
        match (name, target, args_len) {
            ("size", None, 1) => {
                let Some((x, xt)) = args.pop() else {
                    return Err(problem(id, "size() needs an argument"));
                };
                if xt.known() && !matches!(xt, Ty::Str | Ty::List | Ty::Map) {
                    return Err(no_overload(id, "size", &[xt]));
                }
                Ok((Node::Size(Box::new(x)), Ty::Int))
            }
            ("startsWith" | "endsWith" | "contains", Some((s, st)), 1) => {
                let (t, tt) = take(&mut args);
                for ty in [st, tt] {
                    if ty.known() && ty != Ty::Str {
                        return Err(no_overload(id, name, &[st, tt]));
                    }
                }
                let function = match name {
                    "startsWith" => StrFn::StartsWith,
                    "endsWith" => StrFn::EndsWith,
                    _ => StrFn::Contains,
                };
                Ok((Node::Str(function, Box::new(s), Box::new(t)), Ty::Bool))
            }
            ("matches", target @ Some(_), 1) | ("matches", target @ None, 2) => self.matches(id, target, args),
            (known, _, _) if INTERPRETED_FUNCTIONS.contains(&known) => {
                let ty = if known == "matches" { Ty::Bool } else { Ty::Dyn };
                Ok(self.interpreted(ty))
            }
            _ => Err(problem(id, format!("unknown function '{name}' (or wrong number of arguments)"))),
        }
    }

    /// `s.matches(re)` or `matches(s, re)`: native when `re` is a literal, which is compiled
    /// here, so a bad pattern is refused at creation; the interpreter for a computed pattern.
    fn matches(&mut self, id: u64, target: Option<Typed>, mut args: Vec<Typed>) -> Result<Typed, Problem> {
        let (pattern, pattern_ty) = take(&mut args);
        let (text, text_ty) = match target {
            Some(target) => target,
            None => take(&mut args),
        };
        if [text_ty, pattern_ty].iter().any(|ty| ty.known() && *ty != Ty::Str) {
            return Err(no_overload(id, "matches", &[text_ty, pattern_ty]));
        }
        let Node::Const(Const::Str(source)) = &pattern else { return Ok(self.interpreted(Ty::Bool)) };
        let regex = regex::RegexBuilder::new(source)
            .size_limit(limits::FILTER_REGEX_COMPILED_BYTES_MAX)
            .build()
            .map_err(|error| {
                let reason = error.to_string().lines().last().unwrap_or_default().trim().to_string();
                problem(id, format!("'{source}' is not a valid regex: {reason}"))
            })?;
        Ok((Node::Matches(Box::new(text), Box::new(regex)), Ty::Bool))
    }
}

fn take(args: &mut Vec<Typed>) -> Typed {
    args.pop().unwrap_or((Node::Interpreted, Ty::Dyn))
}

fn check_bool(id: u64, operator: &str, ty: Ty) -> Result<(), Problem> {
    if ty.known() && ty != Ty::Bool {
        let symbol = operator.trim_matches('_').replace('_', "");
        return Err(problem(id, format!("'{symbol}' needs bool operands, found {}", ty.name())));
    }
    Ok(())
}

fn no_overload(id: u64, operator: &str, types: &[Ty]) -> Problem {
    let names: Vec<&str> = types.iter().map(|ty| ty.name()).collect();
    problem(id, format!("no matching overload for '{operator}' applied to ({})", names.join(", ")))
}

fn comparison(name: &str) -> Option<Cmp> {
    Some(match name {
        operators::EQUALS => Cmp::Eq,
        operators::NOT_EQUALS => Cmp::Ne,
        operators::LESS => Cmp::Lt,
        operators::LESS_EQUALS => Cmp::Le,
        operators::GREATER => Cmp::Gt,
        operators::GREATER_EQUALS => Cmp::Ge,
        _ => return None,
    })
}

fn arithmetic(name: &str) -> Option<Arith> {
    Some(match name {
        operators::ADD => Arith::Add,
        operators::SUBSTRACT => Arith::Sub,
        operators::MULTIPLY => Arith::Mul,
        operators::DIVIDE => Arith::Div,
        operators::MODULO => Arith::Rem,
        _ => return None,
    })
}

fn cmp_symbol(cmp: Cmp) -> &'static str {
    match cmp {
        Cmp::Eq => "==",
        Cmp::Ne => "!=",
        Cmp::Lt => "<",
        Cmp::Le => "<=",
        Cmp::Gt => ">",
        Cmp::Ge => ">=",
    }
}

fn arith_symbol(op: Arith) -> &'static str {
    match op {
        Arith::Add => "+",
        Arith::Sub => "-",
        Arith::Mul => "*",
        Arith::Div => "/",
        Arith::Rem => "%",
    }
}
