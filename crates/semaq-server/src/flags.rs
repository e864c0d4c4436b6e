//! TEMPORARY (replaced by the config branch).
use std::path::PathBuf;
use crate::options::Options;
#[derive(Debug, thiserror::Error)]
pub enum FlagError { #[error("bad flag {0}")] Bad(String) }
#[derive(Debug, Default)]
pub struct Flags { pub config_file: Option<PathBuf>, pub help: bool, pub version: bool, port: Option<u16>, http: Option<u16>, sd: Option<PathBuf> }
pub fn usage() -> &'static str { "usage" }
pub fn parse(args: &[String]) -> Result<Flags, FlagError> {
    let mut f = Flags::default(); let mut i = 0;
    while i < args.len() { let v = args.get(i+1).cloned().unwrap_or_default();
        match args[i].as_str() { "-p" => { f.port = Some(if v == "-1" {0} else {v.parse().map_err(|_| FlagError::Bad(v.clone()))?}); i+=1 }
        "-m" => { f.http = Some(if v == "-1" {0} else {v.parse().map_err(|_| FlagError::Bad(v.clone()))?}); i+=1 }
        "-sd" => { f.sd = Some(v.into()); i+=1 } "-c" => { f.config_file = Some(v.into()); i+=1 } "-js" => {} "-a" => { i+=1 }
        other => return Err(FlagError::Bad(other.into())) } i+=1 }
    Ok(f)
}
impl Flags { pub fn apply(&self, o: &mut Options) { if let Some(p) = self.port { o.port = p; o.http_port = None; } if let Some(p) = self.http { o.http_port = Some(p) } if let Some(d) = &self.sd { o.store_dir = d.clone() } } }
