//! `POST /v1/chat/completions`: key → route → admit with the key's and tenant's limits → per
//! deployment: admit → vendor → settle; JSON or SSE.

use crate::auth::context::RequestContext;
use crate::cache;
use crate::cache::assembly::StreamAssembler;
use crate::cache::policy::CachedAnswer;
use crate::cache::store::CacheUse;
use crate::canonical::ChatRequest;
use crate::config;
use crate::config::routes::Deployment;
use crate::config::selection::{self, Gate, Needs};
use crate::http;
use crate::http::error::ApiError;
use crate::limits::admission::{self, Admission, Admit, Scopes};
use crate::limits::budget;
use crate::pipeline::attempt::{
    credential, final_error, now_ms, refusal_error, scope_estimate, set_remaining, settle_failure, signals_of,
    with_route_headers, Refusal,
};
use crate::pipeline::decision_log::DecisionLog;
use crate::pipeline::retry::{self, retry_budget};
use crate::pipeline::upstream::{self, AbortHandle, UpstreamResponse};
use crate::providers::{self, ErrorClass, StreamEnd, StreamTranslator, UpstreamError};
use crate::usage::estimate;
use crate::usage::record::{Attempt, RequestOutcome};
use futures::channel::oneshot;
use limiter::protocol::{TokenUsage, UpstreamSignals};
use worker::{ByteStream, Context, Env, Response};

