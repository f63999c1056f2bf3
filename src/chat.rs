//! `POST /v1/chat/completions`: key → route → per deployment: admit → vendor → settle; JSON or SSE.

use crate::admission::{self, Admission, Admit};
use crate::api_error::ApiError;
use crate::canonical::ChatRequest;
use crate::estimate;
use crate::outcome::{Attempt, RequestOutcome};
use crate::providers::{self, ErrorClass, StreamEnd, StreamTranslator, UpstreamError};
use crate::rate_headers;
use crate::request_context::RequestContext;
use crate::routes::Deployment;
use crate::upstream::{self, AbortHandle, UpstreamResponse};
use crate::{config_store, http_io};
use futures::channel::oneshot;
use limiter::protocol::{RejectCode, TokenUsage, UpstreamSignals};
use worker::{ByteStream, Context, Env, Response};

/// The limiter refusal a client sees when no deployment would take the request.
struct Refusal {
    deployment: String,
    code: RejectCode,
    retry_after_ms: u64,
}

pub async fn completions(rc: RequestContext, body: Vec<u8>, env: &Env, ctx: &Context) -> Result<Response, ApiError> {
    let chat = ChatRequest::parse(&body)?;
    let table = config_store::route_table(env, rc.started_ms).await?;
    let chain = table.chain(&chat.model).ok_or_else(|| ApiError::model_not_found(&chat.model))?;
    if !rc.key.allows_model(&chat.model) {
        return Err(ApiError::new(
            403,
            "permission_error",
            "model_not_allowed",
            format!("This key may not use model '{}'.", chat.model),
        )
        .with_param("model"));
    }
    let stream = chat.is_stream();
    let mut outcome = RequestOutcome::new(&rc, &chat.model, stream);
    let mut last_error: Option<UpstreamError> = None;
    let mut refusal: Option<Refusal> = None;
    for (n, (id, deployment)) in chain.into_iter().enumerate() {
        let Some(credential) = credential(env, &deployment.credential) else {
            worker::console_error!(
                "{}",
                serde_json::json!({"event": "credential_missing", "deployment": id, "secret": deployment.credential})
            );
            continue;
        };
        let call = providers::build_chat(deployment, &chat, &credential, deployment.quirks.stream_options)?;
        let estimate = estimate::estimate(
            chat.text_chars(),
            chat.messages.len(),
            chat.max_output_tokens(),
            deployment.default_max_tokens,
        );
        let admission =
            match admission::admit(env, id, deployment, format!("{}:{n}", rc.request_id), estimate, rc.max_wait_ms)
                .await
            {
                Admit::Admitted(a) => a,
                Admit::Refused { code, retry_after_ms } => {
                    if refusal.as_ref().is_none_or(|r| retry_after_ms < r.retry_after_ms) {
                        refusal = Some(Refusal { deployment: id.to_string(), code, retry_after_ms });
                    }
                    continue;
                }
            };
        let remaining = (admission.remaining_requests, admission.remaining_tokens);
        let attempt_started = now_ms();
        let attempts = outcome.attempts.len() + 1;
        let headers_timeout = if stream {
            deployment.timeouts.connect_ms + deployment.timeouts.first_token_ms
        } else {
            deployment.timeouts.total_ms
        };
        let sent = upstream::send(&call, headers_timeout).await;
        let result = match sent {
            Ok(up) if (200..300).contains(&up.status) => {
                if stream {
                    let attempt = StreamAttempt { id, deployment, attempt_started, admission };
                    start_stream(up, attempt, &chat, &rc, outcome.clone(), ctx).await
                } else {
                    finish_json(up, id, deployment, attempt_started, admission, &mut outcome, ctx).await
                }
            }
            Ok(mut up) => {
                let body = upstream::read_body(&mut up, deployment.timeouts.total_ms).await.unwrap_or_default();
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
            Ok(response) => {
                if !stream {
                    outcome.finish(ctx, env);
                }
                let mut response = with_route_headers(response, &rc, id, deployment, attempts);
                set_remaining(&mut response, remaining);
                return Ok(response);
            }
            Err(err) => {
                outcome.attempts.push(Attempt::failed(id, deployment, &err, attempt_started));
                let may_fall_back = err.class.may_fall_back();
                last_error = Some(err);
                if !may_fall_back {
                    break;
                }
            }
        }
    }
    let api_error = match (&last_error, refusal) {
        (Some(err), _) if !err.class.may_fall_back() => err.to_api_error(),
        (_, Some(r)) => refusal_error(&r),
        (Some(err), None) => err.to_api_error(),
        (None, None) => ApiError::unavailable(
            "no_deployment_available",
            "No deployment of this model is configured with credentials.",
        ),
    };
    outcome.fail(&api_error);
    outcome.finish(ctx, env);
    Err(api_error)
}

fn now_ms() -> u64 {
    worker::Date::now().as_millis()
}

fn credential(env: &Env, name: &str) -> Option<String> {
    env.secret(name)
        .ok()
        .map(|s| s.to_string())
        .or_else(|| env.var(name).ok().map(|v| v.to_string()))
        .filter(|s| !s.is_empty())
}

fn signals_of(up: &UpstreamResponse, retry_after_ms: Option<u64>) -> UpstreamSignals {
    let mut signals = rate_headers::signals(|name| upstream::header(up, name), now_ms());
    signals.retry_after_ms = retry_after_ms;
    signals
}

async fn settle_failure(
    admission: Admission,
    err: &UpstreamError,
    usage: Option<TokenUsage>,
    signals: UpstreamSignals,
) {
    admission.settle(admission::outcome_for(Some(err.class), err.retry_after_ms), usage, signals).await;
}

fn refusal_error(r: &Refusal) -> ApiError {
    let what = match r.code {
        RejectCode::Rpm => "its requests-per-minute limit",
        RejectCode::Tpm | RejectCode::InputTpm | RejectCode::OutputTpm => "its tokens-per-minute limit",
        RejectCode::Rpd => "its requests-per-day limit",
        RejectCode::Concurrency => "its concurrent-request limit",
        RejectCode::BreakerOpen | RejectCode::HalfOpenProbeInFlight | RejectCode::Ramping => "an open circuit breaker",
        RejectCode::Paused => "a pause the vendor asked for",
        RejectCode::QuotaExhausted => "an exhausted vendor quota",
    };
    ApiError::new(
        429,
        "rate_limit_error",
        format!("deployment_{}", r.code.as_str()),
        format!(
            "No deployment can take this request now: '{}' is held by {what} (limit '{}', scope deployment); retry after {} ms.",
            r.deployment,
            r.code.as_str(),
            r.retry_after_ms
        ),
    )
    .with_retry_after_ms(r.retry_after_ms)
    .with_header("x-gateway-limit", r.code.as_str())
    .with_header("x-gateway-limit-scope", "deployment")
    .with_header("x-gateway-limit-reset-ms", r.retry_after_ms.to_string())
}

async fn finish_json(
    mut up: UpstreamResponse,
    id: &str,
    deployment: &Deployment,
    attempt_started: u64,
    admission: Admission,
    outcome: &mut RequestOutcome,
    ctx: &Context,
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
    outcome.attempts.push(Attempt::succeeded(id, deployment, usage, attempt_started, now_ms(), None));
    http_io::json_response(200, result.body.into_bytes()).map_err(|e| internal(e.message))
}

fn internal(message: String) -> UpstreamError {
    UpstreamError { class: ErrorClass::ServerError, status: 0, message, retry_after_ms: None, vendor_code: None }
}

struct StreamAttempt<'a> {
    id: &'a str,
    deployment: &'a Deployment,
    attempt_started: u64,
    admission: Admission,
}

