//! Subject transforms as nats-server 2.10 defines them (its `subject_transform.go`): a source
//! filter and a destination whose tokens are literals or mapping functions, `$1` or
//! `{{wildcard(1)}}`, `{{partition(n,1,2)}}`, `{{split(1,-)}}`, `{{splitFromLeft(1,2)}}`,
//! `{{splitFromRight(1,2)}}`, `{{sliceFromLeft(1,2)}}`, `{{sliceFromRight(1,2)}}`,
//! `{{left(1,2)}}`, `{{right(1,2)}}` and `{{random(n)}}`.
//!
//! Pure: no I/O, no locks. Streams apply one to what they capture (`subject_transform`), mirrors
//! and sources to what they copy (`subject_transforms`), and accounts' subject mappings
//! (`mappings.rs`) to what clients publish. The error texts are nats-server's, so the API
//! errors and config errors that embed them read the same.

use semaq_wire::subject;

/// Why a transform cannot be built, worded as nats-server words it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransformError {
    /// The source or destination is not a valid subject, or they disagree on `>`.
    #[error("invalid subject")]
    BadSubject,
    /// A destination token that cannot be part of a subject.
    #[error("invalid mapping destination: invalid transform{}", in_token(.0))]
    InvalidDestination(String),
    /// `{{...}}` naming no known function.
    #[error("invalid mapping destination: unknown function in {0}")]
    UnknownFunction(String),
    /// A wildcard index beyond the source's `*` tokens (or a function a literal source cannot feed).
    #[error("invalid mapping destination: wildcard index out of range in {0}")]
    IndexOutOfRange(String),
    /// Too few function arguments.
    #[error("invalid mapping destination: not enough arguments passed to the function in {0}")]
    NotEnoughArgs(String),
    /// Too many function arguments.
    #[error("invalid mapping destination: too many arguments passed to the function in {0}")]
    TooManyArgs(String),
    /// An argument that is not a number where one is needed, or a bad split delimiter.
    #[error("invalid mapping destination: function argument is invalid or in the wrong format in {0}")]
    InvalidArg(String),
}

fn in_token(token: &str) -> String {
    if token.is_empty() {
        String::new()
    } else {
        format!(" in {token}")
    }
}

/// What one destination token becomes.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    /// The token as written (`>` ends the literal part: the rest of the subject follows).
    Literal(String),
    /// The source token at this position.
    Wildcard(usize),
    /// FNV-1a of the named tokens (all of them, dot-joined, when none is named) modulo `n`.
    Partition(u32, Vec<usize>),
    SplitFromLeft(usize, i32),
    SplitFromRight(usize, i32),
    SliceFromLeft(usize, i32),
    SliceFromRight(usize, i32),
    Split(usize, String),
    Left(usize, i32),
    Right(usize, i32),
    Random(u32),
}

/// A parsed transform: match a literal subject against `source`, rewrite it to `destination`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transform {
    source: String,
    destination: String,
    source_token_count: usize,
    parts: Vec<Part>,
}

/// A function token before its wildcard indexes are resolved to source positions.
struct Parsed {
    kind: Kind,
    indexes: Vec<i64>,
    number: i32,
    text: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Literal,
    Wildcard,
    Partition,
    SplitFromLeft,
    SplitFromRight,
    SliceFromLeft,
    SliceFromRight,
    Split,
    Left,
    Right,
    Random,
}

impl Parsed {
    fn literal() -> Self {
        Parsed { kind: Kind::Literal, indexes: Vec::new(), number: -1, text: String::new() }
    }
}

/// Valid for a transform (nats-server's `subjectInfo`): non-empty tokens, nothing after `>`.
/// Returns the tokens, the `*` count and whether it ends in `>`.
fn subject_info(text: &str) -> Option<(Vec<&str>, usize, bool)> {
    if text.is_empty() {
        return None;
    }
    let tokens: Vec<&str> = text.split('.').collect();
    let (mut stars, mut tail) = (0, false);
    for token in &tokens {
        if token.is_empty() || tail {
            return None;
        }
        match *token {
            ">" => tail = true,
            "*" => stars += 1,
            _ => {}
        }
    }
    Some((tokens, stars, tail))
}

