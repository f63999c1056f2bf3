//! The simulated edge: locations with isolates, each running the gateway's real lease ledger
//! (`edge_gateway::limits::lease_ledger`) and talking, over a round trip of its location's length,
//! to one limiter object running the real state machine (`limiter::LimiterState`) as a single
//! server: one call at a time, a fixed service time each, first come first served.
//!
//! The isolate's side follows `src/limits/admission.rs` step by step: local admit or admit with
//! the object (a lease ask riding along), renewals off the request's path, a watcher handing
//! slices back at expiry, settles local unless urgent, and fail-open when the object cannot be
//! reached. Everything is driven by one seeded generator, so a run is a function of its config.
//!
//! With `relays` on, each location also has its relay (`limiter::relay::Relay`, the state
//! machine the `LocationRelay` object runs), a single server 1–4 ms from its isolates: isolates
//! ask it for their leases and hand them back to it, and it asks the object.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

use edge_gateway::limits::lease_ledger::{
    Decision, FlushStep, LeaseLedger, ObjectSettle, SettleAction, Ticket, ASK_POLL_FIRST_MS, ASK_POLL_MAX_MS,
    MAX_ASK_WAIT_MS, MAX_QUIET_MS,
};
use edge_gateway::usage::output_history::OutputHistory;
use edge_gateway::usage::record::Ingress;
use limiter::breaker::BreakerState;
use limiter::leases::LEASE_RETRY_MS;
use limiter::limits::Amounts;
use limiter::protocol::{
    AdmitDecision, AdmitRequest, LeaseAsk, LeaseDecision, LeaseRequest, LimiterRequest, LimiterResponse, Outcome,
    RejectCode, SettleRequest, Tally, TokenUsage, UpstreamSignals,
};
use limiter::relay::{Relay, SubAnswer, UPSTREAM_TIMEOUT_MS};
use limiter::LimiterState;

use crate::config::{Config, Estimate};
use crate::metrics::{Recorder, Report};
use crate::rng::Rng;

const DEP: &str = "deployment:sim";
/// The simulated clock starts on a minute boundary of a real date.
const T0_MS: u64 = 1_700_000_040_000;
const WRITE_BEHIND_MS: u64 = limiter::shell::WRITE_BEHIND_MS;

struct Request {
    id: u64,
    arrival_us: u64,
    need: Amounts,
    real: TokenUsage,
    duration_ms: u64,
}

/// What an isolate waits for from a message, with the tally it carried (put back if it is lost).
enum Pending {
    Admit {
        request: Request,
        ask: Option<LeaseAsk>,
        tally: Tally,
    },
    Lease {
        ask: String,
        tally: Tally,
    },
    Settle {
        tally: Tally,
    },
    Report {
        tally: Tally,
    },
    /// A relay's messages to the object.
    RelayLease {
        ask: String,
        tally: Tally,
    },
    RelayReport {
        tally: Tally,
    },
}

/// Who sent a message to the object.
#[derive(Debug, Clone, Copy)]
enum Caller {
    Isolate(usize),
    Relay(usize),
}

/// An isolate's message to its location's relay.
enum RelayCall {
    Lease(Box<LeaseRequest>),
    Report(Tally),
}

enum Held {
    Local(Ticket),
    /// Admitted by the object; `deferrable`: its success may be settled in a later tally.
    Object {
        deferrable: bool,
    },
    /// Admitted without the object (it could not be reached): nothing to settle.
    Unlimited,
}

enum Event {
    Batch {
        location: usize,
    },
    Rearm {
        location: usize,
    },
    Arrive {
        slot: usize,
    },
    AtObject {
        from: Caller,
        message: Box<LimiterRequest>,
        pending: Pending,
    },
    Serve,
    Reply {
        from: Caller,
        response: LimiterResponse,
        pending: Pending,
    },
    Failed {
        from: Caller,
        pending: Pending,
    },
    AtRelay {
        location: usize,
        isolate: usize,
        call: RelayCall,
    },
    RelayServe {
        location: usize,
    },
    /// The relay's answer to an isolate's ask.
    RelayAnswer {
        isolate: usize,
        id: String,
        answer: LeaseDecision,
    },
    /// The relay's alarm: parents at their end, outcomes due at the object.
    RelayWake {
        location: usize,
    },
    Finish {
        isolate: usize,
        request: Request,
        held: Held,
    },
    /// A waiting request looks at the ledger again (the shell's timers in `wait_for_ask`).
    Poll {
        isolate: usize,
        request: u64,
        step_ms: u64,
    },
    Watch {
        isolate: usize,
    },
    /// Settles waiting in the tally are due (`SETTLE_DELAY_MS`) unless a message carried them.
    Flush {
        isolate: usize,
    },
    Retire {
        slot: usize,
    },
    Snapshot,
    Restart,
    Tick,
    /// After the longest request and a settle's delay: what the object still holds.
    Audit,
}

