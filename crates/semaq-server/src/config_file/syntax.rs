//! nats-server's configuration syntax, read into a tree of values that remember where they came from.
//!
//! Written from the behaviour of nats-server's `conf` package; where it has accidents, this follows the
//! evident intent instead (noted below). Includes and variables are resolved while parsing, so the tree
//! holds only plain values.
//!
//! - Entries: `key: value`, `key = value`, `key value`, ended by a new line, `;` or `,`. A block may
//!   open on the line after its key (`key` newline `{`); any other value must be on the key's line.
//! - Values: `[..]` arrays, `{..}` blocks, `"..."` strings with `\t \n \r \" \\ \xHH` escapes, `'...'`
//!   raw strings, `(` .. `)` multi-line strings, and bare words: integers with an optional size suffix
//!   (`k`/`m`/`g`/`t`/`p`/`e` ×1000ⁿ; `kb`/`ki`/`kib` and so on ×1024ⁿ, as nats-server's parser),
//!   floats, booleans (`true false yes no on off`), `$VARIABLE`, and anything else as a string
//!   (`127.0.0.1:4222`, `2s`, `nats.>`).
//! - A whole file may be wrapped in `{ }` like JSON.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{ConfigError, Location};

/// Includes nested deeper than this are taken for an include cycle.
const INCLUDE_DEPTH_MAX: usize = 10;
/// Arrays and blocks nested deeper than this are refused rather than risking the parser's stack.
const NESTING_DEPTH_MAX: usize = 64;

/// Looks an environment variable up; tests supply their own instead of the process environment.
pub(crate) type EnvLookup<'e> = &'e dyn Fn(&str) -> Option<String>;

/// A value's type and contents.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Kind {
    String(String),
    Integer(i64),
    Float(f64),
    Bool(bool),
    Array(Vec<Value>),
    Map(Map),
}

/// A value, where it was written, and how (for scalars) it was spelled.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Value {
    pub kind: Kind,
    pub at: Location,
    pub text: String,
}

/// One `key: value` of a block, in file order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Entry {
    pub key: String,
    pub at: Location,
    pub value: Value,
    /// Used as `$key` somewhere, which makes an otherwise unknown key a variable definition, not a mistake.
    pub referenced: bool,
}

/// The entries of a block or of the whole file.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Map {
    pub entries: Vec<Entry>,
}

impl Map {
    /// Adds an entry; a repeated key replaces the earlier one, as in nats-server.
    fn insert(&mut self, mut entry: Entry) {
        if let Some(index) = self.entries.iter().position(|existing| existing.key == entry.key) {
            entry.referenced |= self.entries.remove(index).referenced;
        }
        self.entries.push(entry);
    }
}

/// Parses a whole document.
pub(crate) fn parse(
    text: &str,
    file: Option<Arc<Path>>,
    base_dir: &Path,
    env: EnvLookup<'_>,
) -> Result<Map, ConfigError> {
    Parser::new(text, file, base_dir.to_path_buf(), 0, env, HashSet::new()).document()
}

struct Parser<'e> {
    chars: Vec<char>,
    index: usize,
    line: u32,
    column: u32,
    file: Option<Arc<Path>>,
    base_dir: PathBuf,
    depth: usize,
    /// Arrays and blocks currently open.
    nesting: usize,
    env: EnvLookup<'e>,
    /// Environment variables being expanded, to stop `A=$B`, `B=$A` from recursing forever.
    env_in_progress: HashSet<String>,
    /// The blocks being filled, outermost first; variables resolve against them innermost first.
    scopes: Vec<Map>,
}

/// Ends a bare word (nats-server's set; `#` and `:` do not, so `a#b` and `host:port` stay whole).
fn ends_bare_word(c: char) -> bool {
    c.is_whitespace() || matches!(c, ',' | ';' | ']' | '}')
}

fn is_key_char(c: char) -> bool {
    !c.is_whitespace() && !matches!(c, ':' | '=' | '{' | '}' | '[' | ']' | ',' | ';' | '"' | '\'' | '#')
}

fn describe(c: Option<char>) -> String {
    match c {
        None => "the end of the file".to_string(),
        Some('\n') => "the end of the line".to_string(),
        Some(c) => format!("'{c}'"),
    }
}

