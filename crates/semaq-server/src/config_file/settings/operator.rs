//! Decentralized auth settings (`operator`, `resolver`, `resolver_preload`, `system_account`) and
//! nkey users, as nats-server reads them. The JWTs are kept as text; the server decodes and
//! verifies them when it starts (a lone operator's is read here for the system account it names).

use nkeys::{KeyPair, KeyPairType};

use super::{block, invalid, string, Mapper};
use crate::auth::jwt::{self, Claims, OperatorNats};
use crate::config_file::syntax::{Kind, Value};
use crate::config_file::{ConfigError, Location};
use crate::limits;
use crate::options::{NkeyUser, OperatorOptions, GLOBAL_ACCOUNT};

/// What the top-level keys said, put together once the whole file is read.
#[derive(Debug, Default)]
pub(super) struct Pending {
    operators: Vec<String>,
    operator_at: Option<Location>,
    resolver_at: Option<Location>,
    preload: Vec<(String, String)>,
    preload_at: Option<Location>,
    system_account: Option<(String, Location)>,
}

impl Mapper<'_> {
    /// `operator: <JWT file or the JWT itself>`, or an array of them.
    pub(super) fn operator(&mut self, key: &str, value: &Value) -> Result<(), ConfigError> {
        let items = match &value.kind {
            Kind::Array(items) => items.iter().collect(),
            _ => vec![value],
        };
        for item in items {
            let text = string(key, item)?;
            let jwt = if text.starts_with("eyJ") { text } else { read_jwt_file(&text, item)? };
            self.trust.operators.push(jwt);
        }
        self.trust.operator_at = Some(value.at.clone());
        Ok(())
    }

    /// `resolver: MEMORY`, the one resolver SemaQ has: accounts come from `resolver_preload`.
    pub(super) fn resolver(&mut self, value: &Value) -> Result<(), ConfigError> {
        let memory = matches!(&value.kind, Kind::String(text) if text.eq_ignore_ascii_case("MEMORY"));
        if !memory {
            let message = "only \"resolver: MEMORY\" (with resolver_preload) is supported by SemaQ".to_string();
            return Err(invalid(&value.at, message));
        }
        self.trust.resolver_at = Some(value.at.clone());
        Ok(())
    }

    /// `resolver_preload { <account public key>: <account JWT> }`.
    pub(super) fn resolver_preload(&mut self, value: &Value) -> Result<(), ConfigError> {
        for entry in block("resolver_preload", value)?.entries.iter().filter(|entry| !entry.referenced) {
            let jwt = string(&format!("resolver_preload.{}", entry.key), &entry.value)?;
            if !is_key(&entry.key, KeyPairType::Account) {
                let message = format!("resolver_preload key {:?} is not a public account nkey", entry.key);
                return Err(invalid(&entry.at, message));
            }
            if self.trust.preload.len() >= limits::PRELOADED_ACCOUNTS_MAX {
                let message = format!("resolver_preload lists more than {} accounts", limits::PRELOADED_ACCOUNTS_MAX);
                return Err(invalid(&entry.at, message));
            }
            self.trust.preload.push((entry.key.clone(), jwt));
        }
        self.trust.preload_at = Some(value.at.clone());
        Ok(())
    }

    /// `system_account: <account public key>` in operator mode, an account's name otherwise.
    pub(super) fn system_account(&mut self, value: &Value) -> Result<(), ConfigError> {
        self.trust.system_account = Some((string("system_account", value)?, value.at.clone()));
        Ok(())
    }

    /// A user with `nkey` (and no name or password), or `None` for a user of another kind.
    pub(super) fn nkey_user(&mut self, path: &str, item: &Value) -> Result<Option<NkeyUser>, ConfigError> {
        let map = block(path, item)?;
        let Some(nkey_entry) = map.entries.iter().find(|entry| entry.key.eq_ignore_ascii_case("nkey")) else {
            return Ok(None);
        };
        let nkey = string(&format!("{path}.nkey"), &nkey_entry.value)?;
        if !is_key(&nkey, KeyPairType::User) {
            return Err(invalid(&nkey_entry.value.at, format!("not a valid public nkey for a user: {nkey:?}")));
        }
        let mut user = NkeyUser { nkey: nkey.clone(), permissions: None };
        for entry in &map.entries {
            match entry.key.to_ascii_lowercase().as_str() {
                "nkey" => {}
                "permission" | "permissions" | "authorization" => {
                    user.permissions = Some(self.permissions(&format!("{path}.permissions"), &entry.value)?)
                }
                "user" | "username" | "pass" | "password" => {
                    let message = format!("a user in \"{path}\" has both an nkey and a {}", entry.key);
                    return Err(invalid(&entry.at, message));
                }
                _ => self.unknown(entry, path),
            }
        }
        self.user_sites.push((nkey, item.at.clone()));
        Ok(Some(user))
    }

    /// Puts the decentralized auth settings together; they need an operator, and one needs them.
    pub(super) fn finish_operator(&mut self) -> Result<(), ConfigError> {
        let pending = std::mem::take(&mut self.trust);
        let Some(operator_at) = pending.operator_at else {
            let stray = pending.resolver_at.or(pending.preload_at);
            if let Some(at) = stray {
                return Err(invalid(&at, "resolver and resolver_preload need an operator".to_string()));
            }
            return self.finish_system_account(pending.system_account);
        };
        if pending.resolver_at.is_none() {
            return Err(invalid(&operator_at, "operators require an account resolver to be configured".to_string()));
        }
        let named = pending.system_account.or_else(|| match pending.operators.as_slice() {
            [operator] => operator_system_account(operator).map(|key| (key, operator_at.clone())),
            _ => None,
        });
        if let Some((key, at)) = &named {
            // nats-server looks the system account up when it starts and stops without it.
            if !pending.preload.iter().any(|(preloaded, _)| preloaded == key) {
                return Err(invalid(at, "error resolving system account: account missing".to_string()));
            }
        }
        self.trust.operator_at = Some(operator_at);
        let system_account = named.map(|(key, _)| key);
        self.options.auth.operator =
            Some(OperatorOptions { jwts: pending.operators, preload: pending.preload, system_account });
        Ok(())
    }

    /// Outside operator mode `system_account` names a config account (or `$G`), as nats-server
    /// requires; nats-server refuses JetStream in the system account.
    fn finish_system_account(&mut self, named: Option<(String, Location)>) -> Result<(), ConfigError> {
        let Some((name, at)) = named else { return Ok(()) };
        let account = self.options.accounts.iter().find(|account| account.name == name);
        if account.is_none() && name != GLOBAL_ACCOUNT {
            return Err(invalid(&at, "error resolving system account: account missing".to_string()));
        }
        self.options.system_account = Some(name);
        Ok(())
    }

    /// Operator mode takes its users from JWTs only, as nats-server requires.
    pub(super) fn check_operator(&self) -> Result<(), ConfigError> {
        let Some(at) = &self.trust.operator_at else { return Ok(()) };
        let auth = &self.options.auth;
        let message = if !self.options.accounts.is_empty() {
            "operators do not allow Accounts to be configured directly"
        } else if !auth.users.is_empty() || !auth.nkeys.is_empty() || auth.token.is_some() {
            "operators do not allow users to be configured directly"
        } else {
            return Ok(());
        };
        Err(invalid(at, message.to_string()))
    }
}

