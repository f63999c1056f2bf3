//! `POST /v1/chat/completions`: the OpenAI chat request parsed and checked, answered from the
//! exact cache when it may be, else sent down the pipeline with the chat vendor step.

use crate::auth::context::RequestContext;
use crate::cache;
use crate::cache::store::CacheUse;
use crate::cache::AnswerFormat;
use crate::canonical::ChatRequest;
use crate::config::routes::{Api, Deployment};
use crate::endpoints::{chat_body, route};
use crate::http::codes;
use crate::http::error::ApiError;
use crate::http::reply::Reply;
use crate::pipeline::gate::Needs;
use crate::pipeline::run::{self, Trip};
use crate::pipeline::step::{Answer, ClientStream, VendorStep};
use crate::providers::splice::Span;
use crate::providers::{self, StreamTranslator, UpstreamCall, UpstreamError};
use crate::usage::record::RequestOutcome;
use worker::{Context, Env};

pub async fn completions(rc: RequestContext, body: Vec<u8>, env: &Env, ctx: &Context) -> Result<Reply, ApiError> {
    let (chat, spans) = chat_body::read(&body)?;
    // A task header picks the logical model (e.g. `summary`, `code`); otherwise the request's model.
    let logical = rc.task.clone().unwrap_or_else(|| chat.model.clone());
    let table = route::table(env, &rc).await?;
    let model = route::model(&table, &rc, &logical)?;
    let chain = table.chain(&logical, rc.random, rc.session_id.as_deref()).unwrap_or_default();
    // perf: the route's cache scope (a sorted copy of the chain's ids) only for a route that caches.
    let cache = if model.cache.enabled {
        let deployments: Vec<&str> = chain.iter().map(|(id, _)| *id).collect();
        let route = crate::cache::key::route_scope(&logical, &deployments);
        CacheUse::decide(&model.cache, &chat, &rc, &route, &body)
    } else {
        CacheUse::disabled()
    };
    if let Some(answer) = cache.lookup(env, rc.started_ms).await {
        let mut outcome = RequestOutcome::new(&rc, &logical, chat.is_stream());
        outcome.describe(&chat);
        let replay = |body: &str| cache::policy::replay_as_sse(body, chat.wants_usage());
        return route::serve_cached(answer, outcome, chat.is_stream(), replay, ctx, env);
    }
    let mut outcome = RequestOutcome::new(&rc, &logical, chat.is_stream());
    let shape = outcome.describe(&chat);
    let trip = Trip {
        rc: &rc,
        logical_model: &logical,
        model,
        chain,
        body: &body,
        stream: chat.is_stream(),
        shape,
        needs: Needs::of(&chat),
        outcome,
        cache: Some(&cache),
        unserved: "No deployment of this model can serve this request.",
    };
    run::run(trip, &ChatStep { chat: &chat, spans: spans.as_deref() }, env, ctx).await
}

/// Chat completions for every vendor: the canonical request translated to its format and back.
pub struct ChatStep<'a> {
    pub chat: &'a ChatRequest,
    /// Where the door's read found the `model` values (none when it read the body the plain way).
    pub spans: Option<&'a [Span]>,
}

impl VendorStep for ChatStep<'_> {
    fn build(&self, deployment: &Deployment, body: &[u8], credential: &str) -> Result<UpstreamCall, ApiError> {
        if !deployment.accepts(Api::Chat) {
            return Err(ApiError::invalid_request(
                codes::UNSUPPORTED_ENDPOINT,
                "This model's deployment does not accept chat completions.",
            ));
        }
        let raw = providers::Raw { body, spans: self.spans };
        providers::build_chat_from_raw(deployment, self.chat, raw, credential, deployment.quirks.stream_options)
    }

    fn translate(&self, deployment: &Deployment, body: Vec<u8>, now_ms: u64) -> Result<Answer, UpstreamError> {
        let result = providers::translate_chat_response(deployment, body, now_ms / 1000)?;
        Ok(Answer { body: result.body, usage: result.usage })
    }

    fn stream(&self, deployment: &Deployment, now_ms: u64) -> Box<dyn ClientStream> {
        Box::new(StreamTranslator::new(deployment, self.chat.wants_usage(), now_ms / 1000))
    }

    fn cache_format(&self) -> Option<AnswerFormat> {
        Some(AnswerFormat::ChatCompletion)
    }
}
