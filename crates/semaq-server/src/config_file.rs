//! nats-server's configuration file format, read into [`Options`].
//!
//! The syntax (in `syntax.rs`) is nats-server's: `key: value`, `key = value` or `key value`; blocks
//! `name { ... }`; arrays `[a, b]` split by commas or new lines; `#` and `//` comments; quoted and bare
//! strings; numbers with size suffixes; booleans `true/false/yes/no/on/off`; `include 'file'` relative
//! to the including file; `$VAR` from an earlier key in an enclosing block or from the environment.
//!
//! The settings (in `settings.rs`) are matched case-insensitively. A key SemaQ does not know is a warning,
//! never an error and never misread; a known key with a wrong type or an out-of-range value is an error
//! with its line and column. Loading is all-or-nothing: on error the options are left untouched.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::options::{Given, Options};

mod settings;
mod syntax;

/// Where something is in a config file: the file (absent for text given directly), 1-based line and column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The file, when the text came from one.
    pub file: Option<Arc<Path>>,
    /// Line, from 1.
    pub line: u32,
    /// Column in characters, from 1.
    pub column: u32,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(file) = &self.file {
            write!(f, "{}: ", file.display())?;
        }
        write!(f, "line {}, column {}", self.line, self.column)
    }
}

/// A config file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file itself could not be read.
    #[error("cannot read config file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file named by `include` could not be read.
    #[error("{at}: cannot read included file {}: {source}", path.display())]
    Include {
        /// The `include` line.
        at: Location,
        /// The file, resolved against the including file's directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The text is not valid configuration syntax.
    #[error("{at}: {message}")]
    Syntax {
        /// Where the problem is.
        at: Location,
        /// What was expected.
        message: String,
    },
    /// A `$NAME` defined neither earlier in an enclosing block nor in the environment.
    #[error("{at}: variable ${name} is defined neither earlier in the file nor in the environment")]
    UndefinedVariable {
        /// The reference.
        at: Location,
        /// The name, without `$`.
        name: String,
    },
    /// A setting has the wrong type, a value out of range, or contradicts another setting.
    #[error("{at}: {message}")]
    Invalid {
        /// The offending value.
        at: Location,
        /// What was expected.
        message: String,
    },
}

/// What loading a config file produced besides the options it set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// Keys that were ignored and similar notes, each naming its line.
    pub warnings: Vec<String>,
    /// Listener settings the file gave, for `flags::finalize`.
    pub given: Given,
}

/// Loads a nats-server config file into `options`, returning warnings.
pub fn load(path: &Path, options: &mut Options) -> Result<Vec<String>, ConfigError> {
    load_report(path, options).map(|report| report.warnings)
}

/// Reads config text (includes relative to the current directory) into `options`, returning warnings.
pub fn parse_str(text: &str, options: &mut Options) -> Result<Vec<String>, ConfigError> {
    parse_str_report(text, options).map(|report| report.warnings)
}

/// Like [`load`], also telling which listener settings the file gave.
pub fn load_report(path: &Path, options: &mut Options) -> Result<LoadReport, ConfigError> {
    let text =
        std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
    let base_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    read(&text, Some(Arc::from(path)), &base_dir, options, &process_env)
}

/// Like [`parse_str`], also telling which listener settings the text gave.
pub fn parse_str_report(text: &str, options: &mut Options) -> Result<LoadReport, ConfigError> {
    read(text, None, Path::new(""), options, &process_env)
}

fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// Parses and maps in one go, committing to `options` only when both succeed.
fn read(
    text: &str,
    file: Option<Arc<Path>>,
    base_dir: &Path,
    options: &mut Options,
    env: syntax::EnvLookup<'_>,
) -> Result<LoadReport, ConfigError> {
    let tree = syntax::parse(text, file.clone(), base_dir, env)?;
    let mut next = options.clone();
    let report = settings::apply(&tree, file, &mut next)?;
    *options = next;
    Ok(report)
}

#[cfg(test)]
mod tests;
