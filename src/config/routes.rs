//! The route table admins keep in KV: logical models → ordered chains of deployments.

use crate::config::policy::{CachePolicy, RetryPolicy};
use crate::config::selection::{self, Candidate};
use serde::Deserialize;
use std::collections::BTreeMap;

pub const ROUTES_KV_KEY: &str = "routes";
pub const SUPPORTED_VERSION: u32 = 1;

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RouteTable {
    pub version: u32,
    pub deployments: BTreeMap<String, Deployment>,
    pub models: BTreeMap<String, LogicalModel>,
    /// Other names clients send for a logical model (e.g. the vendor ids Claude Code sends): an
    /// exact name, or a prefix pattern ending in `*` (`claude-sonnet-4-5*`) → a logical model.
    #[serde(default)]
    pub aliases: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LogicalModel {
    /// Deployments in the order they are tried; entries sharing a `priority` split traffic by weight.
    pub chain: Vec<ChainEntry>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub retry: RetryPolicy,
    /// Total deadline for a request (all attempts); `x-gateway-timeout-ms` may lower or raise it up to `max_timeout_ms`.
    #[serde(default = "LogicalModel::default_timeout")]
    pub timeout_ms: u64,
    #[serde(default = "LogicalModel::default_max_timeout")]
    pub max_timeout_ms: u64,
    /// Capabilities this model promises; the validator checks some deployment in the chain has each.
    #[serde(default)]
    pub requires: Vec<String>,
    /// Exact-response cache policy; off unless enabled.
    #[serde(default)]
    pub cache: CachePolicy,
}

impl LogicalModel {
    fn default_timeout() -> u64 {
        300_000
    }
    fn default_max_timeout() -> u64 {
        900_000
    }

    /// The deadline for one request, from the route default and a bounded client override.
    pub fn deadline_ms(&self, requested: Option<u64>) -> u64 {
        requested.map(|r| r.clamp(1, self.max_timeout_ms)).unwrap_or(self.timeout_ms)
    }
}

/// A chain entry: a bare deployment id (its own priority tier, in list order) or a weighted entry.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum ChainEntry {
    Id(String),
    Weighted(WeightedEntry),
}

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct WeightedEntry {
    pub deployment: String,
    #[serde(default = "one")]
    pub weight: u32,
    /// Lower is tried first; defaults to the entry's position in the chain.
    #[serde(default)]
    pub priority: Option<u32>,
}

fn one() -> u32 {
    1
}

impl ChainEntry {
    pub fn deployment(&self) -> &str {
        match self {
            ChainEntry::Id(id) => id,
            ChainEntry::Weighted(w) => &w.deployment,
        }
    }

    fn candidate(&self, position: usize) -> Candidate<'_> {
        match self {
            ChainEntry::Id(id) => Candidate { id, priority: position as u32, weight: 1 },
            ChainEntry::Weighted(w) => {
                Candidate { id: &w.deployment, priority: w.priority.unwrap_or(position as u32), weight: w.weight }
            }
        }
    }
}

pub const KNOWN_CAPABILITIES: [&str; 3] = ["tools", "json_mode", "vision"];

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ProviderKind {
    /// OpenAI and every vendor that speaks its chat-completions format (DeepSeek, Qwen, GLM, vLLM).
    Openai,
    Anthropic,
}

impl ProviderKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Openai => "openai",
            ProviderKind::Anthropic => "anthropic",
        }
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Deployment {
    pub provider: ProviderKind,
    /// Vendor API root, e.g. `https://api.openai.com/v1` or `https://api.anthropic.com/v1`.
    pub base_url: String,
    /// The vendor's real model name.
    pub model: String,
    /// Name of the Worker secret (or `.dev.vars` entry) holding the vendor key.
    pub credential: String,
    #[serde(default)]
    pub auth: AuthScheme,
    #[serde(default)]
    pub quirks: Quirks,
    #[serde(default)]
    pub capabilities: Capabilities,
    /// Limits for the deployment's limiter (requests/tokens per minute, breaker). Absent, the
    /// deployment still has the default breaker; only `"breaker": {"enabled": false}` with no
    /// other limit takes it off the limiter altogether.
    #[serde(default)]
    pub limits: limiter::Limits,
    #[serde(default)]
    pub timeouts: Timeouts,
    /// Key into the price table.
    #[serde(default)]
    pub price: Option<String>,
    /// Output tokens requested when the client sets no max (Anthropic requires one).
    #[serde(default)]
    pub default_max_tokens: Option<u32>,
    /// The vendor APIs this deployment accepts; empty means its provider's usual ones (chat and
    /// embeddings for `openai`, Messages for `anthropic`). `responses` turns on Responses pass-through.
    #[serde(default)]
    pub apis: Vec<Api>,
}

