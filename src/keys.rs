//! Virtual keys: issued by the gateway, stored in KV only as a SHA-256 hash of the secret.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub const KEY_PREFIX: &str = "key:";

/// What a virtual key grants; the KV value under `key:<sha256 hex of the key>`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct KeyRecord {
    pub tenant: String,
    pub app: String,
    #[serde(default = "default_env")]
    pub env: String,
    /// Logical models this key may call; `None` allows every model.
    #[serde(default)]
    pub models: Option<Vec<String>>,
    #[serde(default)]
    pub revoked: bool,
    /// Unix milliseconds after which the key is refused.
    #[serde(default)]
    pub expires_at_ms: Option<u64>,
    /// Shown in `keys list`; never the secret.
    #[serde(default)]
    pub label: Option<String>,
    #[serde(default)]
    pub created_at_ms: Option<u64>,
}

fn default_env() -> String {
    "prod".to_string()
}

/// Why a presented key is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyRefusal {
    Unknown,
    Revoked,
    Expired,
    ModelNotAllowed,
}

pub fn hash_key(secret: &str) -> String {
    let digest = Sha256::digest(secret.as_bytes());
    let mut out = String::with_capacity(64);
    for byte in digest {
        out.push(char::from_digit((byte >> 4) as u32, 16).unwrap_or('0'));
        out.push(char::from_digit((byte & 0xf) as u32, 16).unwrap_or('0'));
    }
    out
}

pub fn kv_name(secret: &str) -> String {
    format!("{KEY_PREFIX}{}", hash_key(secret))
}

/// The bearer token from an `Authorization` header, if well-formed.
pub fn bearer(header: Option<&str>) -> Option<&str> {
    let value = header?.trim();
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

impl KeyRecord {
    pub fn check(&self, now_ms: u64) -> Result<(), KeyRefusal> {
        if self.revoked {
            return Err(KeyRefusal::Revoked);
        }
        match self.expires_at_ms {
            Some(at) if now_ms >= at => Err(KeyRefusal::Expired),
            _ => Ok(()),
        }
    }

    pub fn allows_model(&self, model: &str) -> bool {
        self.models.as_ref().is_none_or(|m| m.iter().any(|x| x == model))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_is_sha256_hex() {
        assert_eq!(hash_key("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        assert_eq!(kv_name("abc").len(), 4 + 64);
    }

    #[test]
    fn bearer_parsing() {
        assert_eq!(bearer(Some("Bearer gk_1")), Some("gk_1"));
        assert_eq!(bearer(Some("bearer   gk_1 ")), Some("gk_1"));
        assert_eq!(bearer(Some("Basic abc")), None);
        assert_eq!(bearer(Some("Bearer ")), None);
        assert_eq!(bearer(None), None);
    }

    fn record() -> KeyRecord {
        serde_json::from_str(r#"{"tenant":"t","app":"a"}"#).unwrap()
    }

    #[test]
    fn revoked_and_expired_are_refused() {
        let mut r = record();
        assert_eq!(r.env, "prod");
        assert_eq!(r.check(5), Ok(()));
        r.expires_at_ms = Some(10);
        assert_eq!(r.check(9), Ok(()));
        assert_eq!(r.check(10), Err(KeyRefusal::Expired));
        r.revoked = true;
        assert_eq!(r.check(0), Err(KeyRefusal::Revoked));
    }

    #[test]
    fn model_allow_list() {
        let mut r = record();
        assert!(r.allows_model("anything"));
        r.models = Some(vec!["chat".into()]);
        assert!(r.allows_model("chat"));
        assert!(!r.allows_model("code"));
    }

    #[test]
    fn unknown_fields_rejected() {
        assert!(serde_json::from_str::<KeyRecord>(r#"{"tenant":"t","app":"a","admin":true}"#).is_err());
    }
}
