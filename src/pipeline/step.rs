//! What an endpoint gives the pipeline: its per-vendor step. For each deployment the driver asks
//! the step to build the vendor request from the client's raw body, then to translate the
//! vendor's answer (a whole body, or a stream chunk by chunk) into the client's format.
//!
//! The step sees raw bytes so that an endpoint whose door speaks the deployment's own format can
//! pass the body through (model name spliced) instead of parsing it; the driver never looks
//! inside a body.

use crate::cache::AnswerFormat;
use crate::canonical::usage::Usage;
use crate::config::routes::Deployment;
use crate::http::error::ApiError;
use crate::providers::{self, StreamEnd, StreamTranslator, UpstreamCall, UpstreamError};

/// A vendor's complete answer in the client's format.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// perf: bytes, so a passed-through answer is moved, never copied into a `String`.
    pub body: Vec<u8>,
    pub usage: Option<Usage>,
}

/// One endpoint's per-vendor work. Pure: time comes in as `now_ms`.
pub trait VendorStep {
    /// The vendor request for `deployment`; an `Err` means this deployment cannot take the request
    /// (the driver moves on to the next one).
    fn build(&self, deployment: &Deployment, body: &[u8], credential: &str) -> Result<UpstreamCall, ApiError>;

    /// A successful (2xx) vendor body in the client's format, with the usage the vendor reported.
    fn translate(&self, deployment: &Deployment, body: Vec<u8>, now_ms: u64) -> Result<Answer, UpstreamError>;

    /// A translator for a streamed answer from `deployment`.
    fn stream(&self, deployment: &Deployment, now_ms: u64) -> Box<dyn ClientStream>;

    /// The format the response cache keeps this step's answers in (only formats it can replay).
    fn cache_format(&self) -> Option<AnswerFormat> {
        None
    }
}

/// Vendor stream chunks in, client SSE bytes out.
pub trait ClientStream {
    /// Translates one upstream chunk (any split) into `out`; `Some` is a failure reported in-stream.
    fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>) -> Option<UpstreamError>;
    /// The upstream body ended: flushes what is left and says whether the stream was complete.
    fn finish(&mut self, out: &mut Vec<u8>) -> StreamEnd;
    /// The usage reported so far.
    fn usage(&self) -> Option<Usage>;
    /// Whether part of [`usage`](Self::usage) is estimated (a vendor's final count that never came).
    fn usage_estimated(&self) -> bool {
        false
    }
    /// Whether the client has been sent anything yet (until then, a failure may still fall back).
    fn emitted_any(&self) -> bool;
    /// Whether the vendor is streaming reasoning this door does not show: the model has started
    /// (the first-token bound is met) though the client has nothing yet.
    fn thinking(&self) -> bool {
        false
    }
    /// Whether the vendor's own end of the stream came (`[DONE]`, `message_stop`): the client's
    /// stream may then close without waiting for the connection to end.
    fn ended(&self) -> bool {
        false
    }
    /// A well-formed error event in the client's stream format.
    fn error_event(&self, err: &ApiError) -> Vec<u8> {
        providers::stream_error_event(err)
    }
}

impl ClientStream for StreamTranslator {
    fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>) -> Option<UpstreamError> {
        StreamTranslator::feed(self, chunk, out)
    }

    fn finish(&mut self, out: &mut Vec<u8>) -> StreamEnd {
        StreamTranslator::finish(self, out)
    }

    fn usage(&self) -> Option<Usage> {
        StreamTranslator::usage(self)
    }

    fn usage_estimated(&self) -> bool {
        StreamTranslator::usage_estimated(self)
    }

    fn emitted_any(&self) -> bool {
        StreamTranslator::emitted_any(self)
    }

    fn ended(&self) -> bool {
        StreamTranslator::ended(self)
    }
}