impl Transform {
    /// Builds the transform from `source` (empty: `>`) to `destination`; `None` when the
    /// destination is empty (no transform).
    pub fn new(source: &str, destination: &str) -> Result<Option<Self>, TransformError> {
        if destination.is_empty() {
            return Ok(None);
        }
        let source = if source.is_empty() { ">" } else { source };
        let (Some((source_tokens, stars, source_tail)), Some((dest_tokens, dest_stars, dest_tail))) =
            (subject_info(source), subject_info(destination))
        else {
            return Err(TransformError::BadSubject);
        };
        if dest_stars > 0 || source_tail != dest_tail {
            return Err(TransformError::BadSubject);
        }
        // Wildcard n is the n-th `*` of the source (1-based); unknown numbers read position 0.
        let star_positions: Vec<usize> =
            source_tokens.iter().enumerate().filter(|(_, token)| **token == "*").map(|(i, _)| i).collect();
        let mut parts = Vec::with_capacity(dest_tokens.len());
        for token in &dest_tokens {
            let parsed = parse_token(token)?;
            let has_wildcards = stars > 0 || source_tail;
            if !has_wildcards && !matches!(parsed.kind, Kind::Literal | Kind::Random | Kind::Partition) {
                return Err(TransformError::IndexOutOfRange(token.to_string()));
            }
            let mut positions = Vec::with_capacity(parsed.indexes.len());
            if has_wildcards {
                for &index in &parsed.indexes {
                    if index > stars as i64 {
                        return Err(TransformError::IndexOutOfRange(format!("{token}: [{index}]")));
                    }
                    let position = usize::try_from(index - 1).ok().and_then(|i| star_positions.get(i)).copied();
                    positions.push(position.unwrap_or(0));
                }
            }
            parts.push(build_part(parsed, positions, token));
        }
        Ok(Some(Transform {
            source: source.to_string(),
            destination: destination.to_string(),
            source_token_count: source_tokens.len(),
            parts,
        }))
    }

    /// The source filter.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The destination as configured.
    pub fn destination(&self) -> &str {
        &self.destination
    }

    /// The rewritten subject when `subject` (literal) matches the source; `None` otherwise.
    pub fn apply(&self, subject: &str) -> Option<String> {
        if self.source == ">" && self.destination == ">" {
            return Some(subject.to_string());
        }
        if !subject::is_valid_literal(subject) || !subject::matches(&self.source, subject) {
            return None;
        }
        let tokens: Vec<&str> = subject.split('.').collect();
        Some(self.rewrite(&tokens))
    }

    /// The rewritten subject for one the caller found the source takes (nats-server's
    /// `TransformTokenizedSubject`): unlike [`Transform::apply`], a `*` or `>` token a
    /// non-pedantic client published goes through like any other.
    pub fn rewrite_taken(&self, subject: &str) -> String {
        let tokens: Vec<&str> = subject.split('.').collect();
        self.rewrite(&tokens)
    }

    fn rewrite(&self, tokens: &[&str]) -> String {
        let mut out: Vec<u8> = Vec::with_capacity(64);
        let last = self.parts.len().saturating_sub(1);
        for (i, part) in self.parts.iter().enumerate() {
            if let Part::Literal(text) = part {
                if text == ">" {
                    break;
                }
            }
            write_part(&mut out, part, tokens);
            if i < last {
                out.push(b'.');
            }
        }
        if matches!(self.parts.last(), Some(Part::Literal(text)) if text == ">") {
            let start = self.source_token_count.saturating_sub(1).min(tokens.len());
            out.extend_from_slice(tokens[start..].join(".").as_bytes());
        }
        String::from_utf8_lossy(&out).into_owned()
    }
}