struct Scheduled {
    at_us: u64,
    seq: u64,
    event: Event,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        (self.at_us, self.seq) == (other.at_us, other.seq)
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scheduled {
    // Earliest first from a max-heap.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at_us, other.seq).cmp(&(self.at_us, self.seq))
    }
}

struct Location {
    rtt_ms: f64,
    weight: f64,
    phase: f64,
    slots: Vec<usize>,
    relay: RelayServer,
}

/// A location's relay: its state machine, its queue, and the asks waiting for the object.
struct RelayServer {
    state: Relay,
    queue: VecDeque<(usize, RelayCall)>,
    busy: bool,
    waiting: Vec<(usize, LeaseRequest, u64)>,
    /// When its alarm is set for.
    wake_at_ms: Option<u64>,
}

struct Isolate {
    location: usize,
    ledger: LeaseLedger,
    history: OutputHistory,
    /// Requests waiting for the answer to this isolate's ask in flight.
    waiting: Vec<Waiter>,
}

struct Waiter {
    request: Request,
    until_ms: u64,
    /// The ledger's `changes` when it began to wait.
    seen: u64,
}

/// The limiter object: its state machine, its queue of calls, and its last written snapshot.
struct Object {
    state: LimiterState,
    queue: VecDeque<(u64, Caller, Box<LimiterRequest>, Pending)>,
    busy: bool,
    snapshot: Option<String>,
}

pub struct World {
    config: Config,
    now_us: u64,
    seq: u64,
    events: BinaryHeap<Scheduled>,
    /// Traffic and isolates' lives; `net` for round trips and the object's draws, so a policy
    /// that sends more or fewer messages sees the same traffic.
    rng: Rng,
    net: Rng,
    locations: Vec<Location>,
    /// Every isolate that ever lived; a slot points at its current one.
    isolates: Vec<Isolate>,
    slots: Vec<usize>,
    /// Σ weight × diurnal factor over locations, refreshed every second.
    norm: f64,
    object: Object,
    next_request: u64,
    pub recorder: Recorder,
}

impl World {
    pub fn new(config: Config) -> Self {
        let mut rng = Rng::new(config.seed);
        let mut layout = rng.fork(1);
        let net = rng.fork(2);
        let mut locations: Vec<Location> = (0..config.locations)
            .map(|rank| Location {
                // One-way distances from the object's location: near metros to the far side of the world.
                rtt_ms: layout.lognormal(60.0, 0.75).clamp(5.0, 300.0),
                weight: 1.0 / ((rank + 1) as f64).powf(config.zipf),
                phase: layout.uniform(0.0, std::f64::consts::TAU),
                slots: Vec::new(),
                relay: RelayServer {
                    state: Relay::new(&format!("relay{rank}")),
                    queue: VecDeque::new(),
                    busy: false,
                    waiting: Vec::new(),
                    wake_at_ms: None,
                },
            })
            .collect();
        let mut isolates = Vec::new();
        let mut slots = Vec::new();
        for (l, location) in locations.iter_mut().enumerate() {
            for _ in 0..config.isolates_per_location {
                location.slots.push(slots.len());
                slots.push(isolates.len());
                isolates.push(Isolate::new(l, isolates.len(), config.relays));
            }
        }
        let object = Object {
            state: LimiterState::new(config.limits.clone(), T0_MS),
            queue: VecDeque::new(),
            busy: false,
            snapshot: None,
        };
        let recorder = Recorder::new(config.duration_s);
        let mut w = World {
            now_us: 0,
            seq: 0,
            events: BinaryHeap::new(),
            rng,
            net,
            locations,
            isolates,
            slots,
            norm: 1.0,
            object,
            next_request: 0,
            recorder,
            config,
        };
        w.refresh_norm();
        for location in 0..w.locations.len() {
            w.schedule_batch(location);
        }
        for slot in 0..w.slots.len() {
            let life = w.life_us();
            w.at(life, Event::Retire { slot });
        }
        w.at(0, Event::Tick);
        // Requests last at most 60 s and wait at most a few seconds to start.
        w.at((w.config.duration_s + 65) * 1_000_000, Event::Audit);
        if w.config.restart_at_s.is_some() {
            w.at(WRITE_BEHIND_MS * 1_000, Event::Snapshot);
        }
        if let Some(s) = w.config.restart_at_s {
            w.at(s * 1_000_000, Event::Restart);
        }
        w
    }

    /// Runs to the end (arrivals stop at the configured duration; the work in flight finishes).
    pub fn run(mut self) -> (Report, World) {
        while let Some(next) = self.events.pop() {
            self.now_us = next.at_us;
            self.step(next.event);
        }
        let c = &self.config;
        let report = Report::of(c.name, &mut self.recorder, &c.limits, self.slots.len(), c.duration_s, c.warmup_s);
        (report, self)
    }

    pub fn object(&mut self) -> &mut LimiterState {
        &mut self.object.state
    }

    pub fn config_relays(&self) -> bool {
        self.config.relays
    }

