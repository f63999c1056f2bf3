//! What the worker calls: one round trip to a limiter object (a deployment's or a scope's) per function.

use std::time::Duration;

use worker::wasm_bindgen::JsValue;
use worker::{Error, Headers, Method, ObjectNamespace, Request, RequestInit, Result, Stub};

use crate::protocol::{
    decode_response, encode_request, object_name, AdmitDecision, AdmitRequest, LeaseDecision, LeaseRequest,
    LimiterRequest, LimiterResponse, ProtocolError, ReleaseReport, ReleaseRequest, ReportAck, SettleReport,
    SettleRequest, StatusReport, Tally, OBJECT_URL,
};

/// The worker's binding of the limiter objects' namespace.
pub const LIMITER_BINDING: &str = "LIMITER";

/// The worker's binding of the location relays' namespace (`relay::shell::LocationRelay`).
pub const RELAY_BINDING: &str = "RELAY";

/// The header naming the limiter object a relay fronts (a Durable Object does not know its name).
pub const OBJECT_HEADER: &str = "x-limiter-object";

/// The stub of `deployment`'s limiter (same deployment id, same object).
pub fn stub(namespace: &ObjectNamespace, deployment: &str) -> Result<Stub> {
    stub_named(namespace, &object_name(deployment))
}

/// The stub of the limiter object called `object` (see `object_name`, `scope_object_name`).
pub fn stub_named(namespace: &ObjectNamespace, object: &str) -> Result<Stub> {
    namespace.id_from_name(object)?.get_stub()
}

pub async fn call(stub: &Stub, req: &LimiterRequest) -> Result<LimiterResponse> {
    call_as(stub, req, None).await
}

/// One round trip to a limiter object or, with `relay_of` naming the object, to its relay here.
async fn call_as(stub: &Stub, req: &LimiterRequest, relay_of: Option<&str>) -> Result<LimiterResponse> {
    let mut init = RequestInit::new();
    init.with_method(Method::Post).with_body(Some(JsValue::from_str(&encode_request(req))));
    if let Some(object) = relay_of {
        let headers = Headers::new();
        headers.set(OBJECT_HEADER, object)?;
        init.with_headers(headers);
    }
    let request = Request::new_with_init(OBJECT_URL, &init)?;
    let body = stub.fetch_with_request(request).await?.text().await?;
    decode_response(&body).map_err(to_worker)
}

pub async fn admit(stub: &Stub, req: AdmitRequest) -> Result<AdmitDecision> {
    match call(stub, &LimiterRequest::Admit(req)).await? {
        LimiterResponse::Admit(d) => Ok(d),
        _ => Err(to_worker(ProtocolError::Mismatch { expected: "admit" })),
    }
}

pub async fn settle(stub: &Stub, req: SettleRequest) -> Result<SettleReport> {
    match call(stub, &LimiterRequest::Settle(req)).await? {
        LimiterResponse::Settle(r) => Ok(r),
        _ => Err(to_worker(ProtocolError::Mismatch { expected: "settle" })),
    }
}

/// A lease from the object, or from its relay when `relay_of` names the object.
pub async fn lease(stub: &Stub, relay_of: Option<&str>, req: LeaseRequest) -> Result<LeaseDecision> {
    match call_as(stub, &LimiterRequest::Lease(req), relay_of).await? {
        LimiterResponse::Lease(d) => Ok(d),
        _ => Err(to_worker(ProtocolError::Mismatch { expected: "lease" })),
    }
}

/// A report to the object, or to its relay when `relay_of` names the object.
pub async fn report(stub: &Stub, relay_of: Option<&str>, tally: Tally) -> Result<ReportAck> {
    match call_as(stub, &LimiterRequest::Report(tally), relay_of).await? {
        LimiterResponse::Report(a) => Ok(a),
        _ => Err(to_worker(ProtocolError::Mismatch { expected: "report" })),
    }
}

pub async fn release(stub: &Stub, req: ReleaseRequest) -> Result<ReleaseReport> {
    match call(stub, &LimiterRequest::Release(req)).await? {
        LimiterResponse::Release(r) => Ok(r),
        _ => Err(to_worker(ProtocolError::Mismatch { expected: "release" })),
    }
}

pub async fn status(stub: &Stub) -> Result<StatusReport> {
    match call(stub, &LimiterRequest::Status).await? {
        LimiterResponse::Status(s) => Ok(*s),
        _ => Err(to_worker(ProtocolError::Mismatch { expected: "status" })),
    }
}

/// What a location's relay holds and has done (`GET`).
pub async fn relay_status(stub: &Stub) -> Result<crate::relay::RelayStatus> {
    let body = stub.fetch_with_str(OBJECT_URL).await?.text().await?;
    serde_json::from_str(&body).map_err(|e| Error::RustError(format!("relay status: {e}")))
}

/// `call`'s answer, or an error once `ms` have passed without one.
pub async fn within<T>(ms: u64, call: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    let timer = worker::Delay::from(Duration::from_millis(ms));
    futures::pin_mut!(call, timer);
    match futures::future::select(call, timer).await {
        futures::future::Either::Left((answer, _)) => answer,
        futures::future::Either::Right(((), _)) => Err(worker::Error::RustError(format!("no answer in {ms} ms"))),
    }
}

fn to_worker(e: ProtocolError) -> Error {
    Error::RustError(e.to_string())
}
