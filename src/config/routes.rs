//! The route table admins keep in KV: logical models → ordered chains of deployments.

use crate::config::key_lines::KeyLines;
use crate::config::policy::{CachePolicy, RetryPolicy};
use crate::config::route_rules as rules;
use crate::config::selection::{self, Candidate};
use serde::Deserialize;
use std::collections::BTreeMap;

pub const ROUTES_KV_KEY: &str = "routes";
pub const SUPPORTED_VERSION: u32 = 1;
/// Far below an isolate's 128 MB, which also holds the parsed answer and every other request.
pub const DEFAULT_MAX_ANSWER_BYTES: u64 = 16 * 1024 * 1024;
/// The most a route may allow: a parsed JSON answer takes several times its size in memory.
pub const MAX_ANSWER_BYTES_CEILING: u64 = 64 * 1024 * 1024;

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
    /// The most a vendor's answer may weigh (JSON body or whole stream) before it is cut off.
    #[serde(default = "LogicalModel::default_max_answer_bytes")]
    pub max_answer_bytes: u64,
    /// The tenants that may see and use this model; absent means every tenant. To any other
    /// tenant it does not exist (absent from `/v1/models`, 404 when named).
    #[serde(default)]
    pub tenants: Option<Vec<String>>,
}

impl LogicalModel {
    fn default_timeout() -> u64 {
        300_000
    }
    fn default_max_timeout() -> u64 {
        900_000
    }
    fn default_max_answer_bytes() -> u64 {
        DEFAULT_MAX_ANSWER_BYTES
    }

    /// Whether `tenant` may see and use this model.
    pub fn open_to(&self, tenant: &str) -> bool {
        self.tenants.as_ref().is_none_or(|t| t.iter().any(|name| name == tenant))
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
    /// The output cap to send: the client's, else the deployment's default, never above its
    /// declared `max_output` (agents ask 32,000 of models that take 16,384 and get a 400).
    pub fn output_cap(&self, requested: Option<u64>) -> Option<u64> {
        requested.or(self.default_max_tokens.map(u64::from)).map(|cap| self.within_max_output(cap))
    }

    /// `tokens`, lowered to the declared `max_output` when it is above it.
    pub fn within_max_output(&self, tokens: u64) -> u64 {
        self.capabilities.max_output.map_or(tokens, |most| tokens.min(u64::from(most)))
    }

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
    /// The vendor takes a message's `content` only as a string (DeepSeek answers an array with a
    /// 400): content made only of text parts is sent as their texts joined by blank lines.
    #[serde(default)]
    pub string_content: bool,
}

impl Default for Quirks {
    fn default() -> Self {
        Quirks {
            max_tokens_field: MaxTokensField::AsSent,
            stream_options: true,
            headers: BTreeMap::new(),
            anthropic_version: None,
            string_content: false,
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

/// Collects problems, each at the line of the field it is about.
struct Findings<'a> {
    text: &'a str,
    /// Mapped on the first problem only: a good table costs no extra scan.
    lines: Option<KeyLines>,
    out: &'a mut Vec<RouteTableError>,
}

impl Findings<'_> {
    fn add(&mut self, path: &[&str], message: String) {
        let text = self.text;
        let line = self.lines.get_or_insert_with(|| KeyLines::of(text)).line(path);
        self.out.push(RouteTableError { line, message });
    }
}

impl RouteTable {
    /// Parses and validates a table; every problem found is returned, not just the first.
    pub fn parse(text: &str) -> Result<RouteTable, Vec<RouteTableError>> {
        let table: RouteTable = serde_json::from_str(text)
            .map_err(|e| vec![RouteTableError { line: Some(e.line()), message: e.to_string() }])?;
        let mut problems = Vec::new();
        let mut found = Findings { text, lines: None, out: &mut problems };
        if table.version != SUPPORTED_VERSION {
            let message =
                format!("unsupported version {} (this gateway reads version {SUPPORTED_VERSION})", table.version);
            found.add(&["version"], message);
        }
        for (name, model) in &table.models {
            table.model_problems(name, model, &mut found);
        }
        for (id, d) in &table.deployments {
            deployment_problems(id, d, &mut found);
        }
        table.alias_problems(&mut found);
        if problems.is_empty() {
            Ok(table)
        } else {
            Err(problems)
        }
    }