    /// The relays' counts, summed over locations.
    pub fn relay_counts(&self) -> limiter::relay::RelayCounts {
        self.locations.iter().map(|l| l.relay.state.status().counts).fold(Default::default(), |a, c| {
            limiter::relay::RelayCounts {
                asks: a.asks + c.asks,
                granted: a.granted + c.granted,
                granted_requests: a.granted_requests + c.granted_requests,
                refused: a.refused + c.refused,
                upstream_asks: a.upstream_asks + c.upstream_asks,
                upstream_reports: a.upstream_reports + c.upstream_reports,
                returned_late: a.returned_late + c.returned_late,
            }
        })
    }

    pub fn now_ms(&self) -> u64 {
        T0_MS + self.now_us / 1_000
    }

    fn elapsed_ms(&self) -> u64 {
        self.now_us / 1_000
    }

    fn running(&self) -> bool {
        self.now_us < self.config.duration_s * 1_000_000
    }

    fn at(&mut self, at_us: u64, event: Event) {
        self.seq += 1;
        self.events.push(Scheduled { at_us, seq: self.seq, event });
    }

    fn after_ms(&mut self, ms: u64, event: Event) {
        self.at(self.now_us + ms * 1_000, event);
    }

    fn life_us(&mut self) -> u64 {
        (self.rng.exp(self.config.isolate_life_s) * 1e6) as u64 + 1
    }

    fn step(&mut self, event: Event) {
        match event {
            Event::Batch { location } => self.batch(location),
            Event::Rearm { location } => {
                if self.running() {
                    self.schedule_batch(location);
                }
            }
            Event::Arrive { slot } => self.arrive(self.slots[slot]),
            Event::AtObject { from, message, pending } => {
                let backlog_us = self.object.queue.len() as u64 * self.config.service_us;
                if backlog_us >= self.config.overload_ms * 1_000 {
                    self.recorder.overloaded += 1;
                    let back = self.one_way_us(self.location_of(from));
                    self.at(self.now_us + back, Event::Failed { from, pending });
                    return;
                }
                self.object.queue.push_back((self.now_us, from, message, pending));
                if !self.object.busy {
                    self.object.busy = true;
                    self.at(self.now_us, Event::Serve);
                }
            }
            Event::Serve => self.serve(),
            Event::Reply { from: Caller::Isolate(isolate), response, pending } => {
                self.reply(isolate, response, pending)
            }
            Event::Reply { from: Caller::Relay(location), response, pending } => {
                self.relay_reply(location, response, pending)
            }
            Event::Failed { from: Caller::Isolate(isolate), pending } => self.failed(isolate, pending),
            Event::Failed { from: Caller::Relay(location), pending } => self.relay_failed(location, pending),
            Event::AtRelay { location, isolate, call } => {
                let relay = &mut self.locations[location].relay;
                relay.queue.push_back((isolate, call));
                if !relay.busy {
                    relay.busy = true;
                    self.at(self.now_us, Event::RelayServe { location });
                }
            }
            Event::RelayServe { location } => self.relay_serve(location),
            Event::RelayAnswer { isolate, id, answer } => self.lease_answer(isolate, &id, answer),
            Event::RelayWake { location } => self.relay_wake(location),
            Event::Finish { isolate, request, held } => self.finish(isolate, request, held),
            Event::Poll { isolate, request, step_ms } => self.poll(isolate, request, step_ms),
            Event::Watch { isolate } => {
                let now = self.now_ms();
                if self.isolates[isolate].ledger.expire(DEP, now) {
                    self.report(isolate);
                }
            }
            Event::Retire { slot } => self.retire(slot),
            Event::Flush { isolate } => self.flush(isolate),
            Event::Snapshot => {
                // The alarm's write-behind: what a restart comes back to.
                self.object.snapshot = Some(self.object.state.to_snapshot());
                if self.running() {
                    self.after_ms(WRITE_BEHIND_MS, Event::Snapshot);
                }
            }
            Event::Restart => {
                let now = self.now_ms();
                self.object.state = match &self.object.snapshot {
                    Some(s) => LimiterState::from_snapshot(s).expect("the object's own snapshot loads"),
                    None => LimiterState::new(self.config.limits.clone(), now),
                };
            }
            Event::Audit => self.recorder.unsettled_after_end = Some(self.object.state.in_flight()),
            Event::Tick => {
                self.refresh_norm();
                if self.running() {
                    self.after_ms(1_000, Event::Tick);
                }
            }
        }
    }

    fn diurnal(&self, location: usize) -> f64 {
        let day = self.config.duration_s as f64 * 1e6;
        let angle = std::f64::consts::TAU * self.now_us as f64 / day + self.locations[location].phase;
        1.0 + self.config.diurnal * angle.sin()
    }

    fn refresh_norm(&mut self) {
        self.norm = (0..self.locations.len()).map(|l| self.locations[l].weight * self.diurnal(l)).sum();
    }

    fn location_rate(&self, location: usize) -> f64 {
        let share = self.locations[location].weight * self.diurnal(location) / self.norm;
        let burst = match self.config.burst {
            Some(b) if b.location == location && (b.from_s * 1_000_000..b.to_s * 1_000_000).contains(&self.now_us) => {
                b.factor
            }
            _ => 1.0,
        };
        self.config.rate_per_s * share * burst
    }

