//! The clock of one upstream attempt: how long each wait may last and, when it runs out, whose
//! failure it is. Pure: the attempt's start and the current time come in as arguments.
//!
//! Measured from when the request was sent:
//! - a stream's response headers within `connect_ms` (a vendor sends a stream's headers as soon as
//!   it accepts it; the Workers `fetch` shows no separate connection event), its first content
//!   within `first_token_ms` (keep-alives, pings and role-only chunks do not restart it; reasoning
//!   the door holds back meets it), then at most `idle_ms` between chunks, and the whole stream
//!   within `total_ms`;
//! - a JSON answer's first byte within `connect_ms + first_token_ms` (a vendor computes the whole
//!   answer before its first byte) and its whole body within `total_ms`.
//!
//! Before the client has any byte, the request's own deadline (the route's `timeout_ms` or the
//! client's `x-gateway-timeout-ms`) bounds every wait too. A connect, first-token, first-byte,
//! idle or total timeout before the client has a byte is the deployment's failure: it counts
//! for its breaker and the request may go elsewhere. The request's deadline says nothing about
//! the deployment's health and never counts; nor does a stream that was still delivering when
//! it reached its total bound (it ends with an error event and is billed as a cut stream).

use crate::config::routes::Timeouts;
use crate::providers::{ErrorClass, UpstreamError};

/// Which bound a wait ends at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    Connect,
    FirstToken,
    FirstByte,
    Idle,
    Total,
    /// `total_ms` reached by a stream the client is already reading.
    StreamTotal,
    /// The request's own deadline (all attempts), set by the route or the client.
    Deadline,
}

/// How long to wait now, and which bound that is (with its configured length, for the message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wait {
    pub ms: u64,
    pub bound: Bound,
    pub limit_ms: u64,
}

impl Wait {
    /// The failure when the wait runs out.
    pub fn expired(&self) -> UpstreamError {
        let limit = self.limit_ms;
        let (class, message) = match self.bound {
            Bound::Connect => (ErrorClass::Timeout, format!("no response headers within connect_ms ({limit} ms)")),
            Bound::FirstToken => (ErrorClass::Timeout, format!("no content within first_token_ms ({limit} ms)")),
            Bound::FirstByte => {
                (ErrorClass::Timeout, format!("no response within connect_ms + first_token_ms ({limit} ms)"))
            }
            Bound::Idle => (ErrorClass::Timeout, format!("upstream sent nothing for idle_ms ({limit} ms)")),
            Bound::Total => (ErrorClass::Timeout, format!("no complete answer within total_ms ({limit} ms)")),
            Bound::StreamTotal => (ErrorClass::DeadlineExceeded, format!("the stream reached total_ms ({limit} ms)")),
            Bound::Deadline => return crate::pipeline::plan::deadline_error(),
        };
        let mut err = UpstreamError::new(class, 0, message);
        err.vendor_code = Some(self.bound.code().to_string());
        err
    }
}

impl Bound {
    pub fn code(self) -> &'static str {
        match self {
            Bound::Connect => "connect_timeout",
            Bound::FirstToken => "first_token_timeout",
            Bound::FirstByte => "first_byte_timeout",
            Bound::Idle => "idle_timeout",
            Bound::Total => "total_timeout",
            Bound::StreamTotal => "stream_total_timeout",
            Bound::Deadline => "deadline_exceeded",
        }
    }
}

/// One attempt's bounds, from when its request was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptClock {
    sent_ms: u64,
    timeouts: Timeouts,
    /// The request's deadline (absolute).
    deadline_ms: u64,
}

impl AttemptClock {
    pub fn new(sent_ms: u64, timeouts: Timeouts, deadline_ms: u64) -> Self {
        AttemptClock { sent_ms, timeouts, deadline_ms }
    }

    pub fn sent_ms(&self) -> u64 {
        self.sent_ms
    }

    /// The wait for the response headers.
    pub fn headers(&self, stream: bool, now_ms: u64) -> Wait {
        let t = &self.timeouts;
        let own = if stream {
            (Bound::Connect, t.connect_ms)
        } else {
            (Bound::FirstByte, t.connect_ms.saturating_add(t.first_token_ms))
        };
        self.earliest(&[own, (Bound::Total, t.total_ms)], true, now_ms)
    }

    /// A stream's wait for its first content, however many keep-alives arrive meanwhile.
    pub fn first_token(&self, now_ms: u64) -> Wait {
        let t = &self.timeouts;
        self.earliest(&[(Bound::FirstToken, t.first_token_ms), (Bound::Total, t.total_ms)], true, now_ms)
    }

    /// A stream's next chunk while its reasoning is held back from the client: the model has
    /// started, so the idle bound replaces the first-token one; the request's deadline still holds.
    pub fn thinking(&self, now_ms: u64) -> Wait {
        self.idle_within(self.earliest(&[(Bound::Total, self.timeouts.total_ms)], true, now_ms))
    }

    /// A JSON body (or an error body) once its headers arrived.
    pub fn body(&self, now_ms: u64) -> Wait {
        self.earliest(&[(Bound::Total, self.timeouts.total_ms)], true, now_ms)
    }

    /// The next chunk of a stream the client is already reading: the client's deadline no longer
    /// cuts it (it has its answer coming), the idle and total bounds do.
    pub fn next_chunk(&self, now_ms: u64) -> Wait {
        self.idle_within(self.earliest(&[(Bound::StreamTotal, self.timeouts.total_ms)], false, now_ms))
    }