    fn model_problems(&self, name: &str, model: &LogicalModel, found: &mut Findings) {
        let at = ["models", name];
        if let Some(problem) = rules::name("model name", name) {
            found.add(&at, problem);
        }
        if model.chain.is_empty() {
            found.add(&[&at[..], &["chain"]].concat(), format!("model '{name}' has an empty chain"));
        } else if model.chain.iter().all(|e| matches!(e, ChainEntry::Weighted(w) if w.weight == 0)) {
            let message = format!("model '{name}': every chain entry has weight 0, so no deployment is ever chosen");
            found.add(&[&at[..], &["chain"]].concat(), message);
        }
        if let Err(problem) = model.cache.validate() {
            found.add(&[&at[..], &["cache"]].concat(), format!("model '{name}': {problem}"));
        }
        for capability in &model.requires {
            if let Some(problem) = self.promise_problem(name, model, capability) {
                found.add(&[&at[..], &["requires"]].concat(), problem);
            }
        }
        for (i, id) in model.chain.iter().map(ChainEntry::deployment).enumerate() {
            if !self.deployments.contains_key(id) {
                let message = format!("model '{name}' names unknown deployment '{}'", id.escape_debug());
                found.add(&[&at[..], &["chain", &i.to_string()]].concat(), message);
            }
        }
        match &model.tenants {
            Some(tenants) if tenants.is_empty() => {
                let message =
                    format!("model '{name}': tenants is empty, so no one may use it (omit it for every tenant)");
                found.add(&[&at[..], &["tenants"]].concat(), message);
            }
            Some(tenants) => {
                for problem in tenants.iter().filter_map(|t| rules::name("tenant", t)) {
                    found.add(&[&at[..], &["tenants"]].concat(), format!("model '{name}': {problem}"));
                }
            }
            None => {}
        }
        for (field, problem) in bound_problems(model) {
            found.add(&[&at[..], &[field]].concat(), format!("model '{name}': {problem}"));
        }
        let attempts = model.retry.max_attempts;
        if !(1..=rules::MAX_ATTEMPTS).contains(&attempts) {
            let message = format!("model '{name}': retry.max_attempts {attempts} must be 1..={}", rules::MAX_ATTEMPTS);
            found.add(&[&at[..], &["retry", "max_attempts"]].concat(), message);
        }
    }

    /// Why `capability` is a promise the chain cannot keep, if it is.
    fn promise_problem(&self, name: &str, model: &LogicalModel, capability: &str) -> Option<String> {
        let declared = |d: &Deployment| match capability {
            "tools" => d.capabilities.tools,
            "json_mode" => d.capabilities.json_mode,
            "vision" => d.capabilities.vision,
            _ => None,
        };
        if !KNOWN_CAPABILITIES.contains(&capability) {
            return Some(format!(
                "model '{name}' requires unknown capability '{capability}' (known: tools, json_mode, vision)"
            ));
        }
        let chain = model.chain.iter().filter_map(|e| self.deployments.get(e.deployment()));
        chain
            .clone()
            .all(|d| declared(d) == Some(false))
            .then(|| format!("model '{name}' promises '{capability}' but no deployment in its chain supports it"))
    }