    fn schedule_batch(&mut self, location: usize) {
        let batches_per_s = self.location_rate(location) / self.config.batch_mean;
        let gap_us = (self.rng.exp(1e6 / batches_per_s.max(1e-9)) as u64).max(1);
        // Exponential gaps are memoryless: past a second, draw again then, so a burst or the
        // day's turn is seen within a second.
        let event = if gap_us > 1_000_000 { Event::Rearm { location } } else { Event::Batch { location } };
        self.at(self.now_us + gap_us.min(1_000_000), event);
    }

    fn batch(&mut self, location: usize) {
        if !self.running() {
            return;
        }
        let slots = &self.locations[location].slots;
        let slot = slots[self.rng.below(slots.len() as u64) as usize];
        let n = self.rng.geometric(self.config.batch_mean);
        let mut t = self.now_us;
        for _ in 0..n {
            self.at(t, Event::Arrive { slot });
            t += (self.rng.exp(self.config.batch_gap_ms) * 1_000.0) as u64;
        }
        self.schedule_batch(location);
    }

    fn retire(&mut self, slot: usize) {
        if !self.running() {
            return;
        }
        let location = self.isolates[self.slots[slot]].location;
        self.slots[slot] = self.isolates.len();
        self.isolates.push(Isolate::new(location, self.isolates.len(), self.config.relays));
        let life = self.life_us();
        self.at(self.now_us + life, Event::Retire { slot });
    }

    fn new_request(&mut self, isolate: usize) -> Request {
        let t = self.config.tokens;
        let real_in = self.rng.lognormal(t.input_median, t.input_sigma).clamp(1.0, 200_000.0) as u64;
        let real_out = (self.rng.lognormal(t.output_median, t.output_sigma) as u64).clamp(1, t.max_tokens);
        // The gateway counts characters, not tokens: its input estimate is off either way.
        let est_in = (real_in as f64 * self.rng.uniform(0.85, 1.2)) as u64;
        let est_out = match t.estimate {
            Estimate::MaxTokens => t.max_tokens,
            Estimate::Learned => self.isolates[isolate].history.estimate(DEP, Ingress::Messages, t.max_tokens),
        };
        self.next_request += 1;
        Request {
            id: self.next_request,
            arrival_us: self.now_us,
            need: Amounts::request(est_in, est_out),
            real: TokenUsage { input: real_in, output: real_out },
            duration_ms: self.rng.lognormal(2_500.0, 0.7).clamp(200.0, 60_000.0) as u64,
        }
    }

    fn arrive(&mut self, isolate: usize) {
        let request = self.new_request(isolate);
        let real = request.real.input + request.real.output;
        let elapsed = self.elapsed_ms();
        let rec = &mut self.recorder;
        rec.requests += 1;
        rec.estimated_tokens += request.need.tokens;
        rec.real_tokens += real;
        rec.offered(elapsed, real);
        let (now, limits) = (self.now_ms(), self.config.limits.clone());
        let decision = self.isolates[isolate].ledger.admit(DEP, &limits, request.need, now);
        if decision.watch_settles {
            self.at(self.now_us, Event::Flush { isolate });
        }
        self.proceed(isolate, request, decision);
    }

    /// A request that waited for an ask, decided again.
    fn admit_again(&mut self, isolate: usize, request: Request, may_wait: bool) {
        let (now, limits) = (self.now_ms(), self.config.limits.clone());
        let may_wait = may_wait && now < self.wait_deadline_ms(&request);
        let decision = self.isolates[isolate].ledger.admit_again(DEP, &limits, request.need, now, may_wait);
        self.proceed(isolate, request, decision);
    }

    fn wait_deadline_ms(&self, request: &Request) -> u64 {
        T0_MS + request.arrival_us / 1_000 + MAX_ASK_WAIT_MS
    }

    /// One look of a waiting request at the ledger, on the shell's timetable (1, 2, 4 … ms apart).
    fn poll(&mut self, isolate: usize, id: u64, step_ms: u64) {
        let now = self.now_ms();
        let iso = &mut self.isolates[isolate];
        let Some(i) = iso.waiting.iter().position(|w| w.request.id == id) else { return };
        let changed = iso.ledger.changes(DEP) != iso.waiting[i].seen;
        if changed || now >= iso.waiting[i].until_ms {
            let waiter = iso.waiting.remove(i);
            self.admit_again(isolate, waiter.request, changed);
            return;
        }
        let step_ms = (step_ms * 2).min(ASK_POLL_MAX_MS);
        let wait = step_ms.min(iso.waiting[i].until_ms - now);
        self.after_ms(wait, Event::Poll { isolate, request: id, step_ms });
    }

