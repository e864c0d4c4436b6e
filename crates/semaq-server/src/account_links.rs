//! Imports at work: the checked [`crate::imports`] of every account put in place on the bus as
//! internal subscriptions ([`forward`]), with the reply mappings of service imports
//! ([`responses`]) and their latency tracking ([`tracking`]); imports whose activation expires
//! end then ([`expiry`]).

pub mod expiry;
pub mod forward;
pub mod responses;
pub mod tracking;

use std::sync::Arc;

use crate::bus::Bus;
use crate::imports::{resolve, AccountLinks, ImportError};
use crate::mappings::AccountMappings;
use responses::Responses;

/// Why the server cannot start with the accounts' imports.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A config account's import or export does not hold.
    #[error("account {account:?}: {error}")]
    Import {
        /// The account that lists it.
        account: String,
        /// What is wrong.
        error: ImportError,
    },
    /// The imports could not be put in place.
    #[error(transparent)]
    Install(#[from] forward::InstallError),
    /// Imports' activations expire but there is no runtime to end them on.
    #[error("import activations expire but no runtime is running to end them")]
    NoRuntime,
}

/// Checks the imports of the config's accounts (an error stops the server, as in nats-server)
/// and of the JWT accounts (an error leaves that import out, logged, as nats-server does with a
/// JWT), then puts them in place on `bus`, naming the server `server` in client details; a
/// service request takes the exporting account's `mappings` as it enters it. Returns the
/// response table of service imports, or `None` when no account imports anything (nothing is
/// put in place).
pub fn start(
    bus: &Bus,
    options: &crate::options::Options,
    trust: Option<&crate::auth::Trust>,
    server: &str,
    mappings: &AccountMappings,
) -> Result<Option<Arc<Responses>>, StartError> {
    let config =
        options.accounts.iter().map(|a| AccountLinks { name: &a.name, exports: &a.exports, imports: &a.imports });
    let jwt = trust.into_iter().flat_map(|trust| trust.account_links());
    let accounts: Vec<AccountLinks<'_>> = config.chain(jwt).collect();
    if accounts.iter().all(|account| account.imports.is_empty()) {
        return Ok(None);
    }
    let (links, errors) = resolve(&accounts);
    for ((account, _), error) in errors {
        if options.accounts.iter().any(|a| a.name == account) {
            return Err(StartError::Import { account, error });
        }
        tracing::warn!(%account, %error, "Account import not added");
    }
    let (responses, expiries) = forward::install(bus, &links, server, mappings)?;
    if !expiries.start() {
        return Err(StartError::NoRuntime);
    }
    Ok(Some(responses))
}