/// Checks a destination the way nats-server checks stream source transforms (`ValidateMapping`):
/// token shapes first, then that the transform builds.
pub fn validate_mapping(source: &str, destination: &str) -> Result<(), TransformError> {
    if destination.is_empty() {
        return Ok(());
    }
    let mut tail = false;
    for token in destination.split('.') {
        if token.is_empty() || tail {
            return Err(TransformError::InvalidDestination(token.to_string()));
        }
        if is_function_token(token) {
            if function_call(token).is_none_or(|(name, _)| kind_of(&name).is_none()) {
                return Err(TransformError::UnknownFunction(token.to_string()));
            }
            continue;
        }
        if token == ">" {
            tail = true;
        } else if token.bytes().any(|b| matches!(b, b'\t' | b'\n' | b'\x0c' | b'\r' | b' ')) {
            return Err(TransformError::InvalidDestination(String::new()));
        }
    }
    Transform::new(source, destination).map(|_| ())
}

fn is_function_token(token: &str) -> bool {
    token.len() > 4 && token.starts_with("{{") && token.ends_with("}}")
}

/// `{{ name(args) }}` → the name (lower case) and the raw argument text.
fn function_call(token: &str) -> Option<(String, &str)> {
    let inner = token.strip_prefix("{{")?.strip_suffix("}}")?.trim();
    let open = inner.find('(')?;
    let name = inner[..open].trim().to_ascii_lowercase();
    let args = inner[open + 1..].trim_end().strip_suffix(')')?;
    Some((name, args))
}

fn kind_of(name: &str) -> Option<Kind> {
    Some(match name {
        "wildcard" => Kind::Wildcard,
        "partition" => Kind::Partition,
        "splitfromleft" => Kind::SplitFromLeft,
        "splitfromright" => Kind::SplitFromRight,
        "slicefromleft" => Kind::SliceFromLeft,
        "slicefromright" => Kind::SliceFromRight,
        "split" => Kind::Split,
        "left" => Kind::Left,
        "right" => Kind::Right,
        "random" => Kind::Random,
        _ => return None,
    })
}

/// Arguments split as nats-server splits them: at commas, eating the spaces after each.
fn split_args(args: &str) -> Vec<&str> {
    args.split(',').enumerate().map(|(i, arg)| if i == 0 { arg } else { arg.trim_start() }).collect()
}

fn number<T: std::str::FromStr>(text: &str, token: &str) -> Result<T, TransformError> {
    text.trim_matches(' ').parse().map_err(|_| TransformError::InvalidArg(token.to_string()))
}

fn parse_token(token: &str) -> Result<Parsed, TransformError> {
    if token.len() > 1 && token.starts_with('$') {
        // The 2.9 `$1` form; other `$` tokens are plain literals.
        return Ok(match token[1..].parse::<i64>() {
            Ok(index) => Parsed { kind: Kind::Wildcard, indexes: vec![index], number: -1, text: String::new() },
            Err(_) => Parsed::literal(),
        });
    }
    if !is_function_token(token) {
        return Ok(Parsed::literal());
    }
    let unknown = || TransformError::UnknownFunction(token.to_string());
    let (name, args) = function_call(token).ok_or_else(unknown)?;
    let kind = kind_of(&name).ok_or_else(unknown)?;
    let args = split_args(args);
    let owned = || token.to_string();
    match kind {
        Kind::Wildcard => match args.as_slice() {
            [""] => Err(TransformError::NotEnoughArgs(owned())),
            [index] => Ok(Parsed { kind, indexes: vec![number(index, token)?], number: -1, text: String::new() }),
            _ => Err(TransformError::TooManyArgs(owned())),
        },
        Kind::Partition => {
            let buckets: i64 = number(args[0], token)?;
            let buckets = i32::try_from(buckets).map_err(|_| TransformError::InvalidArg(owned()))?;
            let indexes = args[1..].iter().map(|arg| number(arg, token)).collect::<Result<Vec<i64>, _>>()?;
            Ok(Parsed { kind, indexes, number: buckets, text: String::new() })
        }
        Kind::Random => match args.as_slice() {
            [ceiling] => {
                let ceiling: i64 = number(ceiling, token)?;
                let ceiling = i32::try_from(ceiling).map_err(|_| TransformError::InvalidArg(owned()))?;
                Ok(Parsed { kind, indexes: Vec::new(), number: ceiling, text: String::new() })
            }
            _ => Err(TransformError::NotEnoughArgs(owned())),
        },
        Kind::Split => match args.as_slice() {
            [index, delimiter] => {
                if delimiter.contains(' ') || delimiter.contains('.') {
                    return Err(TransformError::InvalidArg(owned()));
                }
                let index = number(index, token)?;
                Ok(Parsed { kind, indexes: vec![index], number: -1, text: delimiter.to_string() })
            }
            [_] => Err(TransformError::NotEnoughArgs(owned())),
            _ => Err(TransformError::TooManyArgs(owned())),
        },
        _ => match args.as_slice() {
            [index, size] => {
                let index = number(index, token)?;
                let size: i32 = number(size, token)?;
                Ok(Parsed { kind, indexes: vec![index], number: size, text: String::new() })
            }
            [_] => Err(TransformError::NotEnoughArgs(owned())),
            _ => Err(TransformError::TooManyArgs(owned())),
        },
    }
}