    /// Follows the ledger's decision for one request, as `admission::admit_to` does.
    fn proceed(&mut self, isolate: usize, request: Request, decision: Decision) {
        let now = self.now_ms();
        if let Some(until) = decision.wait_until_ms {
            let until = until.min(self.wait_deadline_ms(&request));
            if until > now {
                let id = request.id;
                let seen = self.isolates[isolate].ledger.changes(DEP);
                self.isolates[isolate].waiting.push(Waiter { request, until_ms: until, seen });
                let step_ms = ASK_POLL_FIRST_MS.min(until - now);
                self.after_ms(step_ms, Event::Poll { isolate, request: id, step_ms: ASK_POLL_FIRST_MS });
                return;
            }
        }
        if decision.via_relay {
            if let Some(ask) = decision.ask.clone() {
                self.send_relay_lease(isolate, ask);
            }
            match decision.local {
                Some(local) => self.admitted_locally(isolate, request, local.ticket),
                // Waits for the relay's answer (the ledger points it at the ask in flight).
                None => self.admit_again(isolate, request, true),
            }
            return;
        }
        if let Some(local) = decision.local {
            if let Some(ask) = decision.ask {
                self.send_lease(isolate, ask);
            }
            self.admitted_locally(isolate, request, local.ticket);
            return;
        }
        let (max_wait_ms, limits) = (self.config.max_wait_ms, self.config.limits.clone());
        if let Some((_code, _retry)) = self.isolates[isolate].ledger.held_off(DEP, max_wait_ms, now) {
            if let Some(ask) = &decision.ask {
                self.isolates[isolate].ledger.ask_lost(DEP, &ask.id);
            }
            self.refused(isolate, &request);
            return;
        }
        if self.isolates[isolate].ledger.backing_off(DEP, now) {
            if let Some(ask) = decision.ask {
                self.send_lease(isolate, ask);
            }
            self.fail_open(isolate, request);
            return;
        }
        let tally = self.isolates[isolate].ledger.take_tally(DEP, now);
        let message = AdmitRequest {
            id: format!("r{}", request.id),
            limits: Some(limits),
            estimate: TokenUsage { input: request.need.input, output: request.need.output },
            max_wait_ms,
            lease: decision.ask.clone(),
            tally: tally.clone(),
            tenant: None,
        };
        self.send(isolate, LimiterRequest::Admit(message), Pending::Admit { request, ask: decision.ask, tally });
    }

    /// The settle watcher (`admission::watch_settles`).
    fn flush(&mut self, isolate: usize) {
        loop {
            let now = self.now_ms();
            match self.isolates[isolate].ledger.flush_step(DEP, now) {
                FlushStep::Done => return,
                FlushStep::WaitUntil(due_ms) => {
                    self.at((due_ms - T0_MS) * 1_000, Event::Flush { isolate });
                    return;
                }
                FlushStep::Send => self.report(isolate),
            }
        }
    }

    fn send_relay_lease(&mut self, isolate: usize, ask: LeaseAsk) {
        let now = self.now_ms();
        let tally = self.isolates[isolate].ledger.take_relay_tally(DEP, now);
        let message = LeaseRequest { id: ask.id, want: ask.want, limits: Some(self.config.limits.clone()), tally };
        self.send_to_relay(isolate, RelayCall::Lease(Box::new(message)));
    }

    fn send_to_relay(&mut self, isolate: usize, call: RelayCall) {
        let location = self.isolates[isolate].location;
        let at = self.now_us + self.relay_one_way_us();
        self.at(at, Event::AtRelay { location, isolate, call });
    }

    /// Within a location: half a millisecond to two each way.
    fn relay_one_way_us(&mut self) -> u64 {
        (self.net.uniform(0.5, 2.0) * 1_000.0) as u64
    }

    fn relay_serve(&mut self, location: usize) {
        let Some((isolate, call)) = self.locations[location].relay.queue.pop_front() else {
            self.locations[location].relay.busy = false;
            return;
        };
        let now = self.now_ms();
        let relay = &mut self.locations[location].relay;
        let mut upstream = None;
        match call {
            RelayCall::Lease(req) => {
                let (answer, up) = relay.state.ask(&req, now);
                upstream = up;
                match answer {
                    SubAnswer::Now(answer) => {
                        let back = self.now_us + self.config.service_us + self.relay_one_way_us();
                        self.at(back, Event::RelayAnswer { isolate, id: req.id, answer });
                    }
                    SubAnswer::Wait => relay.waiting.push((isolate, *req, now + UPSTREAM_TIMEOUT_MS)),
                }
            }
            RelayCall::Report(tally) => relay.state.report(&tally, now),
        }
        if let Some(up) = upstream {
            self.relay_send(
                location,
                LimiterRequest::Lease(up.clone()),
                Pending::RelayLease { ask: up.id, tally: up.tally },
            );
        }
        self.arm_relay(location);
        self.at(self.now_us + self.config.service_us, Event::RelayServe { location });
    }

    fn relay_send(&mut self, location: usize, message: LimiterRequest, pending: Pending) {
        self.send_from(Caller::Relay(location), message, pending);
    }