/// A vendor API a deployment may declare in `apis`.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Api {
    /// `POST /chat/completions` (or, for Anthropic, its Messages API behind chat translation).
    Chat,
    Embeddings,
    /// OpenAI's `POST /responses`.
    Responses,
}

impl Deployment {
    /// The limits its limiter object enforces, if it has anything to enforce.
    pub fn enforced_limits(&self) -> Option<&limiter::Limits> {
        Some(&self.limits).filter(|l| l.enforces_anything())
    }

    /// Whether the deployment accepts `api` natively.
    pub fn accepts(&self, api: Api) -> bool {
        if self.apis.is_empty() {
            return match self.provider {
                ProviderKind::Openai => matches!(api, Api::Chat | Api::Embeddings),
                ProviderKind::Anthropic => api == Api::Chat,
            };
        }
        self.apis.contains(&api)
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq, Eq, Default)]
#[serde(tag = "scheme", rename_all = "snake_case", deny_unknown_fields)]
pub enum AuthScheme {
    /// `Authorization: Bearer <key>` (OpenAI-compatible) or `x-api-key` (Anthropic).
    #[default]
    Default,
    Bearer,
    /// The key in a named header, e.g. Azure's `api-key`.
    Header {
        name: String,
    },
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum MaxTokensField {
    /// Send whichever field the client sent.
    #[default]
    AsSent,
    MaxTokens,
    MaxCompletionTokens,
}

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Quirks {
    #[serde(default)]
    pub max_tokens_field: MaxTokensField,
    /// Whether the vendor accepts `stream_options.include_usage`.
    #[serde(default = "yes")]
    pub stream_options: bool,
    /// Extra headers sent upstream, e.g. `anthropic-beta`.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    #[serde(default)]
    pub anthropic_version: Option<String>,
}

impl Default for Quirks {
    fn default() -> Self {
        Quirks {
            max_tokens_field: MaxTokensField::AsSent,
            stream_options: true,
            headers: BTreeMap::new(),
            anthropic_version: None,
        }
    }
}

fn yes() -> bool {
    true
}

/// What a deployment can do; `None` means unknown, which passes the capability gate.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq, Default)]
#[serde(deny_unknown_fields)]
pub struct Capabilities {
    pub tools: Option<bool>,
    pub json_mode: Option<bool>,
    pub vision: Option<bool>,
    pub context_window: Option<u32>,
    pub max_output: Option<u32>,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Timeouts {
    #[serde(default = "Timeouts::default_connect")]
    pub connect_ms: u64,
    #[serde(default = "Timeouts::default_first_token")]
    pub first_token_ms: u64,
    #[serde(default = "Timeouts::default_idle")]
    pub idle_ms: u64,
    #[serde(default = "Timeouts::default_total")]
    pub total_ms: u64,
}

impl Timeouts {
    fn default_connect() -> u64 {
        10_000
    }
    fn default_first_token() -> u64 {
        60_000
    }
    fn default_idle() -> u64 {
        60_000
    }
    fn default_total() -> u64 {
        600_000
    }
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect_ms: Self::default_connect(),
            first_token_ms: Self::default_first_token(),
            idle_ms: Self::default_idle(),
            total_ms: Self::default_total(),
        }
    }
}

/// A problem found in a route table, with the line it was found on where known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteTableError {
    pub line: Option<usize>,
    pub message: String,
}

