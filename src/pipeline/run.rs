//! The driver every endpoint calls: reserve with the tenant's budget, admit with the key's and
//! tenant's limiters, then walk the chain as the planner says (admit with the deployment,
//! send, classify, settle), answer with the first deployment that serves, and record one usage
//! event and one decision-log line however it ends.

use crate::auth::context::RequestContext;
use crate::cache::store::{CacheSlot, CacheUse};
use crate::config::routes::{Deployment, LogicalModel};
use crate::http::codes;
use crate::http::error::ApiError;
use crate::http::header_map::HeaderText;
use crate::http::reply::Reply;
use crate::limits::admission::{self, Admission, Admit, Scopes};
use crate::limits::budget;
use crate::limits::refusal::refusal_error;
use crate::pipeline::answer_limit::AnswerLimit;
use crate::pipeline::attempt::{credential, route_headers, scope_estimate, settle_failure, signals_of};
use crate::pipeline::decision_log::DecisionLog;
use crate::pipeline::gate::{self, Gate, Needs};
use crate::pipeline::plan::{deadline_error, Candidate, IsolateRetryBudgets, Planner, Skip, Step};
use crate::pipeline::report;
use crate::pipeline::step::VendorStep;
use crate::pipeline::stream::{self, AfterStream, StreamAttempt};
use crate::pipeline::timeouts::AttemptClock;
use crate::pipeline::upstream::{self, UpstreamResponse};
use crate::providers::{self, UpstreamError};
use crate::support::clock::now_ms;
use crate::usage::estimate::TokenEstimate;
use crate::usage::record::RequestShape;
use crate::usage::record::{Attempt, RequestOutcome};
use limiter::protocol::{FaultReason, Outcome, TokenUsage, UpstreamSignals};
use worker::{Context, Env};

/// What an endpoint tells the pipeline about one request.
pub struct Trip<'a> {
    pub rc: &'a RequestContext,
    pub logical_model: &'a str,
    pub model: &'a LogicalModel,
    /// The deployments in the order selection chose.
    pub chain: Vec<(&'a str, &'a Deployment)>,
    /// The client's raw body, handed to the vendor step.
    pub body: &'a [u8],
    pub stream: bool,
    /// What the token estimate is made of.
    pub shape: RequestShape,
    /// What the capability gate checks (`context_tokens` is filled in per deployment).
    pub needs: Needs,
    pub outcome: RequestOutcome,
    /// The response cache's decision, for endpoints whose answers it keeps.
    pub cache: Option<&'a CacheUse>,
    /// The message when no deployment could be tried at all.
    pub unserved: &'static str,
}

/// Runs one request through the pipeline with the endpoint's vendor step.
pub async fn run(trip: Trip<'_>, step: &dyn VendorStep, env: &Env, ctx: &Context) -> Result<Reply, ApiError> {
    let mut trip = trip;
    let rc = trip.rc;
    let deadline_ms = rc.started_ms + trip.model.deadline_ms(rc.timeout_override_ms);
    let claim = match budget::admit(env, rc, Some(&trip.shape), &trip.chain, deadline_ms).await {
        Ok(claim) => claim,
        Err(refused) => return Err(refuse(trip.outcome, refused, ctx, env)),
    };
    let soft_budget = claim.as_ref().is_some_and(|c| c.soft_exceeded);
    trip.outcome.budget = claim;
    // Key, then tenant, before any deployment: released again if no deployment takes the request.
    let need = scope_estimate(&trip.shape, &trip.chain);
    let scopes = match admission::admit_scopes(env, ctx, rc, need).await {
        Ok(scopes) => scopes,
        Err(refused) => return Err(refuse(trip.outcome, refusal_error(&refused), ctx, env)),
    };
    let mut driver = Driver::new(trip, step, env, ctx, scopes, deadline_ms);
    loop {
        match driver.planner.next(now_ms(), &mut IsolateRetryBudgets) {
            Step::Stop(_) => return driver.give_up().await,
            Step::Skip { index, reason } => driver.skip(index, reason),
            Step::Try { index, wait_ms } => {
                driver.warn_unknown(index);
                if wait_ms > 0 {
                    worker::Delay::from(std::time::Duration::from_millis(wait_ms)).await;
                }
                if let Some(served) = driver.attempt(index).await {
                    return Ok(driver.answer(served, soft_budget));
                }
            }
        }
    }
}

/// A refusal before any deployment (budget, key or tenant limit): recorded, then returned.
fn refuse(mut outcome: RequestOutcome, error: ApiError, ctx: &Context, env: &Env) -> ApiError {
    outcome.fail(&error);
    report::finish(outcome, ctx, env);
    error
}

/// A deployment's answer on its way to the client.
struct Served {
    response: Reply,
    index: usize,
    remaining: (Option<u64>, Option<u64>),
}

struct Driver<'a> {
    trip: Trip<'a>,
    step: &'a dyn VendorStep,
    env: &'a Env,
    ctx: &'a Context,
    scopes: Scopes,
    planner: Planner,
    log: DecisionLog,
    credentials: Vec<Option<String>>,
    estimates: Vec<TokenEstimate>,
}