fn build_part(parsed: Parsed, positions: Vec<usize>, token: &str) -> Part {
    let first = positions.first().copied().unwrap_or(0);
    let n = parsed.number;
    match parsed.kind {
        Kind::Literal => Part::Literal(token.to_string()),
        Kind::Wildcard => Part::Wildcard(first),
        // A negative count hashes into nothing: nats-server turns it into a huge unsigned one.
        Kind::Partition => Part::Partition(n as u32, positions),
        Kind::SplitFromLeft => Part::SplitFromLeft(first, n),
        Kind::SplitFromRight => Part::SplitFromRight(first, n),
        Kind::SliceFromLeft => Part::SliceFromLeft(first, n),
        Kind::SliceFromRight => Part::SliceFromRight(first, n),
        Kind::Split => Part::Split(first, parsed.text),
        Kind::Left => Part::Left(first, n),
        Kind::Right => Part::Right(first, n),
        Kind::Random => Part::Random(n.max(0) as u32),
    }
}

/// 32-bit FNV-1a, the hash nats-server partitions with.
fn fnv1a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |hash, &byte| (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193))
}

fn random_below(ceiling: u32) -> u32 {
    if ceiling == 0 {
        return 0;
    }
    rand::random::<u32>() % ceiling
}

fn write_part(out: &mut Vec<u8>, part: &Part, tokens: &[&str]) {
    let token = |position: &usize| tokens.get(*position).copied().unwrap_or("").as_bytes();
    match part {
        Part::Literal(text) => out.extend_from_slice(text.as_bytes()),
        Part::Wildcard(position) => out.extend_from_slice(token(position)),
        Part::Partition(buckets, positions) => {
            let key: Vec<u8> = if positions.is_empty() {
                tokens.join(".").into_bytes()
            } else {
                positions.iter().flat_map(|p| token(p).iter().copied()).collect()
            };
            let bucket = if *buckets == 0 { 0 } else { fnv1a(&key) % buckets };
            out.extend_from_slice(bucket.to_string().as_bytes());
        }
        Part::SplitFromLeft(position, at) => split_at(out, token(position), *at, false),
        Part::SplitFromRight(position, at) => split_at(out, token(position), *at, true),
        Part::SliceFromLeft(position, size) => slice_from_left(out, token(position), *size),
        Part::SliceFromRight(position, size) => slice_from_right(out, token(position), *size),
        Part::Split(position, delimiter) => split_on(out, token(position), delimiter),
        Part::Left(position, size) => {
            let source = token(position);
            let cut = fits(*size, source.len()).map_or(source, |size| &source[..size]);
            out.extend_from_slice(cut);
        }
        Part::Right(position, size) => {
            let source = token(position);
            let cut = fits(*size, source.len()).map_or(source, |size| &source[source.len() - size..]);
            out.extend_from_slice(cut);
        }
        Part::Random(ceiling) => out.extend_from_slice(random_below(*ceiling).to_string().as_bytes()),
    }
}

/// `size` as a length strictly inside a token of `length` bytes, else `None` (the token stays whole).
fn fits(size: i32, length: usize) -> Option<usize> {
    usize::try_from(size).ok().filter(|&size| size > 0 && size < length)
}