impl std::fmt::Display for RouteTableError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            Some(line) => write!(f, "line {line}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl RouteTable {
    /// Parses and validates a table; every problem found is returned, not just the first.
    pub fn parse(text: &str) -> Result<RouteTable, Vec<RouteTableError>> {
        let table: RouteTable = serde_json::from_str(text)
            .map_err(|e| vec![RouteTableError { line: Some(e.line()), message: e.to_string() }])?;
        let mut problems = table.problems(text);
        problems.extend(table.alias_problems(text));
        if problems.is_empty() {
            Ok(table)
        } else {
            Err(problems)
        }
    }

    fn problems(&self, text: &str) -> Vec<RouteTableError> {
        let mut out = Vec::new();
        if self.version != SUPPORTED_VERSION {
            out.push(RouteTableError {
                line: line_of(text, "\"version\""),
                message: format!(
                    "unsupported version {} (this gateway reads version {SUPPORTED_VERSION})",
                    self.version
                ),
            });
        }
        for (name, model) in &self.models {
            if model.chain.is_empty() {
                out.push(RouteTableError {
                    line: line_of(text, &format!("\"{name}\"")),
                    message: format!("model '{name}' has an empty chain"),
                });
            }
            if let Err(problem) = model.cache.validate() {
                out.push(RouteTableError {
                    line: line_of(text, &format!("\"{name}\"")),
                    message: format!("model '{name}': {problem}"),
                });
            }
            for capability in &model.requires {
                let declared = |d: &Deployment| match capability.as_str() {
                    "tools" => d.capabilities.tools,
                    "json_mode" => d.capabilities.json_mode,
                    "vision" => d.capabilities.vision,
                    _ => None,
                };
                if !KNOWN_CAPABILITIES.contains(&capability.as_str()) {
                    out.push(RouteTableError {
                        line: line_of(text, &format!("\"{name}\"")),
                        message: format!("model '{name}' requires unknown capability '{capability}' (known: tools, json_mode, vision)"),
                    });
                } else if model
                    .chain
                    .iter()
                    .filter_map(|e| self.deployments.get(e.deployment()))
                    .all(|d| declared(d) == Some(false))
                {
                    out.push(RouteTableError {
                        line: line_of(text, &format!("\"{name}\"")),
                        message: format!(
                            "model '{name}' promises '{capability}' but no deployment in its chain supports it"
                        ),
                    });
                }
            }
            for id in model.chain.iter().map(ChainEntry::deployment) {
                if !self.deployments.contains_key(id) {
                    out.push(RouteTableError {
                        line: line_of(text, &format!("\"{name}\"")),
                        message: format!("model '{name}' names unknown deployment '{id}'"),
                    });
                }
            }
        }
        self.deployment_problems(text, &mut out);
        out
    }

    fn deployment_problems(&self, text: &str, out: &mut Vec<RouteTableError>) {
        for (id, d) in &self.deployments {
            if !(d.base_url.starts_with("https://") || d.base_url.starts_with("http://")) {
                out.push(RouteTableError {
                    line: line_of(text, &format!("\"{id}\"")),
                    message: format!("deployment '{id}' base_url must start with http:// or https://"),
                });
            }
            for problem in d.limits.problems() {
                out.push(RouteTableError {
                    line: line_of(text, &format!("\"{id}\"")),
                    message: format!("deployment '{id}' limits: {problem}"),
                });
            }
            if d.provider == ProviderKind::Anthropic && d.apis.iter().any(|a| *a != Api::Chat) {
                out.push(RouteTableError {
                    line: line_of(text, &format!("\"{id}\"")),
                    message: format!("deployment '{id}' is anthropic: its apis may only list \"chat\""),
                });
            }
            if d.credential.is_empty() || d.credential.contains(char::is_whitespace) {
                out.push(RouteTableError {
                    line: line_of(text, &format!("\"{id}\"")),
                    message: format!("deployment '{id}' credential must name a secret, e.g. OPENAI_API_KEY"),
                });
            }
        }
    }

    fn alias_problems(&self, text: &str) -> Vec<RouteTableError> {
        let mut out = Vec::new();
        for (alias, target) in &self.aliases {
            let line = line_of(text, &format!("\"{alias}\""));
            let message = if !self.models.contains_key(target) {
                format!("alias '{alias}' names unknown model '{target}'")
            } else if self.models.contains_key(alias) {
                format!("alias '{alias}' is also a model's name")
            } else if alias.trim_end_matches('*').contains('*') || alias == "*" || alias.is_empty() {
                format!("alias '{alias}': '*' may only end a non-empty prefix, e.g. 'claude-sonnet-4-5*'")
            } else {
                continue;
            };
            out.push(RouteTableError { line, message });
        }
        out
    }

    /// The logical model a client's model name means: the model itself, an exact alias, else the
    /// longest matching prefix pattern.
    pub fn resolve<'t>(&'t self, name: &'t str) -> Option<&'t str> {
        if let Some((model, _)) = self.models.get_key_value(name) {
            return Some(model);
        }
        if let Some(target) = self.aliases.get(name) {
            return Some(target);
        }
        self.aliases
            .iter()
            .filter_map(|(pattern, target)| Some((pattern.strip_suffix('*')?, target)))
            .filter(|(prefix, _)| name.starts_with(prefix))
            .max_by_key(|(prefix, _)| prefix.len())
            .map(|(_, target)| target.as_str())
    }

    /// The deployments to try for a logical model, in order (weights drawn from `random`, or
    /// stable per `session` for affinity).
    pub fn chain(&self, logical_model: &str, random: u64, session: Option<&str>) -> Option<Vec<(&str, &Deployment)>> {
        let model = self.models.get(logical_model)?;
        let candidates: Vec<Candidate> = model.chain.iter().enumerate().map(|(i, e)| e.candidate(i)).collect();
        let ordered = selection::order(&candidates, random, session);
        Some(
            ordered
                .into_iter()
                .filter_map(|id| self.deployments.get_key_value(id))
                .map(|(k, d)| (k.as_str(), d))
                .collect(),
        )
    }
}

