//! How long a vendor asked us to wait: the `Retry-After` header, or a hint in the error message.

/// Milliseconds to wait from a `Retry-After` value: delay seconds (decimals allowed), or an
/// IMF-fixdate (`Wed, 21 Oct 2015 07:28:00 GMT`) when the caller supplies the current time.
/// Without `now_ms` a date is unknown (`None`): pure code has no clock.
pub fn parse_retry_after(value: &str, now_ms: Option<u64>) -> Option<u64> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| (secs * 1000.0).ceil() as u64);
    }
    let at = http_date_ms(value)?;
    Some(at.saturating_sub(now_ms?))
}

/// OpenAI puts the wait in its 429 message: "Please try again in 1.5s" / "in 120ms" / "in 1m30s".
pub fn hint_in_message(message: &str) -> Option<u64> {
    const NEEDLE: &str = "try again in ";
    let at = message.to_ascii_lowercase().find(NEEDLE)? + NEEDLE.len();
    crate::providers::rate_headers::duration_prefix(&message[at..]).map(|(ms, _)| ms)
}

/// Unix milliseconds of an IMF-fixdate, the one date format HTTP senders must generate.
fn http_date_ms(value: &str) -> Option<u64> {
    let mut parts = value.split_ascii_whitespace();
    let (_weekday, day, month, year, time, zone) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if zone != "GMT" || parts.next().is_some() {
        return None;
    }
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let month = MONTHS.iter().position(|m| *m == month)? as i64 + 1;
    let day: i64 = day.parse().ok().filter(|d| (1..=31).contains(d))?;
    let year: i64 = year.parse().ok().filter(|y| *y >= 1970)?;
    let mut hms = time.split(':').map(|p| p.parse::<i64>().ok());
    let (h, m, s) = (hms.next()??, hms.next()??, hms.next()??);
    if hms.next().is_some() || h > 23 || m > 59 || s > 60 {
        return None;
    }
    let days = days_from_civil(year, month, day);
    u64::try_from((days * 86_400 + h * 3600 + m * 60 + s) * 1000).ok()
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds() {
        assert_eq!(parse_retry_after("20", None), Some(20_000));
        assert_eq!(parse_retry_after(" 0.25 ", None), Some(250));
        assert_eq!(parse_retry_after("0", None), Some(0));
        assert_eq!(parse_retry_after("-1", None), None);
        assert_eq!(parse_retry_after("soon", Some(0)), None);
    }

    #[test]
    fn http_date_needs_now() {
        let date = "Wed, 21 Oct 2015 07:28:00 GMT";
        assert_eq!(http_date_ms(date), Some(1_445_412_480_000));
        assert_eq!(parse_retry_after(date, None), None);
        assert_eq!(parse_retry_after(date, Some(1_445_412_470_500)), Some(9_500));
        assert_eq!(parse_retry_after(date, Some(1_445_412_490_000)), Some(0));
        assert_eq!(http_date_ms("Thu, 01 Jan 1970 00:00:00 GMT"), Some(0));
        assert_eq!(http_date_ms("Tue, 29 Feb 2000 12:00:00 GMT"), Some(951_825_600_000));
        assert_eq!(http_date_ms("Wed, 21 Oct 2015 07:28:00 PST"), None);
        assert_eq!(http_date_ms("Wed, 21 Foo 2015 07:28:00 GMT"), None);
    }

    #[test]
    fn message_hints() {
        assert_eq!(hint_in_message("Please try again in 20s. Visit ..."), Some(20_000));
        assert_eq!(hint_in_message("Please try again in 1.5s."), Some(1_500));
        assert_eq!(hint_in_message("Please try again in 120ms."), Some(120));
        assert_eq!(hint_in_message("Please Try Again In 1m30s."), Some(90_000));
        assert_eq!(hint_in_message("Please try again later."), None);
        assert_eq!(hint_in_message("no hint"), None);
    }
}