fn split_at(out: &mut Vec<u8>, source: &[u8], at: i32, from_right: bool) {
    match fits(at, source.len()) {
        Some(at) => {
            let cut = if from_right { source.len() - at } else { at };
            out.extend_from_slice(&source[..cut]);
            out.push(b'.');
            out.extend_from_slice(&source[cut..]);
        }
        None => out.extend_from_slice(source),
    }
}

fn slice_from_left(out: &mut Vec<u8>, source: &[u8], size: i32) {
    let Some(size) = fits(size, source.len()) else {
        out.extend_from_slice(source);
        return;
    };
    let mut start = 0;
    while start + size <= source.len() {
        if start != 0 {
            out.push(b'.');
        }
        out.extend_from_slice(&source[start..start + size]);
        if start + size != source.len() && start + 2 * size > source.len() {
            out.push(b'.');
            out.extend_from_slice(&source[start + size..]);
            break;
        }
        start += size;
    }
}

fn slice_from_right(out: &mut Vec<u8>, source: &[u8], size: i32) {
    let Some(size) = fits(size, source.len()) else {
        out.extend_from_slice(source);
        return;
    };
    let remainder = source.len() % size;
    if remainder > 0 {
        out.extend_from_slice(&source[..remainder]);
        out.push(b'.');
    }
    let mut start = remainder;
    while start + size <= source.len() {
        out.extend_from_slice(&source[start..start + size]);
        if start + size < source.len() {
            out.push(b'.');
        }
        start += size;
    }
}

