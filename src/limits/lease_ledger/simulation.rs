//! Several isolates and one limiter object, with message latency, seeded random traffic, vendor
//! failures and isolate crashes: whatever happens, the isolates together never admit more than
//! the buckets allow.

use super::*;
use limiter::breaker::{BreakerConfig, BreakerState, Trip};
use limiter::protocol::{
    AdmitDecision, AdmitRequest, LeaseDecision, LeaseRequest, LimiterRequest, LimiterResponse, SettleRequest,
};
use limiter::rng::XorShift;
use limiter::LimiterState;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

const T0: u64 = 1_700_000_040_000;
const MINUTE_MS: u64 = 60_000;
const DEP: &str = "dep";
/// One way, object ↔ isolate; below the expiry margin, as on one machine or in one region.
const MAX_LATENCY_MS: u64 = 60;

enum Pending {
    Admit { ask: Option<LeaseAsk>, need: Amounts, id: String },
    Lease { id: String },
    Settle,
    Report,
}

enum Held {
    Local { ticket: Ticket, id: String },
    Object { id: String },
}

enum Event {
    Arrive(usize),
    AtObject { isolate: usize, generation: u32, request: Box<LimiterRequest>, pending: Pending },
    Reply { isolate: usize, generation: u32, response: LimiterResponse, pending: Pending },
    Finish { isolate: usize, generation: u32, held: Held },
    Watch { isolate: usize, generation: u32 },
    Crash(usize),
}

struct Traffic {
    isolates: usize,
    /// Mean milliseconds between one isolate's requests.
    gap_ms: u64,
    run_ms: u64,
    failures_per_mille: u64,
    crashes: bool,
    big_requests: bool,
    /// Usage often beyond the estimate (charges), rather than mostly below it (refunds).
    wild_usage: bool,
}

struct World {
    now: u64,
    rng: XorShift,
    object: LimiterState,
    limits: Limits,
    caches: Vec<(LeaseLedger, u32)>,
    queue: BinaryHeap<Reverse<(u64, u64)>>,
    events: HashMap<u64, Event>,
    seq: u64,
    /// When each admitted request started, as the capacity it used was counted.
    uses: Vec<u64>,
    requests: u64,
    messages: u64,
    local: u64,
    /// Local settles that had to reach the object at once.
    urgent: u64,
    traffic: Traffic,
}

impl World {
    fn new(seed: u64, limits: Limits, traffic: Traffic) -> Self {
        let caches = (0..traffic.isolates).map(|i| (LeaseLedger::new(&format!("i{i}g0")), 0)).collect();
        let mut w = World {
            now: T0,
            rng: XorShift::new(seed),
            object: LimiterState::new(limits.clone(), T0),
            limits,
            caches,
            queue: BinaryHeap::new(),
            events: HashMap::new(),
            seq: 0,
            uses: Vec::new(),
            requests: 0,
            messages: 0,
            local: 0,
            urgent: 0,
            traffic,
        };
        for i in 0..w.traffic.isolates {
            let at = T0 + w.rng.below(w.traffic.gap_ms.max(1));
            w.at(at, Event::Arrive(i));
        }
        w
    }

    fn at(&mut self, at: u64, event: Event) {
        self.seq += 1;
        self.queue.push(Reverse((at, self.seq)));
        self.events.insert(self.seq, event);
    }

    fn latency(&mut self) -> u64 {
        1 + self.rng.below(MAX_LATENCY_MS)
    }

    fn send(&mut self, isolate: usize, request: LimiterRequest, pending: Pending) {
        self.messages += 1;
        let generation = self.caches[isolate].1;
        let at = self.now + self.latency();
        self.at(at, Event::AtObject { isolate, generation, request: Box::new(request), pending });
    }

    fn cache(&mut self, isolate: usize) -> &mut LeaseLedger {
        &mut self.caches[isolate].0
    }

    fn alive(&self, isolate: usize, generation: u32) -> bool {
        self.caches[isolate].1 == generation
    }

    fn run(&mut self) {
        while let Some(Reverse((at, seq))) = self.queue.pop() {
            self.now = at;
            let event = self.events.remove(&seq).expect("every queued event is stored");
            self.step(event);
            self.check_holdings();
        }
    }