pub async fn completions(rc: RequestContext, body: Vec<u8>, env: &Env, ctx: &Context) -> Result<Response, ApiError> {
    let chat = ChatRequest::parse(&body)?;
    let table = config::store::route_table(env, rc.started_ms).await?;
    // A task header picks the logical model (e.g. `summary`, `code`); otherwise the request's model.
    let logical = rc.task.clone().unwrap_or_else(|| chat.model.clone());
    let model = table.models.get(&logical).ok_or_else(|| ApiError::model_not_found(&logical))?;
    if !rc.key.allows_model(&logical) {
        return Err(ApiError::new(
            403,
            "permission_error",
            "model_not_allowed",
            format!("This key may not use model '{logical}'."),
        )
        .with_param("model"));
    }
    let chain = table.chain(&logical, rc.random, rc.session_id.as_deref()).unwrap_or_default();
    let cache = CacheUse::decide(&model.cache, &chat, &rc, &body);
    if let Some(answer) = cache.lookup(env, rc.started_ms).await {
        return serve_cached(answer, &chat, &rc, &logical, ctx, env);
    }
    let deadline = rc.started_ms + model.deadline_ms(rc.timeout_override_ms);
    let policy = model.retry;
    let stream = chat.is_stream();
    let mut outcome = RequestOutcome::new(&rc, &logical, stream);
    outcome.describe(&chat);
    let soft_budget = budget::admit(env, ctx, &rc, &mut outcome, &chain, deadline).await?;
    // Key, then tenant, before any deployment: released again if no deployment takes the request.
    // What the request is made of is computed once, not per candidate.
    let text_chars = outcome.shape.as_ref().map_or_else(|| chat.text_chars(), |s| s.text_chars);
    let max_output = chat.max_output_tokens();
    let (needs_tools, needs_json, needs_vision) = (chat.needs_tools(), chat.needs_json(), chat.needs_vision());
    let need = scope_estimate(text_chars, chat.messages.len(), max_output, &chain);
    let scopes = match admission::admit_scopes(env, ctx, &rc, need).await {
        Ok(scopes) => scopes,
        Err(refused) => {
            let api_error = refusal_error(&refused);
            outcome.fail(&api_error);
            outcome.finish(ctx, env);
            return Err(api_error);
        }
    };
    let mut log = DecisionLog::new(&rc.request_id, &logical);
    let mut last_error: Option<UpstreamError> = None;
    let mut refusal: Option<Refusal> = None;
    let mut attempts_made = 0u32;
    let mut rounds = 0u32;
    'rounds: loop {
        let attempts_before_round = attempts_made;
        for (id, deployment) in chain.iter().copied() {
            if attempts_made >= policy.max_attempts.max(1) {
                break 'rounds;
            }
            let estimate =
                estimate::estimate(text_chars, chat.messages.len(), max_output, deployment.default_max_tokens);
            let needs = Needs {
                tools: needs_tools,
                json_mode: needs_json,
                vision: needs_vision,
                context_tokens: estimate.input + max_output.unwrap_or(0),
            };
            match selection::gate(&deployment.capabilities, &needs) {
                Gate::Skip(missing) => {
                    log.skip(id, "capability", &missing);
                    continue;
                }
                Gate::PassUnknown(unknown) => log.warn_unknown(id, &unknown),
                Gate::Pass => {}
            }
            let Some(credential) = credential(env, &deployment.credential) else {
                log.skip(id, "credential_missing", &[]);
                continue;
            };
            if rounds > 0 {
                if !retry_budget::try_retry(id, &policy, now_ms()) {
                    log.skip(id, "retry_budget_exhausted", &[]);
                    continue;
                }
                let wait = retry::backoff_ms(
                    &policy,
                    rounds - 1,
                    last_error.as_ref().and_then(|e| e.retry_after_ms),
                    rc.random.rotate_left(rounds),
                );
                if now_ms() + wait >= deadline {
                    break 'rounds;
                }
                worker::Delay::from(std::time::Duration::from_millis(wait)).await;
            } else {
                retry_budget::record_request(id, &policy, now_ms());
            }
            let call = match providers::build_chat(deployment, &chat, &credential, deployment.quirks.stream_options) {
                Ok(call) => call,
                Err(e) => {
                    scopes.finish_failed(ctx, attempts_made > 0, last_error.as_ref()).await;
                    return Err(e);
                }
            };
            let reservation = format!("{}:{attempts_made}:{id}", rc.request_id);
            let admission =
                match admission::admit(env, ctx, id, deployment, &rc.key.tenant, reservation, estimate, rc.max_wait_ms)
                    .await
                {
                    Admit::Admitted(a) => a,
                    Admit::Refused { code, retry_after_ms } => {
                        log.refused(id, code.as_str(), retry_after_ms);
                        Refusal::keep_soonest(&mut refusal, id, code, retry_after_ms);
                        continue;
                    }
                };
            let remaining = (admission.remaining_requests, admission.remaining_tokens);
            let attempt_started = now_ms();
            if attempt_started >= deadline {
                settle_failure(admission, &deadline_error(), None, UpstreamSignals::default()).await;
                last_error = Some(deadline_error());
                break 'rounds;
            }
            attempts_made += 1;
            let attempts = attempts_made as usize;
            let budget = deadline - attempt_started;
            let headers_timeout = if stream {
                deployment.timeouts.connect_ms + deployment.timeouts.first_token_ms
            } else {
                deployment.timeouts.total_ms
            }
            .min(budget);
            let sent = upstream::send(&call, headers_timeout).await;
            let result = match sent {
                Ok(up) if (200..300).contains(&up.status) => {
                    if stream {
                        let scopes = scopes.clone();
                        let attempt = StreamAttempt { id, deployment, attempt_started, admission, scopes };
                        let store = cache.key.clone().zip(cache.decision.store_ttl_s());
                        start_stream(up, attempt, &chat, &rc, outcome.clone(), ctx, store).await
                    } else {
                        let store =
                            cache.key.clone().zip(cache.decision.store_ttl_s()).map(|(k, t)| (k, t, rc.env.clone()));
                        let held = (admission, &scopes);
                        finish_json(up, id, deployment, attempt_started, held, &mut outcome, ctx, store).await
                    }
                }
                Ok(mut up) => {
                    let body = upstream::read_body(&mut up, deployment.timeouts.total_ms.min(budget))
                        .await
                        .unwrap_or_default();
                    let retry_after = upstream::header(&up, "retry-after");
                    let err = providers::classify(deployment.provider, up.status, retry_after.as_deref(), &body);
                    let signals = signals_of(&up, err.retry_after_ms);
                    settle_failure(admission, &err, Some(TokenUsage::default()), signals).await;
                    Err(err)
                }
                Err(err) => {
                    settle_failure(admission, &err, None, UpstreamSignals::default()).await;
                    Err(err)
                }
            };
            match result {
                Ok(mut response) => {
                    log.served(id);
                    let fallback = log.fell_back();
                    log.emit();
                    if !stream {
                        outcome.finish(ctx, env);
                    }
                    let headers = response.headers_mut();
                    let _ = headers.set("x-gateway-fallback", if fallback { "true" } else { "false" });
                    let _ = headers.set("x-gateway-cache", &cache.miss_label());
                    let mut response = with_route_headers(response, &rc, id, deployment, attempts);
                    set_remaining(&mut response, remaining);
                    budget::mark(&mut response, soft_budget);
                    return Ok(response);
                }
                Err(err) => {
                    log.failed(id, err.class.as_str());
                    outcome.attempts.push(Attempt::failed(id, deployment, &err, attempt_started));
                    let may_fall_back = err.class.may_fall_back();
                    last_error = Some(err);
                    if !may_fall_back {
                        break 'rounds;
                    }
                }
            }
        }
        rounds += 1;
        let retryable = last_error.as_ref().is_some_and(|e| e.class.retryable());
        let progressed = attempts_made > attempts_before_round;
        // A vendor asking for a long pause is not waited for: the client learns at once.
        let too_long =
            last_error.as_ref().and_then(|e| e.retry_after_ms).is_some_and(|ms| ms > policy.max_retry_after_ms);
        if !retryable || !progressed || too_long || attempts_made >= policy.max_attempts || now_ms() >= deadline {
            break;
        }
    }
    log.emit();
    let nothing_tried = match log.capability_gap() {
        Some(gap) => ApiError::invalid_request(
            "capability_not_supported",
            format!("No deployment of model '{logical}' supports what this request needs: {}.", gap.join(", ")),
        ),
        None => ApiError::unavailable("no_deployment_available", "No deployment of this model can serve this request."),
    };
    scopes.finish_failed(ctx, attempts_made > 0, last_error.as_ref()).await;
    let api_error = final_error(last_error.as_ref(), refusal, nothing_tried);
    outcome.fail(&api_error);
    outcome.finish(ctx, env);
    Err(api_error)
}