impl<'a> Driver<'a> {
    fn new(
        trip: Trip<'a>,
        step: &'a dyn VendorStep,
        env: &'a Env,
        ctx: &'a Context,
        scopes: Scopes,
        deadline_ms: u64,
    ) -> Self {
        let max_output = trip.shape.max_output;
        let estimates: Vec<TokenEstimate> =
            trip.chain.iter().map(|(_, d)| trip.shape.estimate(d.default_max_tokens)).collect();
        let credentials: Vec<Option<String>> = trip.chain.iter().map(|(_, d)| credential(env, &d.credential)).collect();
        let candidates = trip
            .chain
            .iter()
            .zip(&estimates)
            .zip(&credentials)
            .map(|(((id, d), e), c)| {
                // One choice's output is what must fit in the context window.
                let needs = Needs { context_tokens: e.input.saturating_add(max_output.unwrap_or(0)), ..trip.needs };
                Candidate { id: id.to_string(), gate: gate::gate(&d.capabilities, &needs), has_credential: c.is_some() }
            })
            .collect();
        let planner = Planner::new(candidates, trip.model.retry, deadline_ms, trip.rc.random);
        let log = DecisionLog::new(&trip.rc.request_id, trip.logical_model);
        Driver { trip, step, env, ctx, scopes, planner, log, credentials, estimates }
    }

    /// A candidate passed over; one whose credential is not bound is the deployment's fault:
    /// its breaker learns it and the decision log raises it.
    fn skip(&mut self, index: usize, reason: Skip) {
        self.warn_unknown(index);
        let (id, deployment) = self.trip.chain[index];
        let missing = match &reason {
            Skip::Capability(missing) => missing.as_slice(),
            Skip::CredentialMissing => {
                self.log.alert(id, FaultReason::MissingCredential.as_str());
                admission::report_fault(self.env, self.ctx, id, deployment, FaultReason::MissingCredential);
                &[]
            }
            Skip::RetryBudgetExhausted => &[],
        };
        self.log.skip(id, reason.as_str(), missing);
    }

    fn warn_unknown(&mut self, index: usize) {
        if let Gate::PassUnknown(unknown) = &self.planner.candidate(index).gate {
            self.log.warn_unknown(self.trip.chain[index].0, unknown);
        }
    }

    /// Build, admit, send: `Some` when this deployment served.
    async fn attempt(&mut self, index: usize) -> Option<Served> {
        let (id, deployment) = self.trip.chain[index];
        let credential = self.credentials[index].as_deref().unwrap_or_default();
        let call = match self.step.build(deployment, self.trip.body, credential) {
            Ok(call) => call,
            Err(e) => {
                // A chain may mix vendors: one that cannot take this request is passed over.
                self.log.skip(id, &e.code, &[]);
                self.planner.unbuildable(e);
                return None;
            }
        };
        let admission = match self.admit(index).await {
            Admit::Admitted(a) => a,
            Admit::Refused { code, retry_after_ms } => {
                self.log.refused(id, code.as_str(), retry_after_ms);
                self.planner.refused(index, code, retry_after_ms);
                return None;
            }
        };
        let remaining = (admission.remaining_requests, admission.remaining_tokens);
        let started_ms = now_ms();
        if !self.planner.begin_attempt(started_ms) {
            settle_failure(admission, &deadline_error(), None, UpstreamSignals::default()).await;
            return None;
        }
        match self.exchange(index, &call, admission, started_ms).await {
            Ok(response) => {
                self.planner.served();
                Some(Served { response, index, remaining })
            }
            Err(err) => {
                self.log.failed(id, err.class.as_str());
                if let Outcome::Fault { reason } = admission::outcome_for(Some(err.class), None) {
                    self.log.alert(id, reason.as_str());
                }
                self.trip.outcome.attempts.push(Attempt::failed(id, deployment, &err, started_ms, now_ms()));
                self.planner.failed(err);
                None
            }
        }
    }

    async fn admit(&self, index: usize) -> Admit {
        let (id, deployment) = self.trip.chain[index];
        let rc = self.trip.rc;
        let reservation = format!("{}:{}:{id}", rc.request_id, self.planner.attempts());
        let estimate = self.estimates[index];
        admission::admit(self.env, self.ctx, id, deployment, &rc.key.tenant, reservation, estimate, rc.max_wait_ms)
            .await
    }

