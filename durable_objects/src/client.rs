//! What the worker calls: one round trip to a limiter object (a deployment's or a scope's) per function.

use worker::wasm_bindgen::JsValue;
use worker::{Error, Method, ObjectNamespace, Request, RequestInit, Result, Stub};

use crate::protocol::{
    decode_response, encode_request, object_name, AdmitDecision, AdmitRequest, LeaseDecision, LeaseRequest,
    LimiterRequest, LimiterResponse, ProtocolError, ReleaseReport, ReleaseRequest, ReportAck, SettleReport,
    SettleRequest, StatusReport, Tally, OBJECT_URL,
};

/// The stub of `deployment`'s limiter (same deployment id, same object).
pub fn stub(namespace: &ObjectNamespace, deployment: &str) -> Result<Stub> {
    stub_named(namespace, &object_name(deployment))
}

/// The stub of the limiter object called `object` (see `object_name`, `scope_object_name`).
pub fn stub_named(namespace: &ObjectNamespace, object: &str) -> Result<Stub> {
    namespace.id_from_name(object)?.get_stub()
}

pub async fn call(stub: &Stub, req: &LimiterRequest) -> Result<LimiterResponse> {
    let mut init = RequestInit::new();
    init.with_method(Method::Post).with_body(Some(JsValue::from_str(&encode_request(req))));
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

pub async fn lease(stub: &Stub, req: LeaseRequest) -> Result<LeaseDecision> {
    match call(stub, &LimiterRequest::Lease(req)).await? {
        LimiterResponse::Lease(d) => Ok(d),
        _ => Err(to_worker(ProtocolError::Mismatch { expected: "lease" })),
    }
}

pub async fn report(stub: &Stub, tally: Tally) -> Result<ReportAck> {
    match call(stub, &LimiterRequest::Report(tally)).await? {
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

fn to_worker(e: ProtocolError) -> Error {
    Error::RustError(e.to_string())
}