fn line_of(text: &str, needle: &str) -> Option<usize> {
    text.find(needle).map(|at| text[..at].matches('\n').count() + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = r#"{
  "version": 1,
  "deployments": {
    "oa": {"provider": "openai", "base_url": "http://127.0.0.1:1/v1", "model": "gpt-4o-mini", "credential": "OPENAI_API_KEY"},
    "an": {"provider": "anthropic", "base_url": "https://api.anthropic.com/v1", "model": "claude-sonnet-4-5", "credential": "ANTHROPIC_API_KEY",
           "auth": {"scheme": "default"}, "capabilities": {"tools": true, "context_window": 200000}}
  },
  "models": {"chat": {"chain": ["oa", "an"]}}
}"#;

    #[test]
    fn parses_and_resolves_chain_in_order() {
        let t = RouteTable::parse(TABLE).unwrap();
        let chain = t.chain("chat", 0, None).unwrap();
        assert_eq!(chain.iter().map(|(id, _)| *id).collect::<Vec<_>>(), vec!["oa", "an"]);
        assert_eq!(chain[1].1.provider, ProviderKind::Anthropic);
        assert_eq!(chain[1].1.capabilities.context_window, Some(200000));
        assert_eq!(chain[0].1.timeouts, Timeouts::default());
        assert!(chain[0].1.quirks.stream_options);
        assert!(t.chain("nope", 0, None).is_none());
    }

    #[test]
    fn aliases_resolve_exact_then_longest_prefix() {
        let with = |aliases: &str| {
            TABLE.replace(
                "\"models\": {",
                &format!("\"aliases\": {aliases}, \"models\": {{\"other\": {{\"chain\": [\"an\"]}}, "),
            )
        };
        let t = RouteTable::parse(&with(
            r#"{"claude-sonnet-4-5*": "chat", "claude-sonnet-4-5-2025*": "other", "claude-opus-4-1": "other", "claude-*": "chat"}"#,
        ))
        .unwrap();
        assert_eq!(t.resolve("chat"), Some("chat"));
        assert_eq!(t.resolve("claude-opus-4-1"), Some("other"));
        assert_eq!(t.resolve("claude-opus-4-1-20250805"), Some("chat"), "exact alias only, then claude-*");
        assert_eq!(t.resolve("claude-sonnet-4-5"), Some("chat"));
        assert_eq!(t.resolve("claude-sonnet-4-5-20250929"), Some("other"), "the longest prefix wins");
        assert_eq!(t.resolve("gpt-4o"), None);
        assert!(RouteTable::parse(TABLE).unwrap().aliases.is_empty());
    }

    #[test]
    fn bad_aliases_are_refused() {
        let with = |aliases: &str| TABLE.replace("\"models\": {", &format!("\"aliases\": {aliases}, \"models\": {{"));
        let errs =
            RouteTable::parse(&with(r#"{"a": "ghost", "chat": "chat", "b*c*": "chat", "*": "chat"}"#)).unwrap_err();
        let messages: Vec<&str> = errs.iter().map(|e| e.message.as_str()).collect();
        assert_eq!(errs.len(), 4, "{messages:?}");
        assert!(messages.iter().any(|m| m.contains("unknown model 'ghost'")));
        assert!(messages.iter().any(|m| m.contains("'chat' is also a model's name")));
        assert!(messages.iter().any(|m| m.contains("'b*c*'")));
        assert!(messages.iter().any(|m| m.starts_with("alias '*'")));
    }

    #[test]
    fn rejects_unknown_fields_with_line() {
        let bad = TABLE.replace("\"provider\": \"openai\",", "\"provider\": \"openai\", \"colour\": 1,");
        let errs = RouteTable::parse(&bad).unwrap_err();
        assert_eq!(errs[0].line, Some(4));
        assert!(errs[0].message.contains("colour"), "{}", errs[0].message);
    }

    #[test]
    fn reports_every_reference_problem() {
        let bad = TABLE.replace("[\"oa\", \"an\"]", "[\"oa\", \"ghost\"]").replace("\"version\": 1", "\"version\": 9");
        let errs = RouteTable::parse(&bad).unwrap_err();
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert!(errs.iter().any(|e| e.message.contains("ghost") && e.line == Some(8)));
        assert!(errs.iter().any(|e| e.message.contains("version 9") && e.line == Some(2)));
    }

    #[test]
    fn limits_are_typed_and_checked() {
        let t = TABLE.replace(
            "\"credential\": \"OPENAI_API_KEY\"}",
            "\"credential\": \"OPENAI_API_KEY\", \"limits\": {\"rpm\": 50, \"tpm\": 1000}}",
        );
        let t = RouteTable::parse(&t).unwrap();
        assert_eq!(t.deployments["oa"].limits.rpm, Some(50));
        let plain = RouteTable::parse(TABLE).unwrap();
        let an = &plain.deployments["an"].limits;
        assert!(an.breaker.enabled && !an.has_buckets() && an.enforces_anything(), "a breaker by default");
        let off = TABLE.replace(
            "\"credential\": \"OPENAI_API_KEY\"}",
            "\"credential\": \"OPENAI_API_KEY\", \"limits\": {\"breaker\": {\"enabled\": false}}}",
        );
        assert!(!RouteTable::parse(&off).unwrap().deployments["oa"].limits.enforces_anything(), "off on purpose");
        let bad = TABLE.replace(
            "\"credential\": \"OPENAI_API_KEY\"}",
            "\"credential\": \"OPENAI_API_KEY\", \"limits\": {\"rpn\": 50}}",
        );
        assert!(RouteTable::parse(&bad).unwrap_err()[0].message.contains("rpn"));
    }

    #[test]
    fn weighted_entries_and_promises() {
        let t = TABLE.replace(
            "\"chat\": {\"chain\": [\"oa\", \"an\"]}",
            "\"chat\": {\"chain\": [{\"deployment\": \"oa\", \"weight\": 0}, \"an\"], \"requires\": [\"tools\"]}",
        );
        let t = RouteTable::parse(&t).unwrap();
        assert_eq!(t.chain("chat", 1, None).unwrap().iter().map(|(id, _)| *id).collect::<Vec<_>>(), vec!["an"]);
        assert_eq!(t.models["chat"].retry.max_attempts, 3);
        assert_eq!(t.models["chat"].deadline_ms(None), 300_000);
        assert_eq!(t.models["chat"].deadline_ms(Some(10_000_000)), 900_000);
        let broken = TABLE
            .replace(
                "\"chat\": {\"chain\": [\"oa\", \"an\"]}",
                "\"chat\": {\"chain\": [\"oa\"], \"requires\": [\"vision\", \"teleport\"]}",
            )
            .replace(
                "\"credential\": \"OPENAI_API_KEY\"}",
                "\"credential\": \"OPENAI_API_KEY\", \"capabilities\": {\"vision\": false}}",
            );
        let errs = RouteTable::parse(&broken).unwrap_err();
        assert!(errs.iter().any(|e| e.message.contains("promises 'vision'")), "{errs:?}");
        assert!(errs.iter().any(|e| e.message.contains("teleport")), "{errs:?}");
    }

    #[test]
    fn header_auth_scheme() {
        let t = TABLE.replace(
            "\"auth\": {\"scheme\": \"default\"}",
            "\"auth\": {\"scheme\": \"header\", \"name\": \"api-key\"}",
        );
        let t = RouteTable::parse(&t).unwrap();
        assert_eq!(t.deployments["an"].auth, AuthScheme::Header { name: "api-key".into() });
    }

    #[test]
    fn apis_default_by_provider_and_responses_only_for_openai() {
        let t = RouteTable::parse(TABLE).unwrap();
        let (oa, an) = (&t.deployments["oa"], &t.deployments["an"]);
        assert!(oa.accepts(Api::Chat) && oa.accepts(Api::Embeddings) && !oa.accepts(Api::Responses));
        assert!(an.accepts(Api::Chat) && !an.accepts(Api::Responses));
        let t = TABLE.replace(
            "\"credential\": \"OPENAI_API_KEY\"}",
            "\"credential\": \"OPENAI_API_KEY\", \"apis\": [\"responses\"]}",
        );
        let oa = RouteTable::parse(&t).unwrap().deployments["oa"].clone();
        assert!(oa.accepts(Api::Responses) && !oa.accepts(Api::Chat));
        let bad = TABLE.replace("\"auth\": {\"scheme\": \"default\"}", "\"apis\": [\"responses\"]");
        let errs = RouteTable::parse(&bad).unwrap_err();
        assert!(errs.iter().any(|e| e.message.contains("'an' is anthropic")), "{errs:?}");
        let typo = TABLE.replace("\"auth\": {\"scheme\": \"default\"}", "\"apis\": [\"responsess\"]");
        assert!(RouteTable::parse(&typo).is_err());
    }
}