    /// Sets the relay's alarm for its next due time, if earlier than the one set.
    fn arm_relay(&mut self, location: usize) {
        let relay = &mut self.locations[location].relay;
        let deadline = relay.waiting.iter().map(|w| w.2).min();
        let Some(due) = [relay.state.next_due_ms(), deadline].into_iter().flatten().min() else { return };
        if relay.wake_at_ms.is_some_and(|at| at <= due && at > T0_MS + self.now_us / 1_000) {
            return;
        }
        relay.wake_at_ms = Some(due);
        let at_us = due.saturating_sub(T0_MS) * 1_000;
        self.at(at_us.max(self.now_us), Event::RelayWake { location });
    }

    fn relay_wake(&mut self, location: usize) {
        let now = self.now_ms();
        let relay = &mut self.locations[location].relay;
        if relay.wake_at_ms.is_some_and(|at| at <= now) {
            relay.wake_at_ms = None;
        }
        if let Some(tally) = relay.state.due_report(now) {
            self.relay_send(location, LimiterRequest::Report(tally.clone()), Pending::RelayReport { tally });
        }
        self.answer_waiting(location, false);
        self.arm_relay(location);
    }

    /// Asks waiting at the relay, looked at again once the object has answered (or the
    /// relay's alarm rang): answered, still waiting, or given up on when their wait is over.
    fn answer_waiting(&mut self, location: usize, answered: bool) {
        let now = self.now_ms();
        let waiting = std::mem::take(&mut self.locations[location].relay.waiting);
        for (isolate, req, until_ms) in waiting {
            let relay = &mut self.locations[location].relay;
            let (answer, upstream) = if now >= until_ms {
                (SubAnswer::Now(relay.state.give_up(&req, now)), None)
            } else if answered {
                relay.state.ask_again(&req, now)
            } else {
                (SubAnswer::Wait, None)
            };
            if let Some(up) = upstream {
                let pending = Pending::RelayLease { ask: up.id.clone(), tally: up.tally.clone() };
                self.relay_send(location, LimiterRequest::Lease(up), pending);
            }
            match answer {
                SubAnswer::Now(answer) => {
                    let back = self.now_us + self.relay_one_way_us();
                    self.at(back, Event::RelayAnswer { isolate, id: req.id, answer });
                }
                SubAnswer::Wait => self.locations[location].relay.waiting.push((isolate, req, until_ms)),
            }
        }
    }

    fn relay_reply(&mut self, location: usize, response: LimiterResponse, pending: Pending) {
        let now = self.now_ms();
        let relay = &mut self.locations[location].relay.state;
        match (pending, response) {
            (Pending::RelayLease { ask, .. }, LimiterResponse::Lease(LeaseDecision::Granted(grant))) => {
                relay.upstream_granted(&ask, &grant, now)
            }
            (
                Pending::RelayLease { ask, .. },
                LimiterResponse::Lease(LeaseDecision::Refused { code, retry_after_ms }),
            ) => relay.upstream_refused(&ask, code, retry_after_ms, now),
            (Pending::RelayReport { .. }, LimiterResponse::Report(r)) => {
                if r.breaker != BreakerState::Closed {
                    relay.unhealthy(RejectCode::BreakerOpen, MAX_QUIET_MS, now);
                }
            }
            _ => panic!("the object answered the relay another operation"),
        }
        self.answer_waiting(location, true);
        self.arm_relay(location);
    }

    fn relay_failed(&mut self, location: usize, pending: Pending) {
        let now = self.now_ms();
        let relay = &mut self.locations[location].relay.state;
        match pending {
            Pending::RelayLease { ask, tally } => relay.upstream_lost(Some(&ask), tally, now),
            Pending::RelayReport { tally } => relay.upstream_lost(None, tally, now),
            _ => unreachable!("only a relay's messages fail back to it"),
        }
        self.answer_waiting(location, true);
        self.arm_relay(location);
    }

    fn location_of(&self, from: Caller) -> usize {
        match from {
            Caller::Isolate(i) => self.isolates[i].location,
            Caller::Relay(location) => location,
        }
    }

    fn send_lease(&mut self, isolate: usize, ask: LeaseAsk) {
        let now = self.now_ms();
        let tally = self.isolates[isolate].ledger.take_tally(DEP, now);
        let message = LeaseRequest {
            id: ask.id.clone(),
            want: ask.want,
            limits: Some(self.config.limits.clone()),
            tally: tally.clone(),
        };
        self.send(isolate, LimiterRequest::Lease(message), Pending::Lease { ask: ask.id, tally });
    }

    /// Hands back whatever is due (returns, successes, corrections), if anything: to the relay
    /// when its slices wait to go back (it forwards the rest), else to the object.
    fn report(&mut self, isolate: usize) {
        let now = self.now_ms();
        if self.isolates[isolate].ledger.relay_pending(DEP) {
            let tally = self.isolates[isolate].ledger.take_relay_tally(DEP, now);
            self.send_to_relay(isolate, RelayCall::Report(tally));
            return;
        }
        let tally = self.isolates[isolate].ledger.take_tally(DEP, now);
        if !tally.is_empty() {
            self.send(isolate, LimiterRequest::Report(tally.clone()), Pending::Report { tally });
        }
    }