fn split_on(out: &mut Vec<u8>, source: &[u8], delimiter: &str) {
    let text = String::from_utf8_lossy(source);
    let pieces: Vec<&str> = if delimiter.is_empty() {
        text.char_indices().map(|(i, c)| &text[i..i + c.len_utf8()]).collect()
    } else {
        text.split(delimiter).collect()
    };
    for (j, piece) in pieces.iter().enumerate() {
        out.extend_from_slice(piece.as_bytes());
        let next_has_text = pieces.get(j + 1).is_some_and(|next| !next.is_empty());
        let leading_empty = j == 0 && piece.is_empty();
        if next_has_text && !leading_empty {
            out.push(b'.');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply(source: &str, destination: &str, subject: &str) -> Option<String> {
        Transform::new(source, destination).expect("valid").expect("some").apply(subject)
    }

    #[test]
    fn wildcards_move_tokens_in_both_spellings() {
        assert_eq!(apply("foo.*.*", "bar.$2.$1", "foo.a.b").as_deref(), Some("bar.b.a"));
        assert_eq!(apply("foo.*.*", "bar.{{wildcard(2)}}.{{ Wildcard( 1 ) }}", "foo.a.b").as_deref(), Some("bar.b.a"));
        assert_eq!(apply("foo.*", "bar.{{wildcard(1)}}", "other.a"), None);
    }

    #[test]
    fn a_tail_wildcard_carries_the_rest_of_the_subject() {
        assert_eq!(apply("orders.>", "archive.orders.>", "orders.eu.1").as_deref(), Some("archive.orders.eu.1"));
        assert_eq!(apply("", "copy.>", "a.b").as_deref(), Some("copy.a.b"));
        assert_eq!(apply(">", ">", "a.b").as_deref(), Some("a.b"));
        assert_eq!(apply("$KV.A.>", "$KV.B.>", "$KV.A.key").as_deref(), Some("$KV.B.key"));
    }

    #[test]
    fn a_literal_source_maps_to_a_literal_destination() {
        assert_eq!(apply("foo", "bar", "foo").as_deref(), Some("bar"));
        assert_eq!(apply("foo", "bar", "baz"), None);
    }

    #[test]
    fn partition_hashes_like_nats_server() {
        // fnv32a("foo.a") % 10 and fnv32a("a") % 10, computed from the FNV-1a definition.
        let whole = fnv1a(b"foo.a") % 10;
        let token = fnv1a(b"a") % 10;
        assert_eq!(apply("foo.*", "p.{{partition(10)}}", "foo.a"), Some(format!("p.{whole}")));
        assert_eq!(apply("foo.*", "p.{{partition(10,1)}}.{{wildcard(1)}}", "foo.a"), Some(format!("p.{token}.a")));
        assert_eq!(fnv1a(b""), 0x811c_9dc5);
        assert_eq!(fnv1a(b"a"), 0xe40c_292c);
    }

    #[test]
    fn split_slice_left_and_right_cut_tokens() {
        assert_eq!(apply("*", "{{split(1,-)}}", "-a--b-").as_deref(), Some("a.b"));
        assert_eq!(apply("*", "{{splitFromLeft(1,2)}}", "abcd").as_deref(), Some("ab.cd"));
        assert_eq!(apply("*", "{{splitFromRight(1,1)}}", "abcd").as_deref(), Some("abc.d"));
        assert_eq!(apply("*", "{{sliceFromLeft(1,2)}}", "abcde").as_deref(), Some("ab.cd.e"));
        assert_eq!(apply("*", "{{sliceFromRight(1,2)}}", "abcde").as_deref(), Some("a.bc.de"));
        assert_eq!(apply("*", "{{left(1,2)}}", "abcde").as_deref(), Some("ab"));
        assert_eq!(apply("*", "{{right(1,2)}}", "abcde").as_deref(), Some("de"));
        assert_eq!(apply("*", "{{left(1,9)}}", "abc").as_deref(), Some("abc"));
    }

    #[test]
    fn random_stays_below_its_ceiling() {
        for _ in 0..20 {
            let bucket: u32 = apply("foo", "r.{{random(3)}}", "foo").expect("matches")[2..].parse().expect("number");
            assert!(bucket < 3);
        }
    }

    #[test]
    fn bad_destinations_fail_with_nats_server_texts() {
        let error = |source: &str, destination: &str| Transform::new(source, destination).expect_err("invalid");
        assert_eq!(error("foo.*", "bar.*"), TransformError::BadSubject);
        assert_eq!(error("foo.>", "bar"), TransformError::BadSubject);
        assert_eq!(error("foo..x", "bar"), TransformError::BadSubject);
        assert_eq!(
            error("foo.*", "bar.{{wildcard(2)}}").to_string(),
            "invalid mapping destination: wildcard index out of range in {{wildcard(2)}}: [2]"
        );
        assert_eq!(
            error("foo.*", "{{wildcard()}}").to_string(),
            "invalid mapping destination: not enough arguments passed to the function in {{wildcard()}}"
        );
        assert_eq!(
            error("foo.*", "{{wildcard(1,2)}}").to_string(),
            "invalid mapping destination: too many arguments passed to the function in {{wildcard(1,2)}}"
        );
        assert_eq!(
            error("foo.*", "{{wildcard(x)}}").to_string(),
            "invalid mapping destination: function argument is invalid or in the wrong format in {{wildcard(x)}}"
        );
        assert_eq!(
            error("foo.*", "{{nope(1)}}").to_string(),
            "invalid mapping destination: unknown function in {{nope(1)}}"
        );
        assert_eq!(error("foo", "{{wildcard(1)}}"), TransformError::IndexOutOfRange("{{wildcard(1)}}".into()));
        assert_eq!(error("*", "{{split(1,a b)}}"), TransformError::InvalidArg("{{split(1,a b)}}".into()));
    }

    #[test]
    fn validate_mapping_checks_token_shapes_first() {
        assert!(validate_mapping("foo.*", "bar.{{wildcard(1)}}").is_ok());
        assert!(validate_mapping("", "").is_ok());
        assert_eq!(
            validate_mapping("foo.*", "bar.{{bogus(1)}}").expect_err("unknown").to_string(),
            "invalid mapping destination: unknown function in {{bogus(1)}}"
        );
        assert_eq!(
            validate_mapping("foo.>", "bar.>.x").expect_err("after >").to_string(),
            "invalid mapping destination: invalid transform in x"
        );
    }

    #[test]
    fn no_destination_means_no_transform() {
        assert_eq!(Transform::new("foo", ""), Ok(None));
    }
}