/// Answers from the cache: no upstream call; streamed requests get the answer replayed as SSE.
fn serve_cached(
    answer: CachedAnswer,
    chat: &ChatRequest,
    rc: &RequestContext,
    logical: &str,
    ctx: &Context,
    env: &Env,
) -> Result<Response, ApiError> {
    let now = now_ms();
    let mut outcome = RequestOutcome::new(rc, logical, chat.is_stream());
    outcome.describe(chat);
    outcome.record_cache_hit(&answer.deployment, answer.usage, now);
    outcome.finish(ctx, env);
    let mut response = if chat.is_stream() {
        let sse = cache::policy::replay_as_sse(&answer.body, chat.wants_usage())
            .ok_or_else(|| ApiError::internal("cached answer could not be replayed"))?;
        http::io::sse_response(futures::stream::once(async move { Ok(sse) }))?
    } else {
        http::io::json_response(200, answer.body.clone().into_bytes())?
    };
    let headers = response.headers_mut();
    let _ = headers.set("x-gateway-cache", "hit");
    let _ = headers.set("age", &answer.age_s(now).to_string());
    let _ = headers.set("x-gateway-deployment", &answer.deployment);
    let _ = headers.set("x-gateway-attempts", "0");
    Ok(response)
}

fn deadline_error() -> UpstreamError {
    UpstreamError {
        class: ErrorClass::Timeout,
        status: 0,
        message: "the request's deadline passed before a deployment answered".into(),
        retry_after_ms: None,
        vendor_code: Some("deadline_exceeded".into()),
    }
}