    fn one_way_us(&mut self, location: usize) -> u64 {
        (self.locations[location].rtt_ms / 2.0 * self.net.uniform(0.9, 1.3) * 1_000.0) as u64
    }

    fn partitioned(&self, location: usize) -> Option<u64> {
        let p = self.config.partition?;
        let cut = p.location == location && (p.from_s * 1_000_000..p.to_s * 1_000_000).contains(&self.now_us);
        cut.then_some(p.fail_ms)
    }

    fn send(&mut self, isolate: usize, message: LimiterRequest, pending: Pending) {
        self.send_from(Caller::Isolate(isolate), message, pending);
    }

    /// A message to the object over its sender's location's round trip (or failing, cut off).
    fn send_from(&mut self, from: Caller, message: LimiterRequest, pending: Pending) {
        let location = self.location_of(from);
        if let Some(fail_ms) = self.partitioned(location) {
            self.after_ms(fail_ms, Event::Failed { from, pending });
            return;
        }
        let at = self.now_us + self.one_way_us(location);
        self.at(at, Event::AtObject { from, message: Box::new(message), pending });
    }

    fn serve(&mut self) {
        let Some((arrived, from, message, pending)) = self.object.queue.pop_front() else {
            self.object.busy = false;
            return;
        };
        let (now, elapsed) = (self.now_ms(), self.elapsed_ms());
        self.recorder.call(elapsed, self.now_us - arrived);
        let rand = self.net.next_u64();
        let response = self.object.state.handle(&message, now, rand);
        if let (
            LimiterResponse::Admit(AdmitDecision::Admitted { start_after_ms, .. }),
            Pending::Admit { request, .. },
        ) = (&response, &pending)
        {
            let tokens = request.real.input + request.real.output;
            self.recorder.used(elapsed + start_after_ms, tokens);
        }
        let done = self.now_us + self.config.service_us;
        let back = self.one_way_us(self.location_of(from));
        self.at(done + back, Event::Reply { from, response, pending });
        self.at(done, Event::Serve);
    }

    fn reply(&mut self, isolate: usize, response: LimiterResponse, pending: Pending) {
        let now = self.now_ms();
        match (pending, response) {
            (Pending::Admit { request, ask, .. }, LimiterResponse::Admit(decision)) => {
                self.admit_answer(isolate, request, ask, decision)
            }
            (Pending::Lease { ask, .. }, LimiterResponse::Lease(answer)) => self.lease_answer(isolate, &ask, answer),
            (Pending::Settle { .. }, LimiterResponse::Settle(r)) if r.breaker != BreakerState::Closed => {
                self.isolates[isolate].ledger.unhealthy(DEP, MAX_QUIET_MS, now);
            }
            (Pending::Report { .. }, LimiterResponse::Report(r)) if r.breaker != BreakerState::Closed => {
                self.isolates[isolate].ledger.unhealthy(DEP, MAX_QUIET_MS, now);
            }
            (Pending::Settle { .. }, LimiterResponse::Settle(_))
            | (Pending::Report { .. }, LimiterResponse::Report(_)) => {}
            _ => panic!("the object answered another operation"),
        }
    }

    fn admit_answer(&mut self, isolate: usize, request: Request, ask: Option<LeaseAsk>, decision: AdmitDecision) {
        let now = self.now_ms();
        match decision {
            AdmitDecision::Admitted { start_after_ms, lease, probe, .. } => {
                if let Some(ask) = ask {
                    let answer = lease.map_or(
                        LeaseDecision::Refused { code: RejectCode::Rpm, retry_after_ms: LEASE_RETRY_MS },
                        LeaseDecision::Granted,
                    );
                    self.lease_answer(isolate, &ask.id, answer);
                }
                self.recorder.via_object += 1;
                let waited = (self.now_us - request.arrival_us) / 1_000 + start_after_ms;
                self.recorder.waited_ms.push(waited as u32);
                let done = start_after_ms + request.duration_ms;
                let deferrable = !probe && self.config.limits.max_concurrent.is_none();
                self.after_ms(done, Event::Finish { isolate, request, held: Held::Object { deferrable } });
            }
            AdmitDecision::Rejected { code, retry_after_ms, .. } => {
                match ask {
                    Some(ask) => self.lease_answer(isolate, &ask.id, LeaseDecision::Refused { code, retry_after_ms }),
                    None if code.is_health() && self.isolates[isolate].ledger.unhealthy(DEP, retry_after_ms, now) => {
                        self.report(isolate);
                    }
                    None => {}
                }
                let limits = self.config.limits.clone();
                if !code.is_health() {
                    if let Some(local) = self.isolates[isolate].ledger.admit_held(DEP, &limits, request.need, now) {
                        self.admitted_locally(isolate, request, local.ticket);
                        return;
                    }
                    let max_wait_ms = self.config.max_wait_ms;
                    self.isolates[isolate].ledger.room_refused(DEP, code, retry_after_ms, max_wait_ms, now);
                }
                self.refused(isolate, &request);
            }
        }
    }

