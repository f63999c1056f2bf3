//! The route table's field rules that need no other part of the table: names, credentials,
//! base URLs, extra headers, timeouts, retry bounds. Each returns what is wrong, in words.

/// Secrets and settings of the gateway itself: a deployment naming one would send it to a vendor.
pub const RESERVED_CREDENTIALS: &[&str] = &["ADMIN_TOKEN", "CONFIG_CACHE_TTL_MS"];
/// Headers that carry the vendor credential: the gateway sets them from `credential` and `auth`.
const CREDENTIAL_HEADERS: &[&str] = &["authorization", "x-api-key", "api-key", "proxy-authorization"];
/// More attempts than this per client request is a typo, not a policy.
pub const MAX_ATTEMPTS: u32 = 20;

/// An id or name as clients and logs see it: non-empty, no control characters, no padding.
pub fn name(kind: &str, value: &str) -> Option<String> {
    if value.is_empty() {
        Some(format!("{kind} must not be empty"))
    } else if value.chars().any(char::is_control) {
        Some(format!("{kind} '{}' contains a control character (CR, LF, NUL, …)", value.escape_debug()))
    } else if value.trim() != value {
        Some(format!("{kind} '{value}' has leading or trailing whitespace"))
    } else {
        None
    }
}

/// `credential` names a Worker secret: an identifier, never a path or the gateway's own secret.
pub fn credential(value: &str) -> Option<String> {
    let identifier = value.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && value.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !identifier {
        Some(format!(
            "credential '{}' must name a secret (letters, digits, '_'), e.g. OPENAI_API_KEY",
            value.escape_debug()
        ))
    } else if RESERVED_CREDENTIALS.iter().any(|r| r.eq_ignore_ascii_case(value)) {
        Some(format!("credential '{value}' is the gateway's own setting and is never sent to a vendor"))
    } else {
        None
    }
}

/// `http(s)://host[:port][/path]`, with a host, a valid port, no user info and no whitespace.
pub fn base_url(value: &str) -> Option<String> {
    let bad = |why: &str| Some(format!("base_url '{}' {why}", value.escape_debug()));
    let Some(rest) = value.strip_prefix("https://").or_else(|| value.strip_prefix("http://")) else {
        return bad("must start with http:// or https://");
    };
    if value.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return bad("contains whitespace or a control character");
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return bad("must not carry user info (credentials belong in `credential`)");
    }
    let (host, port) = match authority.strip_prefix('[').and_then(|a| a.find(']')) {
        // An IPv6 literal: `[::1]` or `[::1]:8080`.
        Some(end) => {
            let (host, after) = authority.split_at(end + 2);
            (host, (!after.is_empty()).then(|| after.strip_prefix(':').unwrap_or("x")))
        }
        None => authority.rsplit_once(':').map_or((authority, None), |(h, p)| (h, Some(p))),
    };
    if host.is_empty() || host.starts_with('.') || host.ends_with('.') {
        return bad("has no host");
    }
    if port.is_some_and(|p| p.parse::<u16>().map_or(true, |n| n == 0)) {
        return bad("has an invalid port");
    }
    if rest.contains(['?', '#']) {
        return bad("must not have a query or fragment (the gateway appends the API path)");
    }
    None
}

/// An extra header the gateway sends upstream: a valid name and value, never the credential's.
pub fn extra_header(name: &str, value: &str, auth_header: Option<&str>) -> Option<String> {
    let token = !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    if !token {
        return Some(format!("header name '{}' is not a valid HTTP header name", name.escape_debug()));
    }
    if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
        return Some(format!("header '{name}' has CR, LF or NUL in its value"));
    }
    let carries_key = CREDENTIAL_HEADERS.iter().chain(auth_header.as_slice()).any(|h| h.eq_ignore_ascii_case(name));
    if carries_key {
        return Some(format!(
            "header '{name}' carries the vendor credential: set it with `credential` and `auth`, not in quirks.headers"
        ));
    }
    None
}

/// Whether a header name is one HTTP accepts (for `auth: {"scheme": "header", "name": …}`).
pub fn header_name(name: &str) -> Option<String> {
    extra_header(name, "", None).filter(|m| m.contains("not a valid"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_non_empty_unpadded_and_printable() {
        assert_eq!(name("id", "oa-1"), None);
        assert_eq!(name("id", "claude sonnet 4.5"), None, "inner spaces are fine");
        assert!(name("id", "").unwrap().contains("empty"));
        for bad in ["a\r\nb", "a\0", "tab\there", "\u{7f}"] {
            assert!(name("id", bad).unwrap().contains("control character"), "{bad:?}");
        }
        assert!(name("model", " gpt-4o").unwrap().contains("whitespace"));
        assert!(name("model", "gpt-4o ").unwrap().contains("whitespace"));
        assert!(name("id", "a\nb").unwrap().contains("a\\nb"), "shown escaped");
    }

    #[test]
    fn credentials_name_secrets_only() {
        assert_eq!(credential("OPENAI_API_KEY"), None);
        assert_eq!(credential("_k2"), None);
        for bad in [
            "",
            "ADMIN_TOKEN",
            "admin_token",
            "CONFIG_CACHE_TTL_MS",
            "/etc/passwd",
            "../.dev.vars",
            "A B",
            "2KEY",
            "KEY-1",
        ] {
            assert!(credential(bad).is_some(), "{bad}");
        }
        assert!(credential("ADMIN_TOKEN").unwrap().contains("gateway's own"));
    }

    #[test]
    fn base_urls_need_a_host() {
        for good in [
            "https://api.openai.com/v1",
            "http://127.0.0.1:9797/v1",
            "https://x.openai.azure.com/openai/deployments/d",
            "http://[::1]:8080/v1",
            "http://[::1]/v1",
            "http://localhost",
        ] {
            assert_eq!(base_url(good), None, "{good}");
        }
        for (bad, why) in [
            ("http://", "no host"),
            ("https:///v1", "no host"),
            ("https://:443/v1", "no host"),
            ("ftp://x", "must start"),
            ("api.openai.com", "must start"),
            ("https://api.openai.com:0/v1", "port"),
            ("https://api.openai.com:99999", "port"),
            ("https://api.openai.com:x/v1", "port"),
            ("https://user:pw@api.openai.com/v1", "user info"),
            ("https://api.openai.com/v1 ", "whitespace"),
            ("https://api.openai.com/v1?k=1", "query"),
        ] {
            let problem = base_url(bad).unwrap_or_else(|| panic!("{bad} accepted"));
            assert!(problem.contains(why), "{bad}: {problem}");
        }
    }

    #[test]
    fn extra_headers_are_valid_and_never_the_credential() {
        assert_eq!(extra_header("anthropic-beta", "prompt-caching-2024-07-31", None), None);
        assert!(extra_header("bad header", "v", None).unwrap().contains("not a valid"));
        assert!(extra_header("", "v", None).is_some());
        assert!(extra_header("x-ok", "a\r\nInjected: 1", None).unwrap().contains("CR, LF"));
        for key_header in ["Authorization", "x-api-key", "API-KEY"] {
            assert!(extra_header(key_header, "Bearer x", None).unwrap().contains("credential"), "{key_header}");
        }
        assert!(extra_header("X-Custom-Key", "k", Some("x-custom-key")).is_some(), "the auth scheme's own header");
        assert_eq!(header_name("api-key"), None);
        assert!(header_name("api key").is_some());
    }
}