impl<'e> Parser<'e> {
    fn new(
        text: &str,
        file: Option<Arc<Path>>,
        base_dir: PathBuf,
        depth: usize,
        env: EnvLookup<'e>,
        env_in_progress: HashSet<String>,
    ) -> Self {
        Parser {
            chars: text.chars().collect(),
            index: 0,
            line: 1,
            column: 1,
            file,
            base_dir,
            depth,
            nesting: 0,
            env,
            env_in_progress,
            scopes: Vec::new(),
        }
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.index).copied()
    }

    fn peek_second(&self) -> Option<char> {
        self.chars.get(self.index + 1).copied()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.index += 1;
        if c == '\n' {
            self.line += 1;
            self.column = 1;
        } else {
            self.column += 1;
        }
        Some(c)
    }

    fn here(&self) -> Location {
        Location { file: self.file.clone(), line: self.line, column: self.column }
    }

    fn syntax(at: Location, message: String) -> ConfigError {
        ConfigError::Syntax { at, message }
    }

    fn at_comment(&self) -> bool {
        self.peek() == Some('#') || (self.peek() == Some('/') && self.peek_second() == Some('/'))
    }

    /// At a new line, a comment or the end: nothing more on this line.
    fn at_line_end(&self) -> bool {
        matches!(self.peek(), None | Some('\n')) || self.at_comment()
    }

    fn skip_comment(&mut self) {
        while !matches!(self.peek(), None | Some('\n')) {
            self.bump();
        }
    }

    /// Skips spaces and tabs (and the `\r` of CRLF files), staying on the line.
    fn skip_blanks(&mut self) {
        while matches!(self.peek(), Some(' ' | '\t' | '\r')) {
            self.bump();
        }
    }

    /// Skips white space, new lines and comments.
    fn skip_space(&mut self) {
        loop {
            match self.peek() {
                Some(c) if c.is_whitespace() => {
                    self.bump();
                }
                _ if self.at_comment() => self.skip_comment(),
                _ => return,
            }
        }
    }

    fn document(mut self) -> Result<Map, ConfigError> {
        self.scopes.push(Map::default());
        self.skip_space();
        if self.peek() == Some('{') {
            let opened = self.here();
            self.bump();
            self.entries(Some(&opened))?;
            self.skip_space();
            if self.peek().is_some() {
                let message =
                    format!("expected the end of the file after the closing '}}', found {}", describe(self.peek()));
                return Err(Self::syntax(self.here(), message));
            }
        } else {
            self.entries(None)?;
        }
        Ok(self.scopes.pop().unwrap_or_default())
    }

    /// Reads entries into the innermost scope until `}` (of the block opened at `opened`) or the end.
    fn entries(&mut self, opened: Option<&Location>) -> Result<(), ConfigError> {
        loop {
            self.skip_space();
            match (self.peek(), opened) {
                (None, None) => return Ok(()),
                (None, Some(opened)) => {
                    let message = format!(
                        "unexpected end of file: the block opened at line {} is never closed with '}}'",
                        opened.line
                    );
                    return Err(Self::syntax(self.here(), message));
                }
                (Some('}'), Some(_)) => {
                    self.bump();
                    return Ok(());
                }
                _ => {}
            }
            self.entry()?;
            self.end_of_entry(opened.is_some())?;
        }
    }

    fn end_of_entry(&mut self, in_block: bool) -> Result<(), ConfigError> {
        self.skip_blanks();
        match self.peek() {
            None => Ok(()),
            Some('\n' | ';' | ',') => {
                self.bump();
                Ok(())
            }
            Some('}') if in_block => Ok(()),
            _ if self.at_comment() => Ok(()),
            found => {
                let message = format!("expected a new line, ';' or ',' after the value, found {}", describe(found));
                Err(Self::syntax(self.here(), message))
            }
        }
    }

    fn entry(&mut self) -> Result<(), ConfigError> {
        let at = self.here();
        let (key, quoted) = self.key()?;
        if !quoted && key.eq_ignore_ascii_case("include") && matches!(self.peek(), Some(' ' | '\t')) {
            self.skip_blanks();
            if !matches!(self.peek(), Some(':' | '=')) {
                return self.include(at);
            }
        }
        let value = self.value_after_key(&key)?;
        self.scope().insert(Entry { key, at, value, referenced: false });
        Ok(())
    }

    fn scope(&mut self) -> &mut Map {
        if self.scopes.is_empty() {
            self.scopes.push(Map::default());
        }
        let last = self.scopes.len() - 1;
        &mut self.scopes[last]
    }

    /// A key and whether it was quoted.
    fn key(&mut self) -> Result<(String, bool), ConfigError> {
        match self.peek() {
            Some(quote @ ('"' | '\'')) => {
                let opened = self.here();
                self.bump();
                let key = self.quoted_key(quote, &opened)?;
                Ok((key, true))
            }
            Some(c) if is_key_char(c) => {
                let mut key = String::new();
                while let Some(c) = self.peek().filter(|&c| is_key_char(c)) {
                    key.push(c);
                    self.bump();
                }
                Ok((key, false))
            }
            found => Err(Self::syntax(self.here(), format!("expected a key, found {}", describe(found)))),
        }
    }

    fn quoted_key(&mut self, quote: char, opened: &Location) -> Result<String, ConfigError> {
        let mut key = String::new();
        loop {
            match self.bump() {
                Some(c) if c == quote => return Ok(key),
                None | Some('\n') => {
                    return Err(Self::syntax(opened.clone(), "the quoted key is never closed on its line".to_string()))
                }
                Some(c) => key.push(c),
            }
        }
    }

    /// The separator (if any) and the value that follow a key.
    fn value_after_key(&mut self, key: &str) -> Result<Value, ConfigError> {
        self.skip_blanks();
        if matches!(self.peek(), Some(':' | '=')) {
            self.bump();
            self.skip_blanks();
        } else if self.at_line_end() {
            // nats-server lets a block open on the next line; anything else there is more likely a new key.
            self.skip_space();
            if self.peek() != Some('{') {
                let message = format!("expected a value for \"{key}\", found {}", describe(self.peek()));
                return Err(Self::syntax(self.here(), message));
            }
        }
        if self.at_line_end() {
            let found = if self.at_comment() { "a comment".to_string() } else { describe(self.peek()) };
            let message = format!("expected a value for \"{key}\" on the same line, found {found}");
            return Err(Self::syntax(self.here(), message));
        }
        self.value()
    }

    fn value(&mut self) -> Result<Value, ConfigError> {
        let at = self.here();
        match self.peek() {
            Some('[' | '{') => self.nested(at),
            Some('"') => self.double_quoted(at),
            Some('\'') => self.single_quoted(at),
            Some('(') => self.multi_line(at),
            Some(c) if !ends_bare_word(c) => self.bare(at),
            found => Err(Self::syntax(at, format!("expected a value, found {}", describe(found)))),
        }
    }

    fn nested(&mut self, at: Location) -> Result<Value, ConfigError> {
        if self.nesting >= NESTING_DEPTH_MAX {
            return Err(Self::syntax(at, format!("arrays and blocks are nested more than {NESTING_DEPTH_MAX} deep")));
        }
        self.nesting += 1;
        let result = if self.peek() == Some('[') { self.array(at) } else { self.block(at) };
        self.nesting -= 1;
        result
    }

    fn array(&mut self, at: Location) -> Result<Value, ConfigError> {
        self.bump();
        let mut items = Vec::new();
        loop {
            self.skip_space();
            match self.peek() {
                None => {
                    let message = format!(
                        "unexpected end of file: the array opened at line {} is never closed with ']'",
                        at.line
                    );
                    return Err(Self::syntax(self.here(), message));
                }
                Some(']') => {
                    self.bump();
                    return Ok(Value { kind: Kind::Array(items), at, text: String::new() });
                }
                Some(',') => {
                    return Err(Self::syntax(self.here(), "expected an array value or ']', found ','".to_string()))
                }
                _ => {}
            }
            items.push(self.value()?);
            self.skip_blanks();
            match self.peek() {
                Some(',' | '\n') => {
                    self.bump();
                }
                None | Some(']') => {}
                _ if self.at_comment() => {}
                found => {
                    let message = format!("expected ',' or ']' after an array value, found {}", describe(found));
                    return Err(Self::syntax(self.here(), message));
                }
            }
        }
    }

    fn block(&mut self, at: Location) -> Result<Value, ConfigError> {
        self.bump();
        self.scopes.push(Map::default());
        let result = self.entries(Some(&at));
        let map = self.scopes.pop().unwrap_or_default();
        result?;
        Ok(Value { kind: Kind::Map(map), at, text: String::new() })
    }

    fn double_quoted(&mut self, at: Location) -> Result<Value, ConfigError> {
        self.bump();
        let mut text = String::new();
        loop {
            let escape_at = self.here();
            match self.bump() {
                None => return Err(Self::syntax(at, "the string is never closed with '\"'".to_string())),
                Some('"') => return Ok(Value { kind: Kind::String(text.clone()), at, text }),
                Some('\\') => text.push(self.escape(escape_at)?),
                Some(c) => text.push(c),
            }
        }
    }

    fn escape(&mut self, at: Location) -> Result<char, ConfigError> {
        match self.bump() {
            Some('t') => Ok('\t'),
            Some('n') => Ok('\n'),
            Some('r') => Ok('\r'),
            Some('"') => Ok('"'),
            Some('\\') => Ok('\\'),
            Some('x') => {
                let digits: String = [self.bump(), self.bump()].into_iter().flatten().collect();
                match u8::from_str_radix(&digits, 16) {
                    Ok(byte) if digits.len() == 2 => Ok(char::from(byte)),
                    _ => Err(Self::syntax(at, format!("expected two hexadecimal digits after \\x, found {digits:?}"))),
                }
            }
            found => {
                let message =
                    format!("invalid escape {} in a string; allowed are \\t \\n \\r \\\" \\\\ \\xHH", describe(found));
                Err(Self::syntax(at, message))
            }
        }
    }

    fn single_quoted(&mut self, at: Location) -> Result<Value, ConfigError> {
        self.bump();
        let mut text = String::new();
        loop {
            match self.bump() {
                None => return Err(Self::syntax(at, "the string is never closed with \"'\"".to_string())),
                Some('\'') => return Ok(Value { kind: Kind::String(text.clone()), at, text }),
                Some(c) => text.push(c),
            }
        }
    }

    /// `(` starts a string that runs to a line holding only `)`.
    fn multi_line(&mut self, at: Location) -> Result<Value, ConfigError> {
        self.bump();
        let mut text = String::new();
        loop {
            match self.peek() {
                None => {
                    return Err(Self::syntax(
                        at,
                        "the '(' string is never closed by a line holding only ')'".to_string(),
                    ))
                }
                Some('\n') if self.peek_second() == Some(')') && self.closes_multi_line() => {
                    self.bump();
                    self.bump();
                    return Ok(Value { kind: Kind::String(text.clone()), at, text });
                }
                Some(c) => {
                    text.push(c);
                    self.bump();
                }
            }
        }
    }

    fn closes_multi_line(&self) -> bool {
        matches!(self.chars.get(self.index + 2), None | Some('\n' | '\r'))
    }

    fn bare(&mut self, at: Location) -> Result<Value, ConfigError> {
        let mut text = String::new();
        while let Some(c) = self.peek().filter(|&c| !ends_bare_word(c)) {
            text.push(c);
            self.bump();
        }
        if text.starts_with('-') || text.starts_with(|c: char| c.is_ascii_digit()) {
            let kind = number_or_string(&text).map_err(|message| Self::syntax(at.clone(), message))?;
            return Ok(Value { kind, at, text });
        }
        if let Some(name) = text.strip_prefix('$') {
            return self.variable(name, at, &text);
        }
        let kind = match text.to_ascii_lowercase().as_str() {
            "true" | "yes" | "on" => Kind::Bool(true),
            "false" | "no" | "off" => Kind::Bool(false),
            _ => Kind::String(text.clone()),
        };
        Ok(Value { kind, at, text })
    }

    /// Resolves `$name`: keys of the enclosing blocks (innermost first, as written so far), then the environment.
    fn variable(&mut self, name: &str, at: Location, text: &str) -> Result<Value, ConfigError> {
        if name.is_empty() {
            return Err(Self::syntax(at, "expected a variable name after '$'".to_string()));
        }
        if name.starts_with(|c: char| c.is_ascii_digit()) {
            // Not a name: bcrypt hashes (`$2a$11$...`) are written bare, and nats-server keeps them as text.
            return Ok(Value { kind: Kind::String(text.to_string()), at, text: text.to_string() });
        }
        for scope in self.scopes.iter_mut().rev() {
            if let Some(entry) = scope.entries.iter_mut().find(|entry| entry.key == name) {
                entry.referenced = true;
                return Ok(Value { at, ..entry.value.clone() });
            }
        }
        self.env_variable(name, at)
    }

    /// An environment value is read as a config value (so `PORT=4222` is a number); text that is not a
    /// single value is kept as a string, where nats-server would reject it.
    fn env_variable(&mut self, name: &str, at: Location) -> Result<Value, ConfigError> {
        let undefined = || ConfigError::UndefinedVariable { at: at.clone(), name: name.to_string() };
        if self.env_in_progress.contains(name) {
            return Err(undefined());
        }
        let text = (self.env)(name).ok_or_else(undefined)?;
        let mut in_progress = self.env_in_progress.clone();
        in_progress.insert(name.to_string());
        let mut parser = Parser::new(&text, None, self.base_dir.clone(), self.depth, self.env, in_progress);
        let kind = match parser.lone_value() {
            Ok(value) => value.kind,
            Err(_) => Kind::String(text.clone()),
        };
        Ok(Value { kind, at, text })
    }

    fn lone_value(&mut self) -> Result<Value, ConfigError> {
        self.skip_blanks();
        if self.peek().is_none() {
            return Ok(Value { kind: Kind::String(String::new()), at: self.here(), text: String::new() });
        }
        let value = self.value()?;
        self.skip_blanks();
        match self.peek() {
            None => Ok(value),
            found => Err(Self::syntax(self.here(), format!("unexpected {} after the value", describe(found)))),
        }
    }

    /// `include file`: the file's entries join the current block.
    fn include(&mut self, at: Location) -> Result<(), ConfigError> {
        let name = self.include_name()?;
        if self.depth >= INCLUDE_DEPTH_MAX {
            let message =
                format!("includes are nested more than {INCLUDE_DEPTH_MAX} deep; does a file include itself?");
            return Err(Self::syntax(at, message));
        }
        let path = self.base_dir.join(&name);
        let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Include {
            at: at.clone(),
            path: path.clone(),
            source,
        })?;
        let base_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let file: Arc<Path> = Arc::from(path.as_path());
        let included = Parser::new(&text, Some(file), base_dir, self.depth + 1, self.env, HashSet::new()).document()?;
        for entry in included.entries {
            self.scope().insert(entry);
        }
        Ok(())
    }

    fn include_name(&mut self) -> Result<String, ConfigError> {
        let at = self.here();
        let value = match self.peek() {
            Some('"') => self.double_quoted(at.clone())?,
            Some('\'') => self.single_quoted(at.clone())?,
            _ => {
                let mut text = String::new();
                while let Some(c) = self.peek().filter(|&c| !ends_bare_word(c)) {
                    text.push(c);
                    self.bump();
                }
                Value { kind: Kind::String(text.clone()), at: at.clone(), text }
            }
        };
        match value.kind {
            Kind::String(name) if !name.is_empty() => Ok(name),
            _ => Err(Self::syntax(at, "expected a file name after include".to_string())),
        }
    }
}

