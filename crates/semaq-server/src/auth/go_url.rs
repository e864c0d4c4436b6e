//! The part of Go's `net/url.Parse` that the jwt library's `Info` check rests on: whether a URL
//! parses, and its scheme and host name. nats-server refuses an account (or an export) whose
//! `info_url` fails it, so SemaQ must draw the line where Go does, not where the WHATWG URL
//! standard does (`http:host` is a URL there, a hostless opaque one here).
//!
//! Pure: no I/O; the texts are Go's, for the log.

/// Why a URL does not parse, in Go's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    /// A byte below space, or DEL.
    #[error("net/url: invalid control character in URL")]
    Control,
    /// A `:` first.
    #[error("missing protocol scheme")]
    MissingScheme,
    /// No scheme, and a `:` before the first `/`.
    #[error("first path segment in URL cannot contain colon")]
    ColonInFirstSegment,
    /// A `[` host without its `]`.
    #[error("missing ']' in host")]
    MissingBracket,
    /// A port that is not all digits.
    #[error("invalid port {0:?} after host")]
    Port(String),
    /// A `%` not followed by two hex digits, or one escaping an ASCII byte in the host.
    #[error("invalid URL escape {0:?}")]
    Escape(String),
    /// A character the host may not hold.
    #[error("invalid character {0:?} in host name")]
    HostCharacter(String),
    /// A character the user information may not hold.
    #[error("net/url: invalid userinfo")]
    Userinfo,
}

/// Which part of the URL a `%` escape is in: Go's host rules are the strictest.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    Host,
    Other,
}

/// The scheme and the host name (port and IPv6 brackets stripped) of `raw` as Go's
/// `url.Parse` and `URL.Hostname` give them; either may be empty.
pub fn scheme_and_host_name(raw: &str) -> Result<(String, String), UrlError> {
    let (before_fragment, fragment) = raw.split_once('#').unwrap_or((raw, ""));
    if before_fragment.bytes().any(|b| b < b' ' || b == 0x7f) {
        return Err(UrlError::Control);
    }
    let (scheme, rest) = scheme(before_fragment)?;
    let rest = match rest.strip_suffix('?').filter(|r| !r.contains('?')) {
        Some(forced_query) => forced_query,
        None => rest.split_once('?').map_or(rest, |(path, _)| path),
    };
    if !rest.starts_with('/') && scheme.is_empty() && rest.split('/').next().is_some_and(|s| s.contains(':')) {
        return Err(UrlError::ColonInFirstSegment);
    }
    let mut host = String::new();
    let mut path = rest;
    if rest.starts_with("//") && (!scheme.is_empty() || !rest.starts_with("///")) {
        let authority = &rest[2..];
        let (authority, after) = authority.find('/').map_or((authority, ""), |i| authority.split_at(i));
        host = parse_authority(authority)?;
        path = after;
    }
    if !rest.starts_with('/') && !scheme.is_empty() {
        // Go keeps a rootless path as it is (opaque), unchecked.
        path = "";
    }
    unescape(path, Part::Other)?;
    unescape(fragment, Part::Other)?;
    Ok((scheme.to_ascii_lowercase(), host_name(&host).to_string()))
}

/// Go's `getScheme`: letters, then letters, digits, `+`, `-` or `.`, up to a `:`.
fn scheme(raw: &str) -> Result<(&str, &str), UrlError> {
    for (i, byte) in raw.bytes().enumerate() {
        match byte {
            b'a'..=b'z' | b'A'..=b'Z' => {}
            b'0'..=b'9' | b'+' | b'-' | b'.' if i > 0 => {}
            b':' if i == 0 => return Err(UrlError::MissingScheme),
            b':' => return Ok((&raw[..i], &raw[i + 1..])),
            _ => return Ok(("", raw)),
        }
    }
    Ok(("", raw))
}

/// The host of `user@host:port` (escapes kept: only whether it is empty matters); checks the
/// user information too.
fn parse_authority(authority: &str) -> Result<String, UrlError> {
    let (userinfo, host) = match authority.rfind('@') {
        Some(at) => (Some(&authority[..at]), &authority[at + 1..]),
        None => (None, authority),
    };
    let host = parse_host(host)?;
    if let Some(userinfo) = userinfo {
        let allowed = |c: char| c.is_ascii_alphanumeric() || "-._:~!$&'()*+,;=%@".contains(c);
        if !userinfo.chars().all(allowed) {
            return Err(UrlError::Userinfo);
        }
        unescape(userinfo, Part::Other)?;
    }
    Ok(host)
}

