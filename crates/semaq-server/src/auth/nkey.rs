//! Nkeys: public keys in nats' text form (`U...`, `A...`, `O...`) and the signatures clients make with them.

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use nkeys::{KeyPair, KeyPairType};

use crate::limits;

/// The role a public nkey must have, told by its first letter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `O...`: signs accounts.
    Operator,
    /// `A...`: signs users.
    Account,
    /// `U...`: a client.
    User,
}

/// Parses `public_key`, which must be a well-formed nkey (checksum included) of `role`.
pub fn public_key(public_key: &str, role: Role) -> Option<KeyPair> {
    let pair = KeyPair::from_public_key(public_key).ok()?;
    let matches = matches!(
        (pair.key_pair_type(), role),
        (KeyPairType::Operator, Role::Operator)
            | (KeyPairType::Account, Role::Account)
            | (KeyPairType::User, Role::User)
    );
    matches.then_some(pair)
}

/// Whether `public_key` is a well-formed nkey of `role`.
pub fn is_public_key(text: &str, role: Role) -> bool {
    public_key(text, role).is_some()
}

/// Whether `signature` (base64url without padding, or standard base64 as nats-server also takes)
/// is the Ed25519 signature of `message` by `signer`.
pub fn verifies(signer: &KeyPair, message: &[u8], signature: &str) -> bool {
    if signature.len() > limits::NKEY_SIGNATURE_TEXT_BYTES_MAX {
        return false;
    }
    let Some(bytes) = URL_SAFE_NO_PAD.decode(signature).or_else(|_| STANDARD.decode(signature)).ok() else {
        return false;
    };
    signer.verify(message, &bytes).is_ok()
}

/// Whether the client proved it holds the user nkey `user` by signing the INFO `nonce`.
pub fn signed_nonce(user: &str, nonce: Option<&str>, signature: Option<&str>) -> bool {
    let (Some(nonce), Some(signature), Some(pair)) = (nonce, signature, public_key(user, Role::User)) else {
        return false;
    };
    verifies(&pair, nonce.as_bytes(), signature)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_of_the_nonce_by_the_user_verifies_and_nothing_else_does() {
        let user = KeyPair::new_user();
        let other = KeyPair::new_user();
        let signature = |pair: &KeyPair, text: &str| URL_SAFE_NO_PAD.encode(pair.sign(text.as_bytes()).unwrap());
        let public = user.public_key();
        assert!(signed_nonce(&public, Some("nonce1"), Some(&signature(&user, "nonce1"))));
        let standard = STANDARD.encode(user.sign(b"nonce1").unwrap());
        assert!(signed_nonce(&public, Some("nonce1"), Some(&standard)), "nats-server takes standard base64 too");
        assert!(!signed_nonce(&public, Some("nonce2"), Some(&signature(&user, "nonce1"))), "another nonce");
        assert!(!signed_nonce(&public, Some("nonce1"), Some(&signature(&other, "nonce1"))), "another key");
        assert!(!signed_nonce(&public, Some("nonce1"), Some("%%%not base64")));
        assert!(!signed_nonce(&public, Some("nonce1"), None));
        assert!(!signed_nonce(&public, None, Some(&signature(&user, "nonce1"))));
        assert!(!signed_nonce(&KeyPair::new_account().public_key(), Some("n"), Some(&signature(&user, "n"))));
        assert!(!signed_nonce("UNOTAKEY", Some("n"), Some(&signature(&user, "n"))));
    }
}
