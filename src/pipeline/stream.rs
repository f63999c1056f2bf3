//! A streamed answer: read upstream until the client's first bytes exist (a failure before then
//! may still fall back; one first-token deadline however many keep-alives come), then relay
//! chunk by chunk within the idle and total bounds. When the stream ends,
//! in `ctx.wait_until`: settle with the limiters, store the answer in the cache if it may be
//! kept, and send the usage event. A stream cut part-way ends with a well-formed error event and
//! its usage event carries the error code.

use crate::cache::assembly::Assembler;
use crate::cache::store::{CacheSlot, CacheUse};
use crate::canonical::usage::Usage;
use crate::config::routes::Deployment;
use crate::limits::admission::{self, Admission, Scopes};
use crate::pipeline::answer_limit::AnswerLimit;
use crate::pipeline::attempt::{settle_failure, signals_of};
use crate::pipeline::report;
use crate::pipeline::step::ClientStream;
use crate::pipeline::stream_body::{self, BodyReader};
use crate::pipeline::timeouts::{AttemptClock, Wait};
use crate::pipeline::upstream::{self, AbortHandle, UpstreamResponse};
use crate::providers::{ErrorClass, StreamEnd, UpstreamError};
use crate::support::clock::now_ms;
use crate::usage::record::{Attempt, RequestOutcome};
use futures::channel::oneshot;
use limiter::protocol::UpstreamSignals;
use worker::wasm_bindgen::prelude::wasm_bindgen;
use worker::{web_sys, Context, Env};

/// One admitted attempt whose upstream answered 2xx, with what the request holds at its key
/// and tenant (settled with it when the stream ends).
pub struct StreamAttempt<'a> {
    pub id: &'a str,
    pub deployment: &'a Deployment,
    pub clock: AttemptClock,
    pub admission: Admission,
    pub scopes: Scopes,
    /// The route's bound on the whole stream's bytes.
    pub limit: AnswerLimit,
}

/// What happens after the stream: its record and, when the cache may keep it, where.
pub struct AfterStream {
    pub outcome: RequestOutcome,
    pub cache_store: Option<CacheSlot>,
    pub env: Env,
}

/// Reads upstream until the first bytes for the client exist; returns the client's stream body.
pub async fn start(
    mut up: UpstreamResponse,
    attempt: StreamAttempt<'_>,
    mut translator: Box<dyn ClientStream>,
    after: AfterStream,
    ctx: &Context,
) -> Result<LiveStream, UpstreamError> {
    let signals = signals_of(&up, None);
    let body = match upstream::body_stream(&mut up) {
        Ok(b) => b,
        Err(e) => return early(e, attempt.admission, signals).await,
    };
    let mut first = Vec::new();
    let mut limit = attempt.limit;
    // One deadline for the first content: keep-alives and role-only chunks do not extend it.
    // Reasoning the door holds back meets it; from then on the chunks must only keep coming.
    while !translator.emitted_any() {
        let now = now_ms();
        let wait = if translator.thinking() { attempt.clock.thinking(now) } else { attempt.clock.first_token(now) };
        let failure = match stream_body::next_chunk(&body, wait).await {
            Ok(Some(bytes)) => match limit.take(bytes.len()) {
                Ok(()) => translator.feed(&bytes, &mut first),
                Err(too_large) => Some(too_large),
            },
            Ok(None) => Some(UpstreamError::empty_response(up.status, "upstream stream ended before any content")),
            Err(e) => Some(e),
        };
        if let Some(err) = failure {
            up.abort.abort();
            return early(err, attempt.admission, signals).await;
        }
    }
    let first_byte_ms = now_ms();
    let (tx, rx) = oneshot::channel::<StreamReport>();
    // Only a stream the cache may keep is rebuilt into a completion as it passes.
    let assembler = after.cache_store.as_ref().map(|slot| {
        let mut a = Assembler::new(slot.format);
        a.feed(&first);
        a
    });
    let clock = attempt.clock;
    let settlement = Settlement {
        deployment_id: attempt.id.to_string(),
        deployment: attempt.deployment.clone(),
        started_ms: clock.sent_ms(),
        first_byte_ms,
        admission: attempt.admission,
        scopes: attempt.scopes,
        signals,
        after,
    };
    ctx.wait_until(settlement.run(rx));
    let abort = up.abort;
    Ok(LiveStream { body, translator, clock, first, finished: false, report: Some(tx), abort, assembler, limit })
}