/// Go's `parseHost`: a bracketed IPv6 literal or a name, each with an optional `:digits` port.
fn parse_host(host: &str) -> Result<String, UrlError> {
    let port_from = if host.starts_with('[') {
        host.rfind(']').map(|i| i + 1).ok_or(UrlError::MissingBracket)?
    } else {
        host.rfind(':').unwrap_or(host.len())
    };
    if !is_optional_port(&host[port_from..]) {
        return Err(UrlError::Port(host[port_from..].to_string()));
    }
    // An IPv6 zone (`%25en0`) is looser in Go; only its escapes are checked here.
    let zone = host.starts_with('[').then(|| host.find("%25")).flatten();
    match zone {
        Some(zone) => {
            unescape(&host[..zone], Part::Host)?;
            unescape(&host[zone..], Part::Other)?;
        }
        None => unescape(host, Part::Host)?,
    }
    Ok(host.to_string())
}

/// Empty, or `:` and digits.
fn is_optional_port(port: &str) -> bool {
    port.is_empty() || port.strip_prefix(':').is_some_and(|digits| digits.bytes().all(|b| b.is_ascii_digit()))
}

/// Go's `unescape` checks: each `%` starts two hex digits; in a host it may only escape a byte of
/// 0x80 or more (or be `%25`), and unescaped ASCII must be a host character.
fn unescape(text: &str, part: Part) -> Result<(), UrlError> {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let escape = String::from_utf8_lossy(&bytes[i..(i + 3).min(bytes.len())]).into_owned();
            let hex = |at: usize| bytes.get(at).is_some_and(u8::is_ascii_hexdigit);
            if !hex(i + 1) || !hex(i + 2) {
                return Err(UrlError::Escape(escape));
            }
            if part == Part::Host && bytes[i + 1] < b'8' && escape != "%25" {
                return Err(UrlError::Escape(escape));
            }
            i += 3;
            continue;
        }
        if part == Part::Host && bytes[i] < 0x80 && !is_host_byte(bytes[i]) {
            return Err(UrlError::HostCharacter(char::from(bytes[i]).to_string()));
        }
        i += 1;
    }
    Ok(())
}

/// The ASCII bytes Go's `shouldEscape` lets a host hold unescaped.
fn is_host_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"-_.~!$&'()*+,;=:[]<>\"".contains(&byte)
}

/// Go's `URL.Hostname`: the host without its `:port` and without IPv6 brackets.
fn host_name(host: &str) -> &str {
    let host = match host.rfind(':') {
        Some(colon) if is_optional_port(&host[colon..]) => &host[..colon],
        _ => host,
    };
    host.strip_prefix('[').and_then(|inner| inner.strip_suffix(']')).unwrap_or(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(raw: &str) -> (String, String) {
        scheme_and_host_name(raw).unwrap_or_else(|error| panic!("{raw:?}: {error}"))
    }

    #[test]
    fn scheme_and_host_name_are_go_urls() {
        assert_eq!(parts("https://example.com/docs?x=1#top"), ("https".into(), "example.com".into()));
        assert_eq!(parts("HTTP://user:pw@host:8080/"), ("http".into(), "host".into()));
        assert_eq!(parts("http://[::1]:80/x"), ("http".into(), "::1".into()));
        assert_eq!(parts("http:host"), ("http".into(), String::new()));
        assert_eq!(parts("http:///path"), ("http".into(), String::new()));
        assert_eq!(parts("//host/path"), (String::new(), "host".into()));
        assert_eq!(parts("example.com"), (String::new(), String::new()));
        assert_eq!(parts("http://h/?%zz"), ("http".into(), "h".into()));
        assert_eq!(parts("http://caf%C3%A9.fr"), ("http".into(), "caf%C3%A9.fr".into()));
    }

    #[test]
    fn what_go_refuses_to_parse() {
        let error = |raw: &str| scheme_and_host_name(raw).expect_err(raw);
        assert_eq!(error(":foo"), UrlError::MissingScheme);
        assert_eq!(error("a b:c"), UrlError::ColonInFirstSegment);
        assert_eq!(error("http://h\n"), UrlError::Control);
        assert_eq!(error("http://[::1"), UrlError::MissingBracket);
        assert_eq!(error("http://host:80x"), UrlError::Port(":80x".into()));
        assert_eq!(error("http://a b"), UrlError::HostCharacter(" ".into()));
        assert_eq!(error("http://h/%zz"), UrlError::Escape("%zz".into()));
        assert_eq!(error("http://h#%4"), UrlError::Escape("%4".into()));
        assert_eq!(error("http://%41"), UrlError::Escape("%41".into()));
        assert_eq!(error("http://a{b@h"), UrlError::Userinfo);
        assert_eq!(error("http://h/%\u{20ac}"), UrlError::Escape("%\u{fffd}".into()));
    }
}
