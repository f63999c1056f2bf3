//! `POST /v1/chat/completions`: the OpenAI chat request read and checked, answered from the
//! exact cache when it may be, else sent down the pipeline with the chat vendor step.

use crate::auth::context::RequestContext;
use crate::cache;
use crate::cache::store::CacheUse;
use crate::cache::AnswerFormat;
use crate::canonical::ChatFacts;
use crate::config::routes::{Api, Deployment, ProviderKind, RouteTable};
use crate::endpoints::chat_body::ChatRead;
use crate::endpoints::route;
use crate::http::codes;
use crate::http::error::ApiError;
use crate::http::reply::Reply;
use crate::pipeline::gate::Needs;
use crate::pipeline::run::{self, Trip};
use crate::pipeline::step::{Answer, ClientStream, VendorStep};
use crate::providers::{self, splice, StreamTranslator, UpstreamCall, UpstreamError};
use crate::usage::record::RequestOutcome;
use worker::{Context, Env};

pub async fn completions(rc: RequestContext, body: Vec<u8>, env: &Env, ctx: &Context) -> Result<Reply, ApiError> {
    // The table first, to tell whether the body may go through as it is and so be walked rather
    // than parsed; its error still comes after the body's.
    let table = route::table(env, &rc).await;
    let walk = table.as_ref().map_or(true, |t| may_walk(t, &rc, &body));
    let read = ChatRead::new(&body, walk)?;
    let facts = &read.facts;
    // A task header picks the logical model (e.g. `summary`, `code`); otherwise the request's model.
    let logical = rc.task.clone().unwrap_or_else(|| facts.model.clone());
    let table = table?;
    let model = route::model(&table, &rc, &logical)?;
    let chain = table.chain(&logical, rc.random, rc.session_id.as_deref()).unwrap_or_default();
    // perf: the route's cache scope (a sorted copy of the chain's ids) only for a route that caches.
    let cache = if model.cache.enabled {
        let deployments: Vec<&str> = chain.iter().map(|(id, _)| *id).collect();
        let route = crate::cache::key::route_scope(&logical, &deployments);
        CacheUse::decide(&model.cache, read.chat(), &rc, &route, &body)
    } else {
        CacheUse::disabled()
    };
    if let Some(answer) = cache.lookup(env, rc.started_ms).await {
        let mut outcome = RequestOutcome::new(&rc, &logical, facts.stream);
        outcome.describe(facts);
        let replay = |body: &str| cache::policy::replay_as_sse(body, facts.wants_usage);
        return route::serve_cached(answer, outcome, facts.stream, replay, ctx, env);
    }
    let mut outcome = RequestOutcome::new(&rc, &logical, facts.stream);
    let shape = outcome.describe(facts);
    let trip = Trip {
        rc: &rc,
        logical_model: &logical,
        model,
        chain,
        body: &body,
        stream: facts.stream,
        shape,
        needs: Needs::of_facts(facts),
        outcome,
        cache: Some(&cache),
        unserved: "No deployment of this model can serve this request.",
    };
    run::run(trip, &ChatStep { read: &read }, env, ctx).await
}

/// Whether the request may go to a vendor as it is, so that a walk of its bytes is all the door
/// needs: some deployment of the model it names speaks OpenAI's format and the route does not
/// cache (the key needs the typed request). True when unsure: the walk reads any body correctly.
fn may_walk(table: &RouteTable, rc: &RequestContext, body: &[u8]) -> bool {
    let named = if rc.task.is_none() { splice::leading_model(body) } else { None };
    let Some(model) = rc.task.as_deref().or(named.as_deref()).and_then(|m| table.models.get(m)) else {
        return true;
    };
    let openai = |id: &str| table.deployments.get(id).is_none_or(|d| d.provider == ProviderKind::Openai);
    !model.cache.enabled && model.chain.iter().any(|e| openai(e.deployment()))
}

/// Chat completions for every vendor: the client's bytes to an OpenAI-format vendor when nothing
/// but the model must change, else the typed request translated to its format and back.
pub struct ChatStep<'a> {
    pub read: &'a ChatRead<'a>,
}

impl ChatStep<'_> {
    fn facts(&self) -> &ChatFacts {
        &self.read.facts
    }
}

impl VendorStep for ChatStep<'_> {
    fn build(&self, deployment: &Deployment, body: &[u8], credential: &str) -> Result<UpstreamCall, ApiError> {
        if !deployment.accepts(Api::Chat) {
            return Err(ApiError::invalid_request(
                codes::UNSUPPORTED_ENDPOINT,
                "This model's deployment does not accept chat completions.",
            ));
        }
        let raw = providers::Raw { body, spans: self.read.spans.as_deref() };
        let force_usage = deployment.quirks.stream_options;
        providers::build_chat_from_raw(deployment, self.facts(), || self.read.chat(), raw, credential, force_usage)
    }

    fn translate(&self, deployment: &Deployment, body: Vec<u8>, now_ms: u64) -> Result<Answer, UpstreamError> {
        let result = providers::translate_chat_response(deployment, body, now_ms / 1000)?;
        Ok(Answer { body: result.body, usage: result.usage })
    }

    fn stream(&self, deployment: &Deployment, now_ms: u64) -> Box<dyn ClientStream> {
        Box::new(StreamTranslator::new(deployment, self.facts().wants_usage, now_ms / 1000))
    }

    fn cache_format(&self) -> Option<AnswerFormat> {
        Some(AnswerFormat::ChatCompletion)
    }
}