#[allow(clippy::too_many_arguments)]
async fn finish_json(
    mut up: UpstreamResponse,
    id: &str,
    deployment: &Deployment,
    attempt_started: u64,
    (admission, scopes): (Admission, &Scopes),
    outcome: &mut RequestOutcome,
    ctx: &Context,
    cache_store: Option<(String, u32, Env)>,
) -> Result<Response, UpstreamError> {
    let translated = match upstream::read_body(&mut up, deployment.timeouts.total_ms).await {
        Ok(body) => providers::translate_chat_response(deployment, &body, now_ms() / 1000),
        Err(e) => Err(e),
    };
    let signals = signals_of(&up, None);
    let result = match translated {
        Ok(r) => r,
        Err(err) => {
            settle_failure(admission, &err, None, signals).await;
            return Err(err);
        }
    };
    let usage = result.usage;
    ctx.wait_until(admission.settle(
        admission::outcome_for(None, None),
        usage.as_ref().map(admission::token_usage),
        signals,
    ));
    scopes.settle(ctx, usage.as_ref().map(admission::token_usage));
    outcome.attempts.push(Attempt::succeeded(id, deployment, usage, attempt_started, now_ms(), None));
    if let Some((key, ttl_s, env)) = cache_store {
        let storable =
            serde_json::from_str::<serde_json::Value>(&result.body).is_ok_and(|v| cache::policy::storable(&v));
        if storable {
            let answer = CachedAnswer::new(result.body.clone(), usage, id.to_string(), now_ms(), ttl_s);
            ctx.wait_until(CacheUse::store(key, answer, env));
        }
    }
    http::io::json_response(200, result.body.into_bytes()).map_err(|e| internal(e.message))
}

fn internal(message: String) -> UpstreamError {
    UpstreamError { class: ErrorClass::ServerError, status: 0, message, retry_after_ms: None, vendor_code: None }
}

/// One admitted attempt, with what the request holds at its key and tenant (settled with it
/// when the stream ends).
struct StreamAttempt<'a> {
    id: &'a str,
    deployment: &'a Deployment,
    attempt_started: u64,
    admission: Admission,
    scopes: Scopes,
}

/// Reads upstream until the first bytes for the client exist, so a failure before then can still fall back.
async fn start_stream(
    mut up: UpstreamResponse,
    attempt: StreamAttempt<'_>,
    chat: &ChatRequest,
    rc: &RequestContext,
    mut outcome: RequestOutcome,
    ctx: &Context,
    cache_store: Option<(String, u32)>,
) -> Result<Response, UpstreamError> {
    let StreamAttempt { id, deployment, attempt_started, admission, scopes } = attempt;
    let signals = signals_of(&up, None);
    let early = |err: UpstreamError, admission: Admission| async move {
        settle_failure(admission, &err, None, signals).await;
        Err(err)
    };
    let mut body = match upstream::body_stream(&mut up) {
        Ok(b) => b,
        Err(e) => return early(e, admission).await,
    };
    let mut translator = StreamTranslator::new(deployment, chat.wants_usage(), now_ms() / 1000);
    let mut first = Vec::new();
    while !translator.emitted_any() {
        let failure = match upstream::next_chunk(&mut body, deployment.timeouts.first_token_ms).await {
            Ok(Some(bytes)) => translator.feed(&bytes, &mut first),
            Ok(None) => Some(UpstreamError {
                class: ErrorClass::EmptyResponse,
                status: up.status,
                message: "upstream stream ended before any content".into(),
                retry_after_ms: None,
                vendor_code: None,
            }),
            Err(e) => Some(e),
        };
        if let Some(err) = failure {
            up.abort.abort();
            return early(err, admission).await;
        }
    }
    let first_byte_ms = now_ms();
    let (tx, rx) = oneshot::channel::<StreamReport>();
    // Only a stream the cache may keep is rebuilt into a completion as it passes.
    let assembler = cache_store.as_ref().map(|_| {
        let mut a = StreamAssembler::new();
        a.feed(&first);
        a
    });
    let live = LiveStream {
        body,
        translator,
        idle_ms: deployment.timeouts.idle_ms,
        pending: Some(first),
        finished: false,
        report: Some(tx),
        abort: up.abort,
        assembler,
    };
    let deployment_id = id.to_string();
    let dep = deployment.clone();
    let env = rc.env.clone();
    ctx.wait_until(async move {
        let report = rx.await.unwrap_or(StreamReport { usage: None, error: None, disconnected: true, assembled: None });
        if let (Some(body), Some((key, ttl_s))) = (report.assembled.clone(), cache_store) {
            let storable = serde_json::from_str::<serde_json::Value>(&body).is_ok_and(|v| cache::policy::storable(&v));
            if storable {
                let answer = CachedAnswer::new(body, report.usage, deployment_id.clone(), now_ms(), ttl_s);
                CacheUse::store(key, answer, env.clone()).await;
            }
        }
        let now = now_ms();
        let mut record =
            Attempt::succeeded(&deployment_id, &dep, report.usage, attempt_started, now, Some(first_byte_ms));
        let class = report.error.as_ref().map(|e| e.class);
        if report.disconnected {
            record.status = 499;
            record.error_class = Some("client_disconnected");
        } else if let Some(class) = class {
            record.status = 502;
            record.error_class = Some(class.as_str());
        }
        // Partial usage is billed as reported; with none reported the estimate stays charged.
        let usage = report.usage.as_ref().map(admission::token_usage);
        admission.settle(admission::outcome_for(class, None), usage, signals).await;
        scopes.settle_now(usage).await;
        outcome.attempts.push(record);
        outcome.finish_detached(&env).await;
    });
    http::io::sse_response(live.into_stream()).map_err(|e| internal(e.message))
}