/// Reads upstream until the first bytes for the client exist, so a failure before then can still fall back.
async fn start_stream(
    mut up: UpstreamResponse,
    attempt: StreamAttempt<'_>,
    chat: &ChatRequest,
    rc: &RequestContext,
    mut outcome: RequestOutcome,
    ctx: &Context,
) -> Result<Response, UpstreamError> {
    let StreamAttempt { id, deployment, attempt_started, admission } = attempt;
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
    let live = LiveStream {
        body,
        translator,
        idle_ms: deployment.timeouts.idle_ms,
        pending: Some(first),
        finished: false,
        report: Some(tx),
        abort: up.abort,
    };
    let deployment_id = id.to_string();
    let dep = deployment.clone();
    let env = rc.env.clone();
    ctx.wait_until(async move {
        let report = rx.await.unwrap_or(StreamReport { usage: None, error: None, disconnected: true });
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
        outcome.attempts.push(record);
        outcome.finish_detached(&env).await;
    });
    http_io::sse_response(live.into_stream()).map_err(|e| internal(e.message))
}

struct StreamReport {
    usage: Option<crate::usage::Usage>,
    error: Option<UpstreamError>,
    disconnected: bool,
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
}

impl LiveStream {
    fn end(&mut self, error: Option<UpstreamError>) {
        self.finished = true;
        if let Some(tx) = self.report.take() {
            let _ = tx.send(StreamReport { usage: self.translator.usage(), error, disconnected: false });
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
                        if let Some(err) = s.translator.feed(&bytes, &mut out) {
                            s.fail(err, &mut out);
                        }
                    }
                    Ok(None) => match s.translator.finish(&mut out) {
                        StreamEnd::Complete => s.end(None),
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
            let _ = tx.send(StreamReport { usage: self.translator.usage(), error: None, disconnected: true });
        }
    }
}

fn with_route_headers(
    mut response: Response,
    rc: &RequestContext,
    deployment_id: &str,
    deployment: &Deployment,
    attempts: usize,
) -> Response {
    let headers = response.headers_mut();
    let _ = headers.set("x-request-id", &rc.request_id);
    let _ = headers.set("x-gateway-deployment", deployment_id);
    let _ = headers.set("x-gateway-provider", deployment.provider.as_str());
    let _ = headers.set("x-gateway-attempts", &attempts.to_string());
    response
}

fn set_remaining(response: &mut Response, remaining: (Option<u64>, Option<u64>)) {
    let headers = response.headers_mut();
    if let Some(r) = remaining.0 {
        let _ = headers.set("x-ratelimit-remaining-requests", &r.to_string());
    }
    if let Some(t) = remaining.1 {
        let _ = headers.set("x-ratelimit-remaining-tokens", &t.to_string());
    }
}