/// Reads a bare word that starts like a number: an integer (with size suffix), a float, or a string
/// such as `127.0.0.1:4222` or `2s`. A leading `-` must start a number.
fn number_or_string(text: &str) -> Result<Kind, String> {
    let body = text.strip_prefix('-').unwrap_or(text);
    let digits_end = body.find(|c: char| !c.is_ascii_digit()).unwrap_or(body.len());
    let (digits, rest) = body.split_at(digits_end);
    let not_a_number = || {
        if text.starts_with('-') {
            Err(format!("expected a number after '-', found {text:?}"))
        } else {
            Ok(Kind::String(text.to_string()))
        }
    };
    if digits.is_empty() {
        return not_a_number();
    }
    let number = &text[..text.len() - rest.len()];
    let integer = || number.parse::<i64>().map_err(|_| format!("the integer {number} is out of range"));
    if rest.is_empty() {
        return integer().map(Kind::Integer);
    }
    if let Some(fraction) = rest.strip_prefix('.') {
        if !fraction.is_empty() && fraction.bytes().all(|b| b.is_ascii_digit()) {
            return text.parse().map(Kind::Float).map_err(|_| format!("the number {text} is out of range"));
        }
        return not_a_number();
    }
    if !is_size_suffix(rest) {
        return not_a_number();
    }
    let multiplier = size_multiplier(rest).ok_or_else(|| format!("unknown size suffix {rest:?} in {text}"))?;
    integer()?.checked_mul(multiplier).map(Kind::Integer).ok_or_else(|| format!("the size {text} is out of range"))
}

