//! The subject an imported message takes on the other side: the same one, or another whose
//! wildcards take the tokens the first one's matched, in order (nats-server's strict transform
//! of `from` into `to`, every wildcard used).

use std::borrow::Cow;

use semaq_wire::subject;

/// Maps subjects matching `from` onto `to`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    from: String,
    to: String,
    /// Whether subjects pass unchanged (`from` and `to` are the same).
    identity: bool,
}

impl Mapping {
    /// A mapping from `from` onto `to`: literal onto literal, or both with the same `*`
    /// wildcards (in number) and both or neither ending in `>`.
    pub fn new(from: &str, to: &str) -> Result<Self, String> {
        let identity = from == to;
        let stars = |s: &str| s.split('.').filter(|token| *token == "*").count();
        let tail = |s: &str| s == ">" || s.ends_with(".>");
        if !identity && (stars(from) != stars(to) || tail(from) != tail(to)) {
            return Err(format!(
                "failed to create mapping transform for subject from {from:?} to {to:?}: wildcards do not match"
            ));
        }
        Ok(Self { from: from.to_string(), to: to.to_string(), identity })
    }

    /// The subject (filter) mapped from.
    pub fn from(&self) -> &str {
        &self.from
    }

    /// The subject (filter) mapped onto.
    pub fn to(&self) -> &str {
        &self.to
    }

    /// The subject `subject`, which matches [`Mapping::from`], becomes.
    pub fn apply<'s>(&self, subject: &'s str) -> Cow<'s, str> {
        if self.identity {
            return Cow::Borrowed(subject);
        }
        if !subject::has_wildcard(&self.from) {
            return Cow::Owned(self.to.clone());
        }
        let mut captured: Vec<&str> = Vec::new();
        let mut rest: &str = "";
        let mut tokens = subject.split('.');
        let mut consumed = 0;
        for pattern in self.from.split('.') {
            if pattern == ">" {
                rest = subject.get(consumed..).unwrap_or("");
                break;
            }
            let Some(token) = tokens.next() else { break };
            consumed += token.len() + 1;
            if pattern == "*" {
                captured.push(token);
            }
        }
        let mut captured = captured.into_iter();
        let mapped: Vec<&str> = self
            .to
            .split('.')
            .map(|pattern| match pattern {
                "*" => captured.next().unwrap_or(pattern),
                ">" => rest,
                literal => literal,
            })
            .collect();
        Cow::Owned(mapped.join("."))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_take_the_tokens_their_counterparts_matched_in_order() {
        let prefix = Mapping::new("orders.>", "a.orders.>").unwrap();
        assert_eq!(prefix.apply("orders.new.eu"), "a.orders.new.eu");
        let swap = Mapping::new("req.*.*", "svc.*.x.*").unwrap();
        assert_eq!(swap.apply("req.1.2"), "svc.1.x.2");
        let literal = Mapping::new("time", "clock.now").unwrap();
        assert_eq!(literal.apply("time"), "clock.now");
        assert_eq!(Mapping::new("a.>", "a.>").unwrap().apply("a.b"), "a.b");
    }

    #[test]
    fn every_wildcard_must_be_used() {
        assert!(Mapping::new("req.*", "svc").is_err());
        assert!(Mapping::new("req.>", "svc.*").is_err());
        assert!(Mapping::new("req", "svc.*").is_err());
    }
}