    /// `idle_ms` from now, unless `bound` comes sooner.
    fn idle_within(&self, bound: Wait) -> Wait {
        let idle = Wait { ms: self.timeouts.idle_ms, bound: Bound::Idle, limit_ms: self.timeouts.idle_ms };
        if bound.ms < idle.ms {
            bound
        } else {
            idle
        }
    }

    /// The soonest of `bounds` (each a length from sending), and the request's deadline if asked.
    fn earliest(&self, bounds: &[(Bound, u64)], with_deadline: bool, now_ms: u64) -> Wait {
        let mut soonest = (u64::MAX, Bound::Total, 0);
        for &(bound, limit) in bounds {
            let at = self.sent_ms.saturating_add(limit);
            if at < soonest.0 {
                soonest = (at, bound, limit);
            }
        }
        if with_deadline && self.deadline_ms < soonest.0 {
            soonest = (self.deadline_ms, Bound::Deadline, self.deadline_ms.saturating_sub(self.sent_ms));
        }
        let (at, bound, limit_ms) = soonest;
        Wait { ms: at.saturating_sub(now_ms), bound, limit_ms }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SENT: u64 = 1_000_000;

    fn timeouts() -> Timeouts {
        Timeouts { connect_ms: 3_000, first_token_ms: 10_000, idle_ms: 5_000, total_ms: 60_000 }
    }

    fn clock(deadline_after: u64) -> AttemptClock {
        AttemptClock::new(SENT, timeouts(), SENT + deadline_after)
    }

    #[test]
    fn a_stream_waits_connect_for_headers_and_first_token_from_sending() {
        let c = clock(300_000);
        assert_eq!(c.headers(true, SENT), Wait { ms: 3_000, bound: Bound::Connect, limit_ms: 3_000 });
        assert_eq!(c.headers(true, SENT + 1_000).ms, 2_000, "from sending, not from now");
        // Keep-alives at 4 s, 8 s: the first-token wait still ends 10 s after sending.
        for now in [SENT + 500, SENT + 4_000, SENT + 8_000] {
            assert_eq!(
                c.first_token(now),
                Wait { ms: SENT + 10_000 - now, bound: Bound::FirstToken, limit_ms: 10_000 }
            );
        }
        assert_eq!(c.first_token(SENT + 12_000).ms, 0, "already over");
    }

    #[test]
    fn held_back_reasoning_waits_idle_from_now_within_total_and_deadline() {
        let c = clock(300_000);
        // Past the first-token bound (10 s): each wait is idle_ms from the last chunk.
        for now in [SENT + 500, SENT + 12_000, SENT + 40_000] {
            assert_eq!(c.thinking(now), Wait { ms: 5_000, bound: Bound::Idle, limit_ms: 5_000 });
        }
        assert_eq!(c.thinking(SENT + 58_000), Wait { ms: 2_000, bound: Bound::Total, limit_ms: 60_000 });
        let short = clock(20_000);
        assert_eq!(short.thinking(SENT + 18_000), Wait { ms: 2_000, bound: Bound::Deadline, limit_ms: 20_000 });
    }

    #[test]
    fn json_waits_connect_plus_first_token_for_its_first_byte_then_total() {
        let c = clock(300_000);
        assert_eq!(c.headers(false, SENT), Wait { ms: 13_000, bound: Bound::FirstByte, limit_ms: 13_000 });
        assert_eq!(c.body(SENT + 13_000), Wait { ms: 47_000, bound: Bound::Total, limit_ms: 60_000 });
    }

    #[test]
    fn the_requests_deadline_bounds_every_wait_before_the_first_byte() {
        let c = clock(300);
        for wait in [c.headers(true, SENT), c.headers(false, SENT), c.first_token(SENT), c.body(SENT)] {
            assert_eq!((wait.ms, wait.bound), (300, Bound::Deadline));
        }
        let err = c.first_token(SENT).expired();
        assert_eq!(err.class, ErrorClass::DeadlineExceeded);
        assert!(!err.class.counts_for_breaker(), "the client's deadline says nothing of the deployment");
    }

    #[test]
    fn after_the_first_byte_idle_and_total_bound_the_stream_not_the_deadline() {
        let c = clock(300);
        assert_eq!(c.next_chunk(SENT + 1_000), Wait { ms: 5_000, bound: Bound::Idle, limit_ms: 5_000 });
        assert_eq!(c.next_chunk(SENT + 57_000), Wait { ms: 3_000, bound: Bound::StreamTotal, limit_ms: 60_000 });
        assert_eq!(c.next_chunk(SENT + 70_000).ms, 0);
    }

    #[test]
    fn only_the_deployments_own_timeouts_count_for_its_breaker() {
        let wait = |bound| Wait { ms: 0, bound, limit_ms: 1 };
        for bound in [Bound::Connect, Bound::FirstToken, Bound::FirstByte, Bound::Idle, Bound::Total] {
            let err = wait(bound).expired();
            assert!(err.class.counts_for_breaker() && err.class.retryable(), "{bound:?}");
        }
        for bound in [Bound::StreamTotal, Bound::Deadline] {
            let err = wait(bound).expired();
            assert!(!err.class.counts_for_breaker() && !err.class.may_fall_back(), "{bound:?}");
            assert_eq!(err.vendor_code.as_deref(), Some(bound.code()));
        }
    }
}