fn is_key(text: &str, kind: KeyPairType) -> bool {
    KeyPair::from_public_key(text).is_ok_and(|pair| pair.key_pair_type() == kind)
}

/// The system account a lone operator's JWT names, which nats-server takes when the config names
/// none; a JWT that does not decode names none here (the server refuses it when it starts).
fn operator_system_account(text: &str) -> Option<String> {
    let claims: Claims<OperatorNats> = jwt::decode(jwt::undecorate(text), limits::ACCOUNT_JWT_BYTES_MAX).ok()?;
    Some(claims.nats.system_account).filter(|key| !key.is_empty())
}

/// The JWT in an operator file: the bare JWT, or nsc's decorated form.
fn read_jwt_file(path: &str, value: &Value) -> Result<String, ConfigError> {
    let unreadable = |why: String| invalid(&value.at, format!("cannot read operator JWT file {path:?}: {why}"));
    let size = std::fs::metadata(path).map_err(|error| unreadable(error.to_string()))?.len();
    if size > limits::ACCOUNT_JWT_BYTES_MAX as u64 {
        return Err(unreadable(format!("larger than {} bytes", limits::ACCOUNT_JWT_BYTES_MAX)));
    }
    let text = std::fs::read_to_string(path).map_err(|error| unreadable(error.to_string()))?;
    let mut lines = text.lines().map(str::trim).filter(|line| !line.is_empty());
    let jwt = match text.contains("-----BEGIN") {
        true => lines.skip_while(|line| !line.starts_with("-----BEGIN")).nth(1),
        false => lines.next(),
    };
    jwt.filter(|jwt| jwt.starts_with("eyJ")).map(str::to_string).ok_or_else(|| unreadable("no JWT in it".to_string()))
}
