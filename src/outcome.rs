//! What happened to one client request and each attempt inside it, reported after the response.

use crate::api_error::ApiError;
use crate::providers::UpstreamError;
use crate::request_context::RequestContext;
use crate::routes::Deployment;
use crate::usage::Usage;
use serde::Serialize;
use worker::{Context, Env};

#[derive(Debug, Clone, Serialize)]
pub struct Attempt {
    pub deployment: String,
    pub provider: &'static str,
    pub model: String,
    pub status: u16,
    pub error_class: Option<&'static str>,
    pub usage: Option<Usage>,
    pub latency_ms: u64,
    pub ttft_ms: Option<u64>,
}

impl Attempt {
    pub fn succeeded(
        id: &str,
        d: &Deployment,
        usage: Option<Usage>,
        started_ms: u64,
        now_ms: u64,
        first_byte_ms: Option<u64>,
    ) -> Self {
        Attempt {
            deployment: id.to_string(),
            provider: d.provider.as_str(),
            model: d.model.clone(),
            status: 200,
            error_class: None,
            usage,
            latency_ms: now_ms.saturating_sub(started_ms),
            ttft_ms: first_byte_ms.map(|t| t.saturating_sub(started_ms)),
        }
    }

    pub fn failed(id: &str, d: &Deployment, err: &UpstreamError, started_ms: u64) -> Self {
        Attempt {
            deployment: id.to_string(),
            provider: d.provider.as_str(),
            model: d.model.clone(),
            status: err.status,
            error_class: Some(err.class.as_str()),
            usage: None,
            latency_ms: worker::Date::now().as_millis().saturating_sub(started_ms),
            ttft_ms: None,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct RequestOutcome {
    pub request_id: String,
    pub started_ms: u64,
    pub tenant: String,
    pub app: String,
    pub env: String,
    pub logical_model: String,
    pub stream: bool,
    pub attempts: Vec<Attempt>,
    pub error_code: Option<String>,
    pub status: u16,
}

impl RequestOutcome {
    pub fn new(rc: &RequestContext, logical_model: &str, stream: bool) -> Self {
        RequestOutcome {
            request_id: rc.request_id.clone(),
            started_ms: rc.started_ms,
            tenant: rc.key.tenant.clone(),
            app: rc.key.app.clone(),
            env: rc.key.env.clone(),
            logical_model: logical_model.to_string(),
            stream,
            attempts: Vec::new(),
            error_code: None,
            status: 200,
        }
    }

    pub fn clone_meta(&self) -> Self {
        self.clone()
    }

    pub fn fail(&mut self, err: &ApiError) {
        self.status = err.status;
        self.error_code = Some(err.code.clone());
    }

    /// Reports after the response is sent; never delays the client.
    pub fn finish(self, ctx: &Context, env: &Env) {
        let env = env.clone();
        ctx.wait_until(async move { self.finish_detached(&env).await });
    }

    pub async fn finish_detached(self, _env: &Env) {
        worker::console_log!("{}", serde_json::json!({"event": "request", "outcome": self}));
    }
}