    fn step(&mut self, event: Event) {
        match event {
            Event::Arrive(i) => self.arrive(i),
            Event::AtObject { isolate, generation, request, pending } => {
                let response = self.object.handle(&request, self.now, self.rng.next_u64());
                if let LimiterResponse::Admit(AdmitDecision::Admitted { start_after_ms, .. }) = &response {
                    self.uses.push(self.now + start_after_ms);
                }
                let at = self.now + self.latency();
                self.at(at, Event::Reply { isolate, generation, response, pending });
            }
            Event::Reply { isolate, generation, response, pending } if self.alive(isolate, generation) => {
                self.reply(isolate, response, pending)
            }
            Event::Finish { isolate, generation, held } if self.alive(isolate, generation) => {
                self.finish(isolate, held)
            }
            Event::Watch { isolate, generation } if self.alive(isolate, generation) => {
                let now = self.now;
                if self.cache(isolate).expire(DEP, now) {
                    let tally = self.cache(isolate).take_tally(DEP, now);
                    self.send(isolate, LimiterRequest::Report(tally), Pending::Report);
                }
            }
            Event::Crash(i) => {
                let generation = self.caches[i].1 + 1;
                self.caches[i] = (LeaseLedger::new(&format!("i{i}g{generation}")), generation);
            }
            // Anything addressed to an isolate that died since.
            Event::Reply { .. } | Event::Finish { .. } | Event::Watch { .. } => {}
        }
    }

    fn arrive(&mut self, i: usize) {
        if self.now < T0 + self.traffic.run_ms {
            let gap = 1 + self.rng.below(2 * self.traffic.gap_ms);
            self.at(self.now + gap, Event::Arrive(i));
        }
        if self.traffic.crashes && self.rng.below(2_000) == 0 {
            self.at(self.now, Event::Crash(i));
        }
        self.requests += 1;
        let input = if self.traffic.big_requests && self.rng.below(10) == 0 { 5_000 } else { self.rng.below(400) };
        let need = Amounts::request(input, self.rng.below(200));
        let (now, limits) = (self.now, self.limits.clone());
        let decision = self.cache(i).admit(DEP, &limits, need, now);
        let id = format!("r{}", self.requests);
        if let Some(local) = decision.local {
            self.admitted_locally(i, local.ticket, id);
            if let Some(ask) = decision.ask {
                let tally = self.cache(i).take_tally(DEP, now);
                let request = LeaseRequest { id: ask.id.clone(), want: ask.want, limits: Some(limits), tally };
                self.send(i, LimiterRequest::Lease(request), Pending::Lease { id: ask.id });
            }
            return;
        }
        let tally = self.cache(i).take_tally(DEP, now);
        let max_wait_ms = [0, 0, 500, 2_000][self.rng.below(4) as usize];
        let estimate = TokenUsage { input: need.input, output: need.output };
        let request = AdmitRequest {
            id: id.clone(),
            limits: Some(limits),
            estimate,
            max_wait_ms,
            lease: decision.ask.clone(),
            tally,
            tenant: None,
        };
        self.send(i, LimiterRequest::Admit(request), Pending::Admit { ask: decision.ask, need, id });
    }

    fn admitted_locally(&mut self, i: usize, ticket: Ticket, id: String) {
        self.local += 1;
        self.uses.push(self.now);
        let (generation, done) = (self.caches[i].1, self.now + 20 + self.rng.below(2_000));
        self.at(done, Event::Finish { isolate: i, generation, held: Held::Local { ticket, id } });
    }

    fn answer(&mut self, i: usize, id: &str, answer: LeaseDecision) {
        let (now, limits) = (self.now, self.limits.clone());
        match answer {
            LeaseDecision::Granted(grant) => {
                if let Some(expires_ms) = self.cache(i).granted(DEP, id, &limits, &grant, now) {
                    let generation = self.caches[i].1;
                    self.at(expires_ms, Event::Watch { isolate: i, generation });
                }
            }
            LeaseDecision::Refused { code, retry_after_ms } => {
                if self.cache(i).refused(DEP, id, code, retry_after_ms, now) {
                    let tally = self.cache(i).take_tally(DEP, now);
                    self.send(i, LimiterRequest::Report(tally), Pending::Report);
                }
            }
        }
    }

