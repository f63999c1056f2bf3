//! The route's bound on a vendor answer (`max_answer_bytes`), counted as the bytes arrive: one
//! addition per chunk, so a 150 MB answer is cut off at the bound instead of filling the isolate.

use crate::providers::UpstreamError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnswerLimit {
    max: u64,
    seen: u64,
}

impl AnswerLimit {
    pub fn new(max: u64) -> Self {
        AnswerLimit { max, seen: 0 }
    }

    /// Counts a chunk; an error once the answer has grown past the bound.
    pub fn take(&mut self, chunk_len: usize) -> Result<(), UpstreamError> {
        self.seen = self.seen.saturating_add(chunk_len as u64);
        if self.seen > self.max {
            return Err(UpstreamError::too_large(self.max));
        }
        Ok(())
    }

    pub fn max(&self) -> u64 {
        self.max
    }

    /// The failure of an answer that grew past the bound.
    pub fn exceeded(&self) -> UpstreamError {
        UpstreamError::too_large(self.max)
    }

    /// A body whose length is declared up front, refused before it is read when over the bound.
    pub fn check_declared(&self, declared: u64) -> Result<(), UpstreamError> {
        if declared > self.max {
            return Err(UpstreamError::too_large(self.max));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::ErrorClass;

    #[test]
    fn the_bound_is_inclusive_and_counted_across_chunks() {
        let mut limit = AnswerLimit::new(10);
        assert!(limit.take(4).is_ok() && limit.take(6).is_ok(), "exactly the bound passes");
        let err = limit.take(1).unwrap_err();
        assert_eq!(err.class, ErrorClass::TooLarge);
        assert!(err.message.contains("max_answer_bytes (10 bytes)"), "{}", err.message);
        assert!(AnswerLimit::new(10).take(usize::MAX).is_err(), "saturates, never wraps");
        assert!(AnswerLimit::new(10).check_declared(10).is_ok());
        assert!(AnswerLimit::new(10).check_declared(11).is_err());
        assert!(AnswerLimit::new(10).check_declared((1 << 32) + 5).is_err(), "no truncation to usize on wasm32");
    }

    #[test]
    fn too_large_is_the_routes_choice_not_the_deployments_failure() {
        let class = ErrorClass::TooLarge;
        assert!(!class.retryable() && !class.may_fall_back() && !class.counts_for_breaker());
        let api = UpstreamError::too_large(65_536).to_api_error();
        assert_eq!((api.status, api.code.as_str()), (502, crate::http::codes::UPSTREAM_ANSWER_TOO_LARGE));
        assert_eq!(UpstreamError::too_large(1).to_stream_api_error().code, api.code, "streams name it too");
    }
}