struct StreamReport {
    usage: Option<crate::canonical::usage::Usage>,
    error: Option<UpstreamError>,
    disconnected: bool,
    /// The answer rebuilt for the cache, when the stream completed cleanly.
    assembled: Option<String>,
}

/// The client-facing half of a stream; dropping it early (client gone) aborts upstream and reports.
struct LiveStream {
    body: ByteStream,
    translator: StreamTranslator,
    idle_ms: u64,
    pending: Option<Vec<u8>>,
    finished: bool,
    report: Option<oneshot::Sender<StreamReport>>,
    abort: AbortHandle,
    assembler: Option<StreamAssembler>,
}

impl LiveStream {
    fn end(&mut self, error: Option<UpstreamError>) {
        self.finished = true;
        let assembled = if error.is_none() { self.assembler.take().and_then(StreamAssembler::finish) } else { None };
        if let Some(tx) = self.report.take() {
            let _ = tx.send(StreamReport { usage: self.translator.usage(), error, disconnected: false, assembled });
        }
    }

    fn assemble(&mut self, out: &[u8]) {
        if let Some(a) = self.assembler.as_mut() {
            a.feed(out);
        }
    }

    fn fail(&mut self, err: UpstreamError, out: &mut Vec<u8>) {
        out.extend_from_slice(&providers::stream_error_event(&err.to_api_error()));
        self.end(Some(err));
    }

    fn into_stream(self) -> impl futures::Stream<Item = worker::Result<Vec<u8>>> {
        futures::stream::unfold(self, |mut s| async move {
            if let Some(first) = s.pending.take() {
                return Some((Ok(first), s));
            }
            if s.finished {
                return None;
            }
            loop {
                let mut out = Vec::new();
                match upstream::next_chunk(&mut s.body, s.idle_ms).await {
                    Ok(Some(bytes)) => {
                        let failed = s.translator.feed(&bytes, &mut out);
                        s.assemble(&out);
                        if let Some(err) = failed {
                            s.fail(err, &mut out);
                        }
                    }
                    Ok(None) => match s.translator.finish(&mut out) {
                        StreamEnd::Complete => {
                            s.assemble(&out);
                            s.end(None)
                        }
                        StreamEnd::Truncated => {
                            let err = UpstreamError {
                                class: ErrorClass::Connection,
                                status: 200,
                                message: "upstream stream ended before it was complete".into(),
                                retry_after_ms: None,
                                vendor_code: Some("stream_truncated".into()),
                            };
                            s.fail(err, &mut out);
                        }
                    },
                    Err(err) => {
                        s.abort.abort();
                        s.fail(err, &mut out);
                    }
                }
                if !out.is_empty() {
                    return Some((Ok(out), s));
                }
                if s.finished {
                    return None;
                }
            }
        })
    }
}

impl Drop for LiveStream {
    fn drop(&mut self) {
        if let Some(tx) = self.report.take() {
            self.abort.abort();
            let _ = tx.send(StreamReport {
                usage: self.translator.usage(),
                error: None,
                disconnected: true,
                assembled: None,
            });
        }
    }
}