    fn reply(&mut self, i: usize, response: LimiterResponse, pending: Pending) {
        let now = self.now;
        match (pending, response) {
            (
                Pending::Admit { ask, id, .. },
                LimiterResponse::Admit(AdmitDecision::Admitted { start_after_ms, lease, .. }),
            ) => {
                if let Some(ask) = ask {
                    let answer = lease.map_or(
                        LeaseDecision::Refused { code: RejectCode::Rpm, retry_after_ms: 1_000 },
                        LeaseDecision::Granted,
                    );
                    self.answer(i, &ask.id, answer);
                }
                let (generation, done) = (self.caches[i].1, now + start_after_ms + 20 + self.rng.below(2_000));
                self.at(done, Event::Finish { isolate: i, generation, held: Held::Object { id } });
            }
            (
                Pending::Admit { ask, need, id },
                LimiterResponse::Admit(AdmitDecision::Rejected { code, retry_after_ms, .. }),
            ) => {
                match ask {
                    Some(ask) => self.answer(i, &ask.id, LeaseDecision::Refused { code, retry_after_ms }),
                    None if code.is_health() => {
                        self.cache(i).unhealthy(DEP, retry_after_ms, now);
                    }
                    None => {}
                }
                let limits = self.limits.clone();
                if !code.is_health() {
                    if let Some(local) = self.cache(i).admit_held(DEP, &limits, need, now) {
                        self.admitted_locally(i, local.ticket, id);
                    }
                }
            }
            (Pending::Lease { id }, LimiterResponse::Lease(answer)) => self.answer(i, &id, answer),
            (Pending::Settle, LimiterResponse::Settle(report)) if report.breaker != BreakerState::Closed => {
                self.cache(i).unhealthy(DEP, MAX_QUIET_MS, now);
            }
            (Pending::Report, LimiterResponse::Report(ack)) if ack.breaker != BreakerState::Closed => {
                self.cache(i).unhealthy(DEP, MAX_QUIET_MS, now);
            }
            (Pending::Settle, LimiterResponse::Settle(_)) | (Pending::Report, LimiterResponse::Report(_)) => {}
            _ => panic!("the object answered another operation"),
        }
    }

    fn finish(&mut self, i: usize, held: Held) {
        let now = self.now;
        let roll = self.rng.below(1_000);
        let outcome = match roll {
            r if r < self.traffic.failures_per_mille => Outcome::Failure,
            r if r < self.traffic.failures_per_mille * 3 / 2 => Outcome::RateLimited { retry_after_ms: Some(500) },
            _ => Outcome::Success,
        };
        let signals = match outcome {
            Outcome::RateLimited { retry_after_ms } => UpstreamSignals { retry_after_ms, ..UpstreamSignals::default() },
            _ => UpstreamSignals::default(),
        };
        let (input, output) = if self.traffic.wild_usage { (500, 300) } else { (300, 100) };
        let usage = (self.rng.below(4) > 0)
            .then(|| TokenUsage { input: self.rng.below(input), output: self.rng.below(output) });
        let request = match held {
            Held::Local { ticket, id } => {
                match self.cache(i).settle_local(DEP, &ticket, &outcome, usage, &signals, now) {
                    SettleAction::Done => return,
                    SettleAction::Now(tally) => {
                        self.urgent += 1;
                        assert_eq!(
                            self.cache(i).held(DEP),
                            Delta::default(),
                            "an urgent settle hands every slice back"
                        );
                        SettleRequest { id, outcome, usage: None, signals, tally: *tally }
                    }
                }
            }
            Held::Object { id } => match self.cache(i).settle_object(DEP, &id, &outcome, usage, &signals, true, now) {
                // A success rides with the isolate's next message.
                ObjectSettle::Later { .. } => return,
                ObjectSettle::Now(tally) => SettleRequest { id, outcome, usage, signals, tally },
            },
        };
        self.send(i, LimiterRequest::Settle(request), Pending::Settle);
    }

    /// Everything the isolates hold is counted by the object, and leases never hold more than
    /// their share of the buckets.
    fn check_holdings(&mut self) {
        let held: i64 = self.caches.iter().map(|(c, _)| c.held(DEP).requests).sum();
        let status = self.object.status(self.now);
        let counted = status.leases.held.requests as i64;
        assert!(held <= counted, "isolates hold {held} requests, the object counts {counted} at {}", self.now);
        let rpm = self.limits.rpm.unwrap_or(u64::MAX);
        assert!(status.leases.held.requests <= rpm / 2, "leases hold {counted} of {rpm}");
    }