    /// One upstream call; the admission is settled on every path.
    async fn exchange(
        &mut self,
        index: usize,
        call: &providers::UpstreamCall,
        admission: Admission,
        started_ms: u64,
    ) -> Result<Reply, UpstreamError> {
        let deployment = self.trip.chain[index].1;
        let clock = AttemptClock::new(started_ms, deployment.timeouts, self.planner.deadline_ms());
        let now = now_ms();
        let (headers, body) = (clock.headers(self.trip.stream, now), clock.body(now));
        let limit = AnswerLimit::new(self.trip.model.max_answer_bytes);
        let sent = upstream::send(call, &self.trip.rc.request_id, headers, body, limit, self.trip.stream).await;
        match sent {
            Ok(up) if (200..300).contains(&up.status) && self.trip.stream => {
                self.relay_stream(index, up, admission, clock).await
            }
            Ok(up) if (200..300).contains(&up.status) => self.relay_json(index, up, admission, clock).await,
            Ok(mut up) => {
                let body = upstream::read_body(&mut up).unwrap_or_default();
                let retry_after = upstream::header(&up, "retry-after");
                let err = providers::classify(deployment.provider, up.status, retry_after, &body);
                let signals = signals_of(&up, err.retry_after_ms);
                settle_failure(admission, &err, Some(TokenUsage::default()), signals).await;
                Err(err)
            }
            Err(err) => {
                settle_failure(admission, &err, None, UpstreamSignals::default()).await;
                Err(err)
            }
        }
    }

    /// Where the cache keeps this request's answer, if it may.
    fn cache_store(&self) -> Option<CacheSlot> {
        self.trip.cache?.slot(self.step.cache_format()?)
    }

    async fn relay_json(
        &mut self,
        index: usize,
        mut up: UpstreamResponse,
        admission: Admission,
        clock: AttemptClock,
    ) -> Result<Reply, UpstreamError> {
        let (id, deployment) = self.trip.chain[index];
        let started_ms = clock.sent_ms();
        let translated = match upstream::read_body(&mut up) {
            Ok(body) => self.step.translate(deployment, body, now_ms()),
            Err(e) => Err(e),
        };
        let signals = signals_of(&up, None);
        let answer = match translated {
            Ok(answer) => answer,
            Err(err) => {
                settle_failure(admission, &err, None, signals).await;
                return Err(err);
            }
        };
        let usage = answer.usage.as_ref().map(admission::token_usage);
        admission.settle_in(self.ctx, admission::outcome_for(None, None), usage, signals);
        self.scopes.settle(self.ctx, usage);
        let record = Attempt::succeeded(id, deployment, answer.usage, started_ms, now_ms(), None);
        self.trip.outcome.attempts.push(record);
        if let Some(slot) = self.cache_store() {
            if let Some(cached) = slot.entry(&answer.body, answer.usage, id, now_ms()) {
                self.ctx.wait_until(CacheUse::store(slot.key, cached, self.trip.rc.env.clone()));
            }
        }
        Ok(Reply::json(200, answer.body))
    }

    async fn relay_stream(
        &mut self,
        index: usize,
        up: UpstreamResponse,
        admission: Admission,
        clock: AttemptClock,
    ) -> Result<Reply, UpstreamError> {
        let (id, deployment) = self.trip.chain[index];
        let scopes = self.scopes.clone();
        let limit = AnswerLimit::new(self.trip.model.max_answer_bytes);
        let attempt = StreamAttempt { id, deployment, clock, admission, scopes, limit };
        let after = AfterStream {
            outcome: self.trip.outcome.clone(),
            cache_store: self.cache_store(),
            env: self.trip.rc.env.clone(),
        };
        let translator = self.step.stream(deployment, now_ms());
        let live = stream::start(up, attempt, translator, after, self.ctx).await?;
        Ok(Reply::sse(live.into_body()))
    }

    /// The served answer with the gateway's headers; a JSON answer's usage event leaves now, a
    /// stream's when it ends.
    fn answer(mut self, served: Served, soft_budget: bool) -> Reply {
        let Served { mut response, index, remaining } = served;
        let (id, deployment) = self.trip.chain[index];
        self.log.served(id);
        let fallback = self.log.fell_back();
        self.log.emit();
        // Every gateway header in one call into the runtime.
        let mut text = HeaderText::default();
        let _ = text.add("x-gateway-fallback", if fallback { "true" } else { "false" });
        if let Some(cache) = self.trip.cache {
            let _ = text.add("x-gateway-cache", &cache.miss_label());
        }
        let attempts = self.planner.attempts() as usize;
        route_headers(&mut text, id, deployment, attempts, remaining);
        budget::mark(&mut text, soft_budget);
        response.set_headers(&text);
        if !self.trip.stream {
            report::finish(self.trip.outcome, self.ctx, self.env);
        }
        response
    }

    /// Nothing served: release or settle what the request holds, record it, and say why.
    async fn give_up(mut self) -> Result<Reply, ApiError> {
        self.log.emit();
        let last_error = self.planner.last_error();
        self.scopes.finish_failed(self.ctx, self.planner.attempts() > 0, last_error).await;
        let none = ApiError::unavailable(codes::NO_DEPLOYMENT_AVAILABLE, self.trip.unserved);
        let api_error = self.planner.final_error(self.trip.logical_model, none);
        self.trip.outcome.fail(&api_error);
        report::finish(self.trip.outcome, self.ctx, self.env);
        Err(api_error)
    }
}
