//! Virtual keys: issued by the gateway, stored in KV only as a SHA-256 hash of the secret.
//! Also the tenant records (`tenant:<name>`) that hold a tenant's own rate limits.

pub use limiter::limits::Limits;
use serde::{Deserialize, Serialize, Serializer};
use sha2::{Digest, Sha256};

pub const KEY_PREFIX: &str = "key:";
pub const TENANT_PREFIX: &str = "tenant:";
/// Hex digits of the key's hash that name its limiter object (`scope:key:<id>`).
pub const KEY_ID_LEN: usize = 16;

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
    /// The key's own rate limits (`rpm`, `tpm`, `rpd`, …, the route table's shape; breaker
    /// fields do not apply to a key). Absent: the key adds no limit and no limiter call.
    #[serde(default, skip_serializing_if = "Option::is_none", serialize_with = "scope_limits")]
    pub limits: Option<Limits>,
    /// Never stored: set when the record is read, the first [`KEY_ID_LEN`] hex digits of the
    /// key's hash, which name its limiter object.
    #[serde(skip)]
    pub id: String,
}

/// The KV value under `tenant:<name>`: what applies to every key of the tenant together.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TenantRecord {
    /// The tenant's rate limits, shared by all its keys (same shape as a key's).
    #[serde(default, skip_serializing_if = "Option::is_none", serialize_with = "scope_limits")]
    pub limits: Option<Limits>,
}

pub fn tenant_kv_name(tenant: &str) -> String {
    format!("{TENANT_PREFIX}{tenant}")
}

impl TenantRecord {
    /// Parses and validates; every problem found is returned.
    pub fn parse(text: &str) -> Result<TenantRecord, Vec<String>> {
        crate::config::parse_checked(text, |r: &TenantRecord| {
            r.limits.as_ref().map(Limits::problems).unwrap_or_default()
        })
    }
}

/// The limits a scope (key or tenant) enforces, if any: limits that set no bucket and no
/// concurrency cap (`{}`) enforce nothing and cost no limiter call.
pub fn enforced(limits: Option<&Limits>) -> Option<&Limits> {
    limits.filter(|l| l.caps().iter().any(|(_, cap)| cap.is_some()))
}

/// Writes a scope's limits with only what applies to a scope (no breaker, no pauses), so the
/// stored record shows just what an admin set.
fn scope_limits<S: Serializer>(limits: &Option<Limits>, out: S) -> Result<S::Ok, S::Error> {
    let Some(l) = limits else { return out.serialize_none() };
    let mut fields = serde_json::Map::new();
    for (name, value) in l.caps() {
        if let Some(v) = value {
            fields.insert(name.to_string(), v.into());
        }
    }
    if l.reservation_ttl_ms != Limits::default().reservation_ttl_ms {
        fields.insert("reservation_ttl_ms".to_string(), l.reservation_ttl_ms.into());
    }
    fields.serialize(out)
}

/// Limits as `rpm=3 tpm=1000`, for admin listings; `-` when none.
pub fn describe_limits(limits: Option<&Limits>) -> String {
    let Some(l) = enforced(limits) else { return "-".to_string() };
    l.caps().iter().filter_map(|(name, v)| v.map(|v| format!("{name}={v}"))).collect::<Vec<_>>().join(" ")
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
    [KEY_PREFIX, &hash_key(secret)].concat()
}

/// The id that names a key's limiter, from its KV name (`key:<hash>`): a prefix of the hash.
pub fn key_id(kv_name: &str) -> String {
    let hash = kv_name.strip_prefix(KEY_PREFIX).unwrap_or(kv_name);
    hash.chars().take(KEY_ID_LEN).collect()
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
        assert!(serde_json::from_str::<KeyRecord>(r#"{"tenant":"t","app":"a","id":"x"}"#).is_err(), "never stored");
        assert!(serde_json::from_str::<KeyRecord>(r#"{"tenant":"t","app":"a","limits":{"rpn":3}}"#).is_err());
    }

    #[test]
    fn key_limits_parse_and_the_id_is_never_stored() {
        let mut r: KeyRecord =
            serde_json::from_str(r#"{"tenant":"t","app":"a","limits":{"rpm":3,"tpm":1000}}"#).unwrap();
        let limits = r.limits.clone().unwrap();
        assert_eq!((limits.rpm, limits.tpm, limits.rpd), (Some(3), Some(1_000), None));
        assert_eq!(enforced(r.limits.as_ref()), Some(&limits));
        r.id = key_id(&kv_name("abc"));
        assert_eq!(r.id, "ba7816bf8f01cfea");
        let text = serde_json::to_string(&r).unwrap();
        assert!(!text.contains("ba7816") && text.contains(r#""limits":{"rpm":3,"tpm":1000}"#), "{text}");
        assert!(!serde_json::to_string(&record()).unwrap().contains("limits"), "no limits, no field");
        assert_eq!(record().limits, None);
    }

    #[test]
    fn tenant_records_parse_strictly() {
        let t = TenantRecord::parse(r#"{"limits":{"rpm":6,"tpm":50000}}"#).unwrap();
        assert_eq!(t.limits.as_ref().and_then(|l| l.rpm), Some(6));
        assert_eq!(serde_json::to_string(&t).unwrap(), r#"{"limits":{"rpm":6,"tpm":50000}}"#, "only what was set");
        assert_eq!(describe_limits(t.limits.as_ref()), "rpm=6 tpm=50000");
        assert_eq!(TenantRecord::parse("{}").unwrap(), TenantRecord::default());
        assert!(TenantRecord::parse(r#"{"limits":{"rpm":6},"weight":2}"#).is_err());
        assert!(TenantRecord::parse(r#"{"limits":{"rpm":-1}}"#).is_err());
        assert!(TenantRecord::parse(r#"{"limits":{"reservation_ttl_ms":0}}"#).is_err());
        assert_eq!(tenant_kv_name("acme"), "tenant:acme");
    }

    #[test]
    fn only_limits_that_set_something_are_enforced() {
        let none = Limits::default();
        assert_eq!(enforced(Some(&none)), None, "{{}} limits nothing: no limiter call");
        assert_eq!(enforced(None), None);
        assert_eq!(describe_limits(Some(&none)), "-");
        let cap = Limits { max_concurrent: Some(2), ..Limits::default() };
        assert!(enforced(Some(&cap)).is_some());
        let rpd = Limits { rpd: Some(100), ..Limits::default() };
        assert_eq!(describe_limits(Some(&rpd)), "rpd=100");
    }
}