    /// Counts a refusal, and whether another isolate's slice held room for it meanwhile.
    fn refused(&mut self, isolate: usize, request: &Request) {
        self.recorder.refused += 1;
        let tokens_limited = self.config.limits.tpm.is_some();
        let room = |held: limiter::limits::Delta| {
            held.requests >= 1 && (!tokens_limited || held.tokens >= request.need.tokens as i64)
        };
        let room_elsewhere =
            self.isolates.iter().enumerate().any(|(i, other)| i != isolate && room(other.ledger.held(DEP)))
                || self.locations.iter().any(|l| room(l.relay.state.held()));
        if room_elsewhere {
            self.recorder.false_refused += 1;
        }
    }

    fn lease_answer(&mut self, isolate: usize, id: &str, answer: LeaseDecision) {
        let (now, limits) = (self.now_ms(), self.config.limits.clone());
        let ledger = &mut self.isolates[isolate].ledger;
        match answer {
            LeaseDecision::Granted(grant) => {
                if let Some(expires_ms) = ledger.granted(DEP, id, &limits, &grant, now) {
                    self.at((expires_ms - T0_MS) * 1_000, Event::Watch { isolate });
                }
            }
            LeaseDecision::Refused { code, retry_after_ms } => {
                if ledger.refused(DEP, id, code, retry_after_ms, now) {
                    self.report(isolate);
                }
            }
        }
    }

    /// The object could not be reached: what the message carried is kept for the next one, and
    /// an admit fails open.
    fn failed(&mut self, isolate: usize, pending: Pending) {
        let now = self.now_ms();
        let ledger = &mut self.isolates[isolate].ledger;
        ledger.unreachable(DEP, now);
        match pending {
            Pending::Admit { request, ask, tally } => {
                ledger.restore_tally(DEP, tally);
                if let Some(ask) = ask {
                    ledger.ask_lost(DEP, &ask.id);
                }
                self.recorder.waited_ms.push(((self.now_us - request.arrival_us) / 1_000) as u32);
                self.fail_open(isolate, request);
            }
            Pending::Lease { ask, tally } => {
                ledger.restore_tally(DEP, tally);
                ledger.ask_lost(DEP, &ask);
            }
            Pending::Settle { tally } | Pending::Report { tally } => ledger.restore_tally(DEP, tally),
            Pending::RelayLease { .. } | Pending::RelayReport { .. } => unreachable!("a relay's message"),
        }
    }

    fn fail_open(&mut self, isolate: usize, request: Request) {
        self.recorder.fail_open += 1;
        let tokens = request.real.input + request.real.output;
        self.recorder.used(self.elapsed_ms(), tokens);
        self.after_ms(request.duration_ms, Event::Finish { isolate, request, held: Held::Unlimited });
    }

    fn admitted_locally(&mut self, isolate: usize, request: Request, ticket: Ticket) {
        self.recorder.local += 1;
        if self.now_us > request.arrival_us {
            self.recorder.waited_ms.push(((self.now_us - request.arrival_us) / 1_000) as u32);
        }
        let tokens = request.real.input + request.real.output;
        self.recorder.used(self.elapsed_ms(), tokens);
        self.after_ms(request.duration_ms, Event::Finish { isolate, request, held: Held::Local(ticket) });
    }

    fn finish(&mut self, isolate: usize, request: Request, held: Held) {
        let now = self.now_ms();
        let (outcome, signals) = (Outcome::Success, UpstreamSignals::default());
        let iso = &mut self.isolates[isolate];
        iso.history.record(DEP, Ingress::Messages, request.real.output);
        let id = format!("r{}", request.id);
        let message = match held {
            Held::Unlimited => return,
            Held::Local(ticket) => {
                match iso.ledger.settle_local(DEP, &ticket, &outcome, Some(request.real), &signals, now) {
                    SettleAction::Done => return,
                    SettleAction::Now(tally) => SettleRequest { id, outcome, usage: None, signals, tally: *tally },
                }
            }
            Held::Object { deferrable } => {
                let usage = Some(request.real);
                match iso.ledger.settle_object(DEP, &id, &outcome, usage, &signals, deferrable, now) {
                    ObjectSettle::Later { due_ms: None } => return,
                    ObjectSettle::Later { due_ms: Some(due_ms) } => {
                        self.at((due_ms - T0_MS) * 1_000, Event::Flush { isolate });
                        return;
                    }
                    ObjectSettle::Now(tally) => SettleRequest { id, outcome, usage, signals, tally },
                }
            }
        };
        let tally = message.tally.clone();
        self.send(isolate, LimiterRequest::Settle(message), Pending::Settle { tally });
    }
}

impl Isolate {
    fn new(location: usize, index: usize, relays: bool) -> Self {
        let ledger = LeaseLedger::new(&format!("i{index}"));
        Isolate {
            location,
            ledger: if relays { ledger.with_relay() } else { ledger },
            history: OutputHistory::default(),
            waiting: Vec::new(),
        }
    }
}