async fn early(
    err: UpstreamError,
    admission: Admission,
    signals: UpstreamSignals,
) -> Result<LiveStream, UpstreamError> {
    settle_failure(admission, &err, None, signals).await;
    Err(err)
}

/// What is settled once the stream is over.
struct Settlement {
    deployment_id: String,
    deployment: Deployment,
    started_ms: u64,
    first_byte_ms: u64,
    admission: Admission,
    scopes: Scopes,
    signals: UpstreamSignals,
    after: AfterStream,
}

impl Settlement {
    /// After the last byte (or the client leaving): cache, limiter settles, usage event.
    async fn run(self, rx: oneshot::Receiver<StreamReport>) {
        let report = rx.await.unwrap_or(StreamReport {
            usage: None,
            usage_estimated: false,
            error: None,
            disconnected: true,
            assembled: None,
            rest: None,
        });
        // The report is sent as the client's stream closes; a timer turn lets the runtime write
        // the last bytes before this work runs, instead of after it in the same microtask drain.
        crate::support::promise::sleep(0).await;
        let AfterStream { mut outcome, cache_store, env } = self.after;
        if let (Some(body), Some(slot)) = (report.assembled.as_deref(), cache_store) {
            if let Some(answer) = slot.entry(body.as_bytes(), report.usage, &self.deployment_id, now_ms()) {
                CacheUse::store(slot.key, answer, env.clone()).await;
            }
        }
        let (id, dep) = (&self.deployment_id, &self.deployment);
        let mut record = Attempt::succeeded(id, dep, report.usage, self.started_ms, now_ms(), Some(self.first_byte_ms));
        record.usage_estimated = report.usage_estimated;
        let class = report.error.as_ref().map(|e| e.class);
        if report.disconnected {
            record.status = 499;
            record.error_class = Some("client_disconnected");
        } else if let Some(err) = &report.error {
            record.status = 502;
            record.error_class = Some(err.class.as_str());
            // The client already has a 200; the event still names what cut the stream.
            outcome.error_code = Some(err.to_stream_api_error().code);
        }
        // Partial usage is billed as reported; with none reported the estimate stays charged.
        let usage = report.usage.as_ref().map(admission::token_usage);
        outcome.attempts.push(record);
        // A success's settle may wait up to a second to ride along: the rest does not wait for it.
        let limiter = self.admission.settle(admission::outcome_for(class, None), usage, self.signals);
        let rest = async {
            self.scopes.settle_now(usage).await;
            report::finish_detached(outcome, &env).await;
        };
        let drain = async {
            if let Some(body) = report.rest {
                body.drain().await;
            }
        };
        futures::future::join3(limiter, rest, drain).await;
    }
}

struct StreamReport {
    usage: Option<Usage>,
    usage_estimated: bool,
    error: Option<UpstreamError>,
    disconnected: bool,
    /// The answer rebuilt for the cache, when the stream completed cleanly.
    assembled: Option<String>,
    /// A stream that ended with the vendor's last event: what follows it, read to the end.
    rest: Option<BodyReader>,
}

/// The client-facing half of a stream; dropping it early (client gone) aborts upstream and reports.
pub struct LiveStream {
    body: BodyReader,
    translator: Box<dyn ClientStream>,
    clock: AttemptClock,
    /// The client's first bytes, read before the stream was handed to the client.
    first: Vec<u8>,
    finished: bool,
    report: Option<oneshot::Sender<StreamReport>>,
    abort: AbortHandle,
    assembler: Option<Assembler>,
    limit: AnswerLimit,
}

impl LiveStream {
    fn end(&mut self, error: Option<UpstreamError>) {
        self.finished = true;
        let clean = error.is_none();
        let assembled = if clean { self.assembler.take().and_then(Assembler::finish) } else { None };
        if let Some(tx) = self.report.take() {
            let mut report = self.report_with(error, false, assembled);
            // perf: a cancelled body closes the vendor's connection; a drained one is reused.
            report.rest = clean.then(|| self.body.hand_over());
            let _ = tx.send(report);
        }
    }

    fn report_with(&self, error: Option<UpstreamError>, disconnected: bool, assembled: Option<String>) -> StreamReport {
        let (usage, usage_estimated) = (self.translator.usage(), self.translator.usage_estimated());
        StreamReport { usage, usage_estimated, error, disconnected, assembled, rest: None }
    }

