//! The limiter refusals a client sees (429 with which limit, which scope, when it resets), and
//! how refusals of several deployments merge into one.

use crate::http::codes;
use crate::http::error::ApiError;
use limiter::protocol::RejectCode;

/// The layer whose limit refused a request: limits are checked key → tenant → deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitScope {
    Key,
    Tenant,
    Deployment,
}

impl LimitScope {
    pub fn as_str(self) -> &'static str {
        match self {
            LimitScope::Key => "key",
            LimitScope::Tenant => "tenant",
            LimitScope::Deployment => "deployment",
        }
    }
}

/// The limiter refusal a client sees: its key's or tenant's limit, or no deployment would
/// take the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub scope: LimitScope,
    /// The deployment id or the tenant name (a key is not named: the client knows which it sent).
    pub name: String,
    pub code: RejectCode,
    pub retry_after_ms: u64,
}

pub fn refusal_error(r: &Refusal) -> ApiError {
    let what = match r.code {
        RejectCode::Rpm => "its requests-per-minute limit",
        RejectCode::Tpm | RejectCode::InputTpm | RejectCode::OutputTpm => "its tokens-per-minute limit",
        RejectCode::Rpd => "its requests-per-day limit",
        RejectCode::Concurrency => "its concurrent-request limit",
        RejectCode::BreakerOpen | RejectCode::HalfOpenProbeInFlight | RejectCode::Ramping => "an open circuit breaker",
        RejectCode::Paused => "a pause the vendor asked for",
        RejectCode::QuotaExhausted => "an exhausted vendor quota",
        RejectCode::FairShare => "your tenant's fair share while other tenants use it too",
    };
    let (limit, scope, ms) = (r.code.as_str(), r.scope.as_str(), r.retry_after_ms);
    let message = match r.scope {
        LimitScope::Key => {
            format!("This API key is held by {what} (limit '{limit}', scope key); retry after {ms} ms.")
        }
        LimitScope::Tenant => format!(
            "Tenant '{}' is held by {what}, shared by all its keys (limit '{limit}', scope tenant); retry after {ms} ms.",
            r.name
        ),
        LimitScope::Deployment => format!(
            "No deployment can take this request now: '{}' is held by {what} (limit '{limit}', scope deployment); retry after {ms} ms.",
            r.name
        ),
    };
    ApiError::new(429, "rate_limit_error", codes::limit_refused(scope, limit), message)
        .with_retry_after_ms(ms)
        .with_header("x-gateway-limit", limit)
        .with_header("x-gateway-limit-scope", scope)
        .with_header("x-gateway-limit-reset-ms", ms.to_string())
}

impl Refusal {
    /// Keeps the deployment refusal that clears soonest.
    pub fn keep_soonest(slot: &mut Option<Refusal>, deployment: &str, code: RejectCode, retry_after_ms: u64) {
        if slot.as_ref().is_none_or(|r| retry_after_ms < r.retry_after_ms) {
            let name = deployment.to_string();
            *slot = Some(Refusal { scope: LimitScope::Deployment, name, code, retry_after_ms });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(scope: LimitScope, name: &str, code: RejectCode, ms: u64) -> ApiError {
        refusal_error(&Refusal { scope, name: name.into(), code, retry_after_ms: ms })
    }

    #[test]
    fn refusals_name_the_limit_the_scope_and_the_reset() {
        for (scope, code, expected) in [
            (LimitScope::Key, RejectCode::Rpm, "key_rpm"),
            (LimitScope::Key, RejectCode::Tpm, "key_tpm"),
            (LimitScope::Tenant, RejectCode::Rpm, "tenant_rpm"),
            (LimitScope::Tenant, RejectCode::Rpd, "tenant_rpd"),
            (LimitScope::Deployment, RejectCode::Rpm, "deployment_rpm"),
            (LimitScope::Deployment, RejectCode::BreakerOpen, "deployment_breaker_open"),
        ] {
            let e = refusal(scope, "acme", code, 1_500);
            assert_eq!((e.status, e.kind, e.code.as_str()), (429, "rate_limit_error", expected));
            assert_eq!(e.retry_after_s, Some(2));
            assert_eq!(
                e.headers,
                vec![
                    ("x-gateway-limit", code.as_str().to_string()),
                    ("x-gateway-limit-scope", scope.as_str().to_string()),
                    ("x-gateway-limit-reset-ms", "1500".to_string()),
                ]
            );
            let body: serde_json::Value = serde_json::from_str(&e.to_json()).unwrap();
            assert_eq!(body["error"]["code"], expected);
        }
        let key = refusal(LimitScope::Key, "", RejectCode::Rpm, 20_000);
        assert!(key.message.starts_with("This API key is held by its requests-per-minute limit"), "{}", key.message);
        let tenant = refusal(LimitScope::Tenant, "acme", RejectCode::Tpm, 10);
        assert!(
            tenant.message.contains("Tenant 'acme'") && tenant.message.contains("scope tenant"),
            "{}",
            tenant.message
        );
        assert_eq!(tenant.retry_after_s, Some(1), "never a zero Retry-After");
    }

    #[test]
    fn the_deployment_refusal_that_clears_soonest_is_kept() {
        let mut slot = None;
        Refusal::keep_soonest(&mut slot, "a", RejectCode::Rpm, 900);
        Refusal::keep_soonest(&mut slot, "b", RejectCode::Tpm, 300);
        Refusal::keep_soonest(&mut slot, "c", RejectCode::Rpm, 600);
        let kept = slot.unwrap();
        assert_eq!((kept.scope, kept.name.as_str(), kept.code), (LimitScope::Deployment, "b", RejectCode::Tpm));
    }
}