/// A size suffix is shaped like nats-server's: one of `kmgtpe`, then any of `b`/`i`.
fn is_size_suffix(rest: &str) -> bool {
    let mut chars = rest.chars();
    chars.next().is_some_and(|c| "kmgtpeKMGTPE".contains(c)) && chars.all(|c| "biBI".contains(c))
}

/// nats-server's multipliers: a bare letter is decimal, `b`/`i`/`ib` after it binary.
pub(crate) fn size_multiplier(suffix: &str) -> Option<i64> {
    let suffix = suffix.to_ascii_lowercase();
    let mut chars = suffix.chars();
    let power = match chars.next()? {
        'k' => 1,
        'm' => 2,
        'g' => 3,
        't' => 4,
        'p' => 5,
        'e' => 6,
        _ => return None,
    };
    match chars.as_str() {
        "" => Some(1000_i64.pow(power)),
        "b" | "i" | "ib" => Some(1024_i64.pow(power)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn tree(text: &str) -> Map {
        match parse(text, None, Path::new(""), &no_env) {
            Ok(map) => map,
            Err(error) => panic!("should parse: {error}\n{text}"),
        }
    }

    fn failure(text: &str) -> String {
        match parse(text, None, Path::new(""), &no_env) {
            Ok(map) => panic!("should fail: {map:?}"),
            Err(error) => error.to_string(),
        }
    }

    fn get<'m>(map: &'m Map, key: &str) -> &'m Kind {
        match map.entries.iter().find(|entry| entry.key == key) {
            Some(entry) => &entry.value.kind,
            None => panic!("no key {key} in {map:?}"),
        }
    }

    fn string(s: &str) -> Kind {
        Kind::String(s.to_string())
    }

    fn block<'m>(map: &'m Map, key: &str) -> &'m Map {
        match get(map, key) {
            Kind::Map(inner) => inner,
            other => panic!("{key} is not a block: {other:?}"),
        }
    }

    #[test]
    fn three_separators() {
        let map = tree("a: 1\nb = 2\nc 3\nd:4\ne=5\n");
        for (key, number) in [("a", 1), ("b", 2), ("c", 3), ("d", 4), ("e", 5)] {
            assert_eq!(get(&map, key), &Kind::Integer(number));
        }
    }

    #[test]
    fn entries_end_at_new_lines_semicolons_and_commas() {
        let map = tree("a: 1; b: 2, c: 3\r\nd: 4;\n");
        assert_eq!(map.entries.len(), 4);
        assert_eq!(get(&map, "d"), &Kind::Integer(4));
    }

    #[test]
    fn comments() {
        let map = tree("# top\na: 1 # after\n// slashes\nb: 2 // after\nc: [1, # in array\n 2]\n");
        assert_eq!(get(&map, "b"), &Kind::Integer(2));
        let Kind::Array(items) = get(&map, "c") else { panic!("array") };
        let kinds: Vec<_> = items.iter().map(|item| item.kind.clone()).collect();
        assert_eq!(kinds, [Kind::Integer(1), Kind::Integer(2)]);
    }

    #[test]
    fn strings_quoted_and_bare() {
        let map = tree(
            "a: \"x y\\t\\\"z\\\"\\x41\"\nb: 'raw \\n'\nc: bare\nd: 127.0.0.1:4222\ne: nats.>\nf: a#b\ng: 2s\nh: 1.2.3\n",
        );
        assert_eq!(get(&map, "a"), &string("x y\t\"z\"A"));
        assert_eq!(get(&map, "b"), &string("raw \\n"));
        assert_eq!(get(&map, "c"), &string("bare"));
        assert_eq!(get(&map, "d"), &string("127.0.0.1:4222"));
        assert_eq!(get(&map, "e"), &string("nats.>"));
        assert_eq!(get(&map, "f"), &string("a#b"));
        assert_eq!(get(&map, "g"), &string("2s"));
        assert_eq!(get(&map, "h"), &string("1.2.3"));
    }

    #[test]
    fn multi_line_string() {
        let map = tree("cert: (\n-----BEGIN-----\nabc)\n)\nnext: 1\n");
        assert_eq!(get(&map, "cert"), &string("\n-----BEGIN-----\nabc)"));
        assert_eq!(get(&map, "next"), &Kind::Integer(1));
    }

    #[test]
    fn numbers_and_sizes() {
        let map = tree("a: 42\nb: -1\nc: 1.5\nd: 1k\ne: 1kb\nf: 1KiB\ng: 64MB\nh: 2g\ni: 1GB\nj: 1Ki\nk: 3T\n");
        assert_eq!(get(&map, "a"), &Kind::Integer(42));
        assert_eq!(get(&map, "b"), &Kind::Integer(-1));
        assert_eq!(get(&map, "c"), &Kind::Float(1.5));
        assert_eq!(get(&map, "d"), &Kind::Integer(1000));
        assert_eq!(get(&map, "e"), &Kind::Integer(1024));
        assert_eq!(get(&map, "f"), &Kind::Integer(1024));
        assert_eq!(get(&map, "g"), &Kind::Integer(64 << 20));
        assert_eq!(get(&map, "h"), &Kind::Integer(2_000_000_000));
        assert_eq!(get(&map, "i"), &Kind::Integer(1 << 30));
        assert_eq!(get(&map, "j"), &Kind::Integer(1024));
        assert_eq!(get(&map, "k"), &Kind::Integer(3_000_000_000_000));
    }

    #[test]
    fn bad_numbers() {
        assert!(failure("a: 99999999999999999999\n").contains("out of range"));
        assert!(failure("a: 1kbb\n").contains("size suffix"));
        assert!(failure("a: 16EB\n").contains("out of range"));
        assert!(failure("a: -x\n").contains("expected a number after '-'"));
    }

    #[test]
    fn booleans_any_case() {
        let map = tree("a: true\nb: YES\nc: on\nd: False\ne: no\nf: OFF\n");
        for key in ["a", "b", "c"] {
            assert_eq!(get(&map, key), &Kind::Bool(true));
        }
        for key in ["d", "e", "f"] {
            assert_eq!(get(&map, key), &Kind::Bool(false));
        }
    }

    #[test]
    fn arrays_split_by_commas_or_new_lines() {
        let map = tree("a: [1, 2, 3]\nb: [\n  x\n  y,\n  z,\n]\nc: []\nd: [[1], {k: v}]\n");
        let Kind::Array(items) = get(&map, "b") else { panic!("array") };
        let texts: Vec<_> = items.iter().map(|item| item.text.as_str()).collect();
        assert_eq!(texts, ["x", "y", "z"]);
        assert_eq!(get(&map, "c"), &Kind::Array(Vec::new()));
        let Kind::Array(items) = get(&map, "a") else { panic!("array") };
        assert_eq!(items.len(), 3);
        let Kind::Array(items) = get(&map, "d") else { panic!("array") };
        assert!(matches!(items[1].kind, Kind::Map(_)));
    }

    #[test]
    fn blocks_with_and_without_separator() {
        let map = tree("a { x: 1 }\nb: { y: 2 }\nc = {\n  z: 3\n}\nd\n{\n  w: 4\n}\ne {}\n");
        assert_eq!(get(block(&map, "a"), "x"), &Kind::Integer(1));
        assert_eq!(get(block(&map, "b"), "y"), &Kind::Integer(2));
        assert_eq!(get(block(&map, "c"), "z"), &Kind::Integer(3));
        assert_eq!(get(block(&map, "d"), "w"), &Kind::Integer(4));
        assert!(block(&map, "e").entries.is_empty());
    }

    #[test]
    fn quoted_keys_and_json_style_files() {
        let map = tree("{\n  \"port\": 4222,\n  \"tls\": {\"verify\": true}\n}\n");
        assert_eq!(get(&map, "port"), &Kind::Integer(4222));
        assert_eq!(get(block(&map, "tls"), "verify"), &Kind::Bool(true));
        assert_eq!(get(&tree("'odd key' = 1"), "odd key"), &Kind::Integer(1));
    }

    #[test]
    fn a_repeated_key_keeps_the_last_value() {
        let map = tree("a: 1\na: 2\n");
        assert_eq!(map.entries.len(), 1);
        assert_eq!(get(&map, "a"), &Kind::Integer(2));
    }

    #[test]
    fn positions_are_recorded() {
        let map = tree("\n  port: 4222\nnested {\n    x:   \"y\"\n}\n");
        let port = &map.entries[0];
        assert_eq!((port.at.line, port.at.column), (2, 3));
        assert_eq!((port.value.at.line, port.value.at.column), (2, 9));
        let Kind::Map(nested) = &map.entries[1].value.kind else { panic!("block") };
        assert_eq!((nested.entries[0].value.at.line, nested.entries[0].value.at.column), (4, 10));
    }

    #[test]
    fn syntax_errors_name_line_and_column() {
        assert_eq!(
            failure("a: 1\nport:\n"),
            "line 2, column 6: expected a value for \"port\" on the same line, found the end of the line"
        );
        assert_eq!(failure("a: 1 2\n"), "line 1, column 6: expected a new line, ';' or ',' after the value, found '2'");
        assert_eq!(
            failure("a {\n b: 1\n"),
            "line 3, column 1: unexpected end of file: the block opened at line 1 is never closed with '}'"
        );
        assert_eq!(
            failure("a: [1, 2\n"),
            "line 2, column 1: unexpected end of file: the array opened at line 1 is never closed with ']'"
        );
        assert_eq!(failure("a: \"open\n"), "line 1, column 4: the string is never closed with '\"'");
        assert_eq!(failure("a: [1,,2]"), "line 1, column 7: expected an array value or ']', found ','");
        assert_eq!(failure("}\n"), "line 1, column 1: expected a key, found '}'");
        assert_eq!(
            failure("a: \"\\q\"\n"),
            "line 1, column 5: invalid escape 'q' in a string; allowed are \\t \\n \\r \\\" \\\\ \\xHH"
        );
        assert_eq!(
            failure("a: # nothing\n"),
            "line 1, column 4: expected a value for \"a\" on the same line, found a comment"
        );
        assert_eq!(failure("lonely\nport: 1\n"), "line 2, column 1: expected a value for \"lonely\", found 'p'");
        assert_eq!(failure("a: [1 2]"), "line 1, column 7: expected ',' or ']' after an array value, found '2'");
    }

    #[test]
    fn deep_nesting_is_refused() {
        let deep = format!("a: {}{}", "[".repeat(200), "]".repeat(200));
        assert_eq!(failure(&deep), "line 1, column 68: arrays and blocks are nested more than 64 deep");
        let fine = format!("a: {}{}", "[".repeat(64), "]".repeat(64));
        assert!(matches!(get(&tree(&fine), "a"), Kind::Array(_)));
    }

    #[test]
    fn variables_from_earlier_keys_innermost_first() {
        let map = tree("port: 4222\nname: outer\nb {\n  name: inner\n  p: $port\n  n: $name\n}\nn: $name\n");
        let inner = block(&map, "b");
        assert_eq!(get(inner, "p"), &Kind::Integer(4222));
        assert_eq!(get(inner, "n"), &string("inner"));
        assert_eq!(get(&map, "n"), &string("outer"));
        assert!(map.entries[0].referenced && map.entries[1].referenced);
    }

    #[test]
    fn a_variable_value_is_located_at_the_reference() {
        let map = tree("x: 1\ny: $x\n");
        let at = &map.entries[1].value.at;
        assert_eq!((at.line, at.column), (2, 4));
    }

    #[test]
    fn variables_from_the_environment_are_typed() {
        let env = |name: &str| match name {
            "PORT" => Some("4333".to_string()),
            "NAME" => Some("my server".to_string()),
            "LOOP" => Some("$LOOP".to_string()),
            _ => None,
        };
        let map = match parse("p: $PORT\nn: $NAME\nl: $LOOP\n", None, Path::new(""), &env) {
            Ok(map) => map,
            Err(error) => panic!("{error}"),
        };
        assert_eq!(get(&map, "p"), &Kind::Integer(4333));
        assert_eq!(get(&map, "n"), &string("my server"));
        assert_eq!(get(&map, "l"), &string("$LOOP"), "a self-reference falls back to the raw text");
    }

    #[test]
    fn undefined_variables_and_bcrypt_hashes() {
        assert_eq!(
            failure("a: $NOPE_NOT_SET\n"),
            "line 1, column 4: variable $NOPE_NOT_SET is defined neither earlier in the file nor in the environment"
        );
        assert_eq!(get(&tree("p: $2a$11$abc\n"), "p"), &string("$2a$11$abc"));
    }

    #[test]
    fn size_multipliers_follow_nats_server() {
        assert_eq!(size_multiplier("k"), Some(1000));
        assert_eq!(size_multiplier("KB"), Some(1024));
        assert_eq!(size_multiplier("mib"), Some(1 << 20));
        assert_eq!(size_multiplier("G"), Some(1_000_000_000));
        assert_eq!(size_multiplier("x"), None);
        assert_eq!(size_multiplier("kbi"), None);
    }
}