    /// The admissions fit: exactly, counted from the start (a full bucket plus its refill since);
    /// and in every window, within the refill of one lease TTL (a lease's capacity may be used
    /// up to its TTL after the object took it).
    fn check_rate(&mut self, rpm: u64) {
        self.uses.sort_unstable();
        for (k, &t) in self.uses.iter().enumerate() {
            let allowed = rpm + rpm * (t - T0) / MINUTE_MS;
            assert!((k as u64) < allowed, "use #{} at +{} ms exceeds {allowed}", k + 1, t - T0);
        }
        let slack = (rpm * limiter::leases::HOT_LEASE_TTL_MS).div_ceil(MINUTE_MS);
        let full = ((rpm + slack) * MINUTE_MS) as i128;
        let (mut level, mut last) = (full, T0);
        for (k, &t) in self.uses.iter().enumerate() {
            level = (level + ((t - last) * rpm) as i128).min(full) - MINUTE_MS as i128;
            last = t;
            assert!(level >= 0, "use #{} at +{} ms exceeds the rate within a window", k + 1, t - T0);
        }
    }
}

fn limits(rpm: u64) -> Limits {
    Limits {
        rpm: Some(rpm),
        tpm: Some(rpm * 400),
        breaker: BreakerConfig { trip: Trip::Consecutive { failures: 4 }, open_ms: 2_000, ramp: vec![], enabled: true },
        reservation_ttl_ms: 30_000,
        ..Limits::default()
    }
}

#[test]
fn isolates_together_never_over_admit() {
    let mut totals = (0, 0, 0);
    for seed in 0..6 {
        for (isolates, rpm, gap_ms) in [(2, 120, 150), (4, 600, 40), (3, 3_000, 10)] {
            let traffic = Traffic {
                isolates,
                gap_ms,
                run_ms: 90_000,
                failures_per_mille: 3,
                crashes: true,
                big_requests: true,
                wild_usage: true,
            };
            let mut w = World::new(seed * 31 + isolates as u64, limits(rpm), traffic);
            w.run();
            w.check_rate(rpm);
            assert!(w.uses.len() as u64 > rpm, "seed {seed}: the run must saturate the limit ({})", w.uses.len());
            totals = (totals.0 + w.requests, totals.1 + w.local, totals.2 + w.uses.len() as u64);
        }
    }
    eprintln!("requests {} admitted locally {} admitted {}", totals.0, totals.1, totals.2);
    assert!(totals.1 * 6 > totals.2, "leases carried a good part of the admissions: {totals:?}");
}

#[test]
fn failures_and_pauses_stop_local_admission() {
    let traffic = Traffic {
        isolates: 3,
        gap_ms: 20,
        run_ms: 60_000,
        failures_per_mille: 40,
        crashes: false,
        big_requests: false,
        wild_usage: true,
    };
    let mut w = World::new(7, limits(100_000), traffic);
    w.run();
    w.check_rate(100_000);
    eprintln!("{} requests {} local {} urgent {} messages", w.requests, w.local, w.urgent, w.messages);
    assert!(w.urgent > 50, "failures of local admissions went to the object at once: {}", w.urgent);
    assert!(w.object.status(w.now).calls.settle >= w.urgent);
}

#[test]
fn at_load_one_round_trip_carries_many_requests() {
    let traffic = Traffic {
        isolates: 2,
        gap_ms: 5,
        run_ms: 60_000,
        failures_per_mille: 0,
        crashes: false,
        big_requests: false,
        wild_usage: false,
    };
    let mut w = World::new(3, limits(10_000_000), traffic);
    w.run();
    let per_message = w.requests / w.messages;
    eprintln!(
        "{} requests, {} messages, {} local {:?} {:?}",
        w.requests,
        w.messages,
        w.local,
        w.object.status(w.now).calls,
        w.object.status(w.now).leases
    );
    assert!(per_message >= 20, "{} requests per round trip", per_message);
    let status = w.object.status(w.now);
    let reported = status.leases.counts.local_successes;
    assert!(
        reported <= w.local && reported * 100 >= w.local * 99,
        "local successes reported: {reported} of {}",
        w.local
    );
    assert_eq!(status.leases.live, 0, "every lease was handed back or expired");
}
