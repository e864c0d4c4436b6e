//! Subject rules, exactly as NATS: dot-separated non-empty tokens, no whitespace;
//! `*` matches one token and `>` one or more trailing tokens, each only as a whole token.

/// The token separator.
pub const SEPARATOR: u8 = b'.';
/// Matches exactly one token.
pub const WILDCARD_ONE: &str = "*";
/// Matches one or more trailing tokens.
pub const WILDCARD_TAIL: &str = ">";
/// The prefix of reply subjects (every client library's default inbox): one request each.
pub const REPLY_INBOX_PREFIX: &str = "_INBOX.";

fn is_whitespace(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\r' | b'\n' | b'\x0c')
}

/// Tokens of a subject that has no empty token and no whitespace, or `None`.
fn tokens(subject: &str) -> Option<std::str::Split<'_, char>> {
    if subject.is_empty() || subject.bytes().any(is_whitespace) {
        return None;
    }
    if subject.split('.').any(str::is_empty) {
        return None;
    }
    Some(subject.split('.'))
}

/// A subject a subscription may use: wildcards allowed as whole tokens, `>` only last.
pub fn is_valid_filter(subject: &str) -> bool {
    let Some(mut tokens) = tokens(subject) else {
        return false;
    };
    while let Some(token) = tokens.next() {
        if token == WILDCARD_TAIL {
            return tokens.next().is_none();
        }
    }
    true
}

/// A subject a message may be published to: no wildcard tokens.
pub fn is_valid_literal(subject: &str) -> bool {
    match tokens(subject) {
        Some(mut tokens) => !tokens.any(|token| token == WILDCARD_ONE || token == WILDCARD_TAIL),
        None => false,
    }
}

/// A subject a message can be routed by: no empty token, no whitespace. Unlike
/// [`is_valid_literal`] it lets `*` and `>` tokens through, as nats-server does for clients
/// that are not pedantic; such a token then only matches wildcard subscriptions.
pub fn is_routable(subject: &str) -> bool {
    tokens(subject).is_some()
}

/// True when the subject has a wildcard token.
pub fn has_wildcard(subject: &str) -> bool {
    subject.split('.').any(|token| token == WILDCARD_ONE || token == WILDCARD_TAIL)
}

/// A queue group name: non-empty, no whitespace.
pub fn is_valid_queue(queue: &str) -> bool {
    !queue.is_empty() && !queue.bytes().any(is_whitespace)
}

/// Whether the literal `subject` is matched by `filter` (which may hold wildcards).
pub fn matches(filter: &str, subject: &str) -> bool {
    let mut filter_tokens = filter.split('.');
    let mut subject_tokens = subject.split('.');
    loop {
        match (filter_tokens.next(), subject_tokens.next()) {
            (Some(WILDCARD_TAIL), Some(_)) => return true,
            (Some(WILDCARD_ONE), Some(_)) => {}
            (Some(f), Some(s)) if f == s => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

/// Whether every subject `inner` matches is also matched by `outer` (both may hold wildcards).
pub fn is_subset(inner: &str, outer: &str) -> bool {
    let mut inner_tokens = inner.split('.');
    let mut outer_tokens = outer.split('.');
    loop {
        match (inner_tokens.next(), outer_tokens.next()) {
            (Some(_), Some(WILDCARD_TAIL)) => return true,
            (Some(WILDCARD_TAIL), Some(_)) => return false,
            (Some(WILDCARD_ONE), Some(WILDCARD_ONE)) => {}
            (Some(WILDCARD_ONE), Some(_)) => return false,
            (Some(_), Some(WILDCARD_ONE)) => {}
            (Some(i), Some(o)) if i == o => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

/// Whether some literal subject could be matched by both filters.
pub fn overlaps(a: &str, b: &str) -> bool {
    let mut a_tokens = a.split('.');
    let mut b_tokens = b.split('.');
    loop {
        match (a_tokens.next(), b_tokens.next()) {
            (Some(WILDCARD_TAIL), Some(_)) | (Some(_), Some(WILDCARD_TAIL)) => return true,
            (Some(WILDCARD_ONE), Some(_)) | (Some(_), Some(WILDCARD_ONE)) => {}
            (Some(x), Some(y)) if x == y => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_subjects_have_no_wildcards_or_empty_tokens() {
        for good in ["foo", "foo.bar", "foo*.bar", "a.b>.c", "$JS.API.INFO", "_INBOX.x.y"] {
            assert!(is_valid_literal(good), "{good}");
        }
        for bad in ["", ".", "foo.", ".foo", "foo..bar", "foo.*", ">", "foo bar", "foo\tbar", "a.>.b"] {
            assert!(!is_valid_literal(bad), "{bad:?}");
        }
    }

    #[test]
    fn filters_allow_whole_token_wildcards_and_tail_last() {
        for good in ["foo", "*", ">", "foo.*", "foo.>", "*.*.bar", "foo.*.>", "foo*"] {
            assert!(is_valid_filter(good), "{good}");
        }
        for bad in ["", "foo.>.bar", ">.foo", "foo..*", "foo. bar", "foo."] {
            assert!(!is_valid_filter(bad), "{bad:?}");
        }
    }

    #[test]
    fn matching_follows_nats_wildcards() {
        assert!(matches("foo.*", "foo.bar"));
        assert!(!matches("foo.*", "foo.bar.baz"));
        assert!(!matches("foo.*", "foo"));
        assert!(matches("foo.>", "foo.bar.baz"));
        assert!(!matches("foo.>", "foo"));
        assert!(matches(">", "anything.at.all"));
        assert!(matches("*.bar", "foo.bar"));
        assert!(!matches("foo.bar", "foo.baz"));
    }

    #[test]
    fn subset_and_overlap() {
        assert!(is_subset("foo.bar", "foo.*"));
        assert!(is_subset("foo.*", "foo.>"));
        assert!(!is_subset("foo.>", "foo.*"));
        assert!(!is_subset("foo.*", "foo.bar"));
        assert!(overlaps("foo.*", "*.bar"));
        assert!(overlaps("foo.>", "foo.bar.baz"));
        assert!(!overlaps("foo.*", "bar.*"));
        assert!(!overlaps("foo.*", "foo.bar.baz"));
    }
}