    fn assemble(&mut self, out: &[u8]) {
        if let Some(a) = self.assembler.as_mut() {
            a.feed(out);
        }
    }

    fn fail(&mut self, err: UpstreamError, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.translator.error_event(&err.to_stream_api_error()));
        self.end(Some(err));
    }

    /// The client's bytes from one upstream chunk (often none: a partial event is held).
    fn on_chunk(&mut self, bytes: &[u8]) -> Vec<u8> {
        if self.finished {
            return Vec::new();
        }
        // Past the route's bound the rest is not read: ended like a broken stream.
        if let Err(too_large) = self.limit.take(bytes.len()) {
            return self.on_failure(too_large);
        }
        let mut out = Vec::new();
        let failed = self.translator.feed(bytes, &mut out);
        self.assemble(&out);
        if let Some(err) = failed {
            self.fail(err, &mut out);
        } else if self.translator.ended() {
            // perf: the client's stream closes with the vendor's last event, one read sooner.
            self.finish_into(&mut out);
        }
        out
    }

    /// The upstream body ended: the last bytes, or the error event of a stream cut short.
    fn on_end(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        if !self.finished {
            self.finish_into(&mut out);
        }
        out
    }

    /// Flushes the translator into `out` and ends the stream, whole or cut.
    fn finish_into(&mut self, out: &mut Vec<u8>) {
        let before = out.len();
        match self.translator.finish(out) {
            StreamEnd::Complete => {
                self.assemble(&out[before..]);
                self.end(None)
            }
            StreamEnd::Truncated => self.fail(truncated(), out),
        }
    }

    /// Reading upstream failed or timed out: upstream is aborted and the client gets the error event.
    fn on_failure(&mut self, err: UpstreamError) -> Vec<u8> {
        let mut out = Vec::new();
        if !self.finished {
            self.abort.abort();
            self.fail(err, &mut out);
        }
        out
    }

    /// The client's body: the first bytes now, the rest pumped from JS through a [`StreamRelay`].
    pub fn into_body(mut self) -> web_sys::ReadableStream {
        let first = std::mem::take(&mut self.first);
        let reader = self.body.handle();
        // Replaced by the pump's first `wait_ms` before any read.
        let wait = self.clock.next_chunk(self.clock.sent_ms());
        stream_body::pump(&reader, StreamRelay { live: self, wait }.into(), &first)
    }
}

/// A live stream as the JS pump drives it, one synchronous call per step; dropped (`free` from
/// JS) when the stream is over or the client left.
#[wasm_bindgen]
pub struct StreamRelay {
    live: LiveStream,
    /// The wait the pump was last given, whose expiry `expired` reports.
    wait: Wait,
}

#[wasm_bindgen]
impl StreamRelay {
    /// How long the pump may wait for the next upstream chunk.
    pub fn wait_ms(&mut self, now_ms: f64) -> f64 {
        let wait = self.live.clock.next_chunk(now_ms as u64);
        let ms = wait.ms as f64;
        self.wait = wait;
        ms
    }

    /// The client's bytes from one upstream chunk.
    pub fn chunk(&mut self, bytes: &[u8]) -> Vec<u8> {
        self.live.on_chunk(bytes)
    }

    /// The upstream body ended.
    pub fn end(&mut self) -> Vec<u8> {
        self.live.on_end()
    }

    /// Reading upstream failed with `why`.
    pub fn broke(&mut self, why: String) -> Vec<u8> {
        self.live.on_failure(stream_body::broken(&why))
    }

    /// The wait from `wait_ms` ran out before a chunk came.
    pub fn expired(&mut self) -> Vec<u8> {
        self.live.on_failure(self.wait.expired())
    }

    /// Whether the stream is over (the pump closes the client's body and drops the relay).
    pub fn finished(&self) -> bool {
        self.live.finished
    }
}

fn truncated() -> UpstreamError {
    UpstreamError {
        class: ErrorClass::Connection,
        status: 200,
        message: "upstream stream ended before it was complete".into(),
        retry_after_ms: None,
        vendor_code: Some("stream_truncated".into()),
    }
}

impl Drop for LiveStream {
    fn drop(&mut self) {
        if let Some(tx) = self.report.take() {
            self.abort.abort();
            let _ = tx.send(self.report_with(None, true, None));
        }
    }
}
