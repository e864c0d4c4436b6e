//! TEMPORARY (replaced by the config branch).
use std::path::Path;
use crate::options::Options;
#[derive(Debug, thiserror::Error)]
pub enum ConfigError { #[error("unsupported")] Unsupported }
pub fn load(_path: &Path, _options: &mut Options) -> Result<Vec<String>, ConfigError> { Err(ConfigError::Unsupported) }