    fn alias_problems(&self, found: &mut Findings) {
        for (alias, target) in &self.aliases {
            let message = if let Some(problem) = rules::name("alias", alias) {
                problem
            } else if !self.models.contains_key(target) {
                format!("alias '{alias}' names unknown model '{}'", target.escape_debug())
            } else if self.models.contains_key(alias) {
                format!("alias '{alias}' is also a model's name")
            } else if alias.trim_end_matches('*').contains('*') || alias == "*" {
                format!("alias '{alias}': '*' may only end a non-empty prefix, e.g. 'claude-sonnet-4-5*'")
            } else {
                continue;
            };
            found.add(&["aliases", alias], message);
        }
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

/// What is wrong with one deployment's own fields.
fn deployment_problems(id: &str, d: &Deployment, found: &mut Findings) {
    if let Some(problem) = rules::name("deployment id", id) {
        found.add(&["deployments", id], problem);
    }
    let mut add = |field: &[&str], problem: String| {
        found.add(&[&["deployments", id][..], field].concat(), format!("deployment '{id}': {problem}"))
    };
    if let Some(problem) = rules::name("model", &d.model) {
        add(&["model"], problem);
    }
    if let Some(problem) = rules::base_url(&d.base_url) {
        add(&["base_url"], problem);
    }
    if let Some(problem) = rules::credential(&d.credential) {
        add(&["credential"], problem);
    }
    if d.provider == ProviderKind::Anthropic && d.apis.iter().any(|a| *a != Api::Chat) {
        add(&["apis"], "it is anthropic: its apis may only list \"chat\"".into());
    }
    let auth_header = match &d.auth {
        AuthScheme::Header { name } => {
            if let Some(problem) = rules::header_name(name) {
                add(&["auth", "name"], problem);
            }
            Some(name.as_str())
        }
        _ => None,
    };
    for (name, value) in &d.quirks.headers {
        if let Some(problem) = rules::extra_header(name, value, auth_header) {
            add(&["quirks", "headers", name], problem);
        }
    }
    let t = &d.timeouts;
    for (name, ms) in [
        ("connect_ms", t.connect_ms),
        ("first_token_ms", t.first_token_ms),
        ("idle_ms", t.idle_ms),
        ("total_ms", t.total_ms),
    ] {
        if ms == 0 {
            add(&["timeouts", name], format!("timeouts.{name} must be at least 1"));
        }
    }
    for (name, problem) in limit_problems(&d.limits) {
        add(&["limits", name], format!("limits: {problem}"));
    }
}

/// The limiter's own checks plus caps of 0, which would refuse every request.
fn limit_problems(l: &limiter::Limits) -> Vec<(&'static str, String)> {
    let mut out: Vec<(&'static str, String)> = l.problems().into_iter().map(|p| ("", p)).collect();
    for (name, cap) in l.caps() {
        if cap == Some(0) {
            out.push((name, format!("{name} 0 would refuse every request (leave it out for no limit)")));
        }
    }
    out
}

/// A route's bounds: positive deadlines, the default within the most a client may ask for, and
/// an answer size an isolate can hold.
fn bound_problems(model: &LogicalModel) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    if model.timeout_ms == 0 {
        out.push(("timeout_ms", "timeout_ms must be at least 1".to_string()));
    }
    if model.max_timeout_ms == 0 {
        out.push(("max_timeout_ms", "max_timeout_ms must be at least 1".to_string()));
    }
    if model.timeout_ms > model.max_timeout_ms {
        let (t, m) = (model.timeout_ms, model.max_timeout_ms);
        out.push(("timeout_ms", format!("timeout_ms {t} is above max_timeout_ms {m}")));
    }
    if !(1024..=MAX_ANSWER_BYTES_CEILING).contains(&model.max_answer_bytes) {
        let message = format!("max_answer_bytes {} must be 1024..={MAX_ANSWER_BYTES_CEILING}", model.max_answer_bytes);
        out.push(("max_answer_bytes", message));
    }
    out
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

    /// Every value the security probe found accepted, each on its own line.
    const PROBED: &str = r#"{
  "version": 1,
  "deployments": {
    "ok": {"provider": "openai", "base_url": "https://api.openai.com/v1", "model": "gpt-4o-mini", "credential": "OPENAI_API_KEY"},
    "": {"provider": "openai", "base_url": "https://api.openai.com/v1", "model": "m", "credential": "K"},
    "a\r\nb": {"provider": "openai", "base_url": "https://api.openai.com/v1", "model": "m", "credential": "K"},
    "nul\u0000": {"provider": "openai", "base_url": "https://api.openai.com/v1", "model": "m", "credential": "K"},
    "padded ": {"provider": "openai", "base_url": "https://api.openai.com/v1", "model": "m", "credential": "K"},
    "no-model": {"provider": "openai", "base_url": "https://api.openai.com/v1", "model": "", "credential": "K"},
    "pad-model": {"provider": "openai", "base_url": "https://api.openai.com/v1", "model": " gpt-4o", "credential": "K"},
    "admin": {"provider": "openai", "base_url": "https://api.openai.com/v1", "model": "m", "credential": "ADMIN_TOKEN"},
    "path": {"provider": "openai", "base_url": "https://api.openai.com/v1", "model": "m", "credential": "/etc/passwd"},
    "nohost": {"provider": "openai", "base_url": "http://", "model": "m", "credential": "K"},
    "authz": {"provider": "openai", "base_url": "https://api.openai.com/v1", "model": "m", "credential": "K",
              "quirks": {"headers": {"Authorization": "Bearer stolen"}}},
    "badhdr": {"provider": "openai", "base_url": "https://api.openai.com/v1", "model": "m", "credential": "K",
               "quirks": {"headers": {"bad header": "v"}}},
    "zero": {"provider": "openai", "base_url": "https://api.openai.com/v1", "model": "m", "credential": "K",
             "timeouts": {"connect_ms": 0}},
    "rpm0": {"provider": "openai", "base_url": "https://api.openai.com/v1", "model": "m", "credential": "K",
             "limits": {"rpm": 0}}
  },
  "models": {
    "": {"chain": ["ok"]},
    " padded": {"chain": ["ok"]},
    "late": {"chain": ["ok"], "timeout_ms": 1000,
             "max_timeout_ms": 10},
    "instant": {"chain": ["ok"], "timeout_ms": 0},
    "weightless": {"chain": [{"deployment": "ok", "weight": 0}], "tenants": []},
    "attempts": {"chain": ["ok"],
                 "retry": {"max_attempts": 1000000}, "max_answer_bytes": 1000000000}
  }
}"#;

    #[test]
    fn every_probed_mistake_is_refused_on_its_own_line() {
        let errs = RouteTable::parse(PROBED).unwrap_err();
        let want: &[(usize, &str)] = &[
            (5, "deployment id must not be empty"),
            (6, "'a\\r\\nb' contains a control character"),
            (7, "'nul\\0' contains a control character"),
            (8, "'padded ' has leading or trailing whitespace"),
            (9, "model must not be empty"),
            (10, "model ' gpt-4o' has leading or trailing whitespace"),
            (11, "'ADMIN_TOKEN' is the gateway's own setting"),
            (12, "credential '/etc/passwd' must name a secret"),
            (13, "base_url 'http://' has no host"),
            (15, "header 'Authorization' carries the vendor credential"),
            (17, "'bad header' is not a valid HTTP header name"),
            (19, "timeouts.connect_ms must be at least 1"),
            (21, "rpm 0 would refuse every request"),
            (24, "model name must not be empty"),
            (25, "' padded' has leading or trailing whitespace"),
            (26, "timeout_ms 1000 is above max_timeout_ms 10"),
            (28, "timeout_ms must be at least 1"),
            (29, "every chain entry has weight 0"),
            (29, "tenants is empty"),
            (31, "retry.max_attempts 1000000 must be 1..=20"),
            (31, "max_answer_bytes 1000000000 must be 1024..=67108864"),
        ];
        for (line, text) in want {
            assert!(
                errs.iter().any(|e| e.line == Some(*line) && e.message.contains(text)),
                "no '{text}' at line {line} in {errs:#?}"
            );
        }
        assert_eq!(errs.len(), want.len(), "{errs:#?}");
    }

    #[test]
    fn a_model_may_be_one_tenants_own() {
        let t = TABLE.replace(
            "\"chat\": {\"chain\": [\"oa\", \"an\"]}",
            "\"chat\": {\"chain\": [\"oa\"], \"tenants\": [\"acme\"]}",
        );
        let t = RouteTable::parse(&t).unwrap();
        assert!(t.models["chat"].open_to("acme") && !t.models["chat"].open_to("globex"));
        assert!(RouteTable::parse(TABLE).unwrap().models["chat"].open_to("anyone"), "absent: every tenant");
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
        assert!(errs.iter().any(|e| e.message.contains("'an': it is anthropic")), "{errs:?}");
        let typo = TABLE.replace("\"auth\": {\"scheme\": \"default\"}", "\"apis\": [\"responsess\"]");
        assert!(RouteTable::parse(&typo).is_err());
    }
}
