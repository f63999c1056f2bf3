//! UTC calendar arithmetic on Unix milliseconds: partition dates, ISO timestamps, RFC 3339 parsing.
//!
//! Civil-from-days and days-from-civil follow Howard Hinnant's public-domain algorithms; a date
//! crate would add weight to the wasm module for four functions.

const MS_PER_DAY: u64 = 86_400_000;

/// Days since 1970-01-01 → (year, month 1-12, day 1-31).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// (year, month 1-12, day 1-31) → days since 1970-01-01.
pub fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        4 | 6 | 9 | 11 => 30,
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        _ => 31,
    }
}

/// `YYYY-MM-DD` of the UTC day containing `ms`.
pub fn date(ms: u64) -> String {
    let mut out = String::with_capacity(24);
    push_date(&mut out, ms);
    out
}

/// Appends `YYYY-MM-DD`, digit by digit: every usage event writes two of these, and `format!`
/// was the largest part of building one in the bench profile.
fn push_date(out: &mut String, ms: u64) {
    let (y, m, d) = civil_from_days((ms / MS_PER_DAY) as i64);
    if (0..=9999).contains(&y) {
        push_digits(out, y as u64, 4);
    } else {
        out.push_str(&format!("{y:04}"));
    }
    out.push('-');
    push_digits(out, u64::from(m), 2);
    out.push('-');
    push_digits(out, u64::from(d), 2);
}

/// The last `width` decimal digits of `n`, zero-padded.
fn push_digits(out: &mut String, n: u64, width: u32) {
    for place in (0..width).rev() {
        out.push(char::from(b'0' + (n / 10u64.pow(place) % 10) as u8));
    }
}

/// The UTC hour (0-23) containing `ms`.
pub fn hour(ms: u64) -> u8 {
    ((ms % MS_PER_DAY) / 3_600_000) as u8
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn iso_ms(ms: u64) -> String {
    let in_day = ms % MS_PER_DAY;
    let mut out = String::with_capacity(24);
    push_date(&mut out, ms);
    out.push('T');
    push_digits(&mut out, in_day / 3_600_000, 2);
    out.push(':');
    push_digits(&mut out, in_day / 60_000 % 60, 2);
    out.push(':');
    push_digits(&mut out, in_day / 1_000 % 60, 2);
    out.push('.');
    push_digits(&mut out, in_day % 1_000, 3);
    out.push('Z');
    out
}

/// Parses `YYYY-MM-DDTHH:MM:SSZ` (optionally with `.f` to `.fff` fractions) in UTC, from 1970 on.
/// Offsets other than `Z` are refused so that every stored time reads the same way.
pub fn parse_rfc3339_ms(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    let num = |range: std::ops::Range<usize>| -> Option<u32> {
        let part = s.get(range)?;
        part.bytes().all(|c| c.is_ascii_digit()).then(|| part.parse().ok())?
    };
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, min, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let millis = match &s[19..] {
        "Z" => 0,
        frac if frac.len() >= 3 && frac.len() <= 5 && frac.starts_with('.') && frac.ends_with('Z') => {
            let digits = &frac[1..frac.len() - 1];
            let n = num(20..20 + digits.len())?;
            n * 10u32.pow(3 - digits.len() as u32)
        }
        _ => return None,
    };
    let valid = year >= 1970
        && (1..=12).contains(&month)
        && day >= 1
        && day <= days_in_month(i64::from(year), month)
        && h < 24
        && min < 60
        && sec < 60;
    if !valid {
        return None;
    }
    let days = days_from_civil(i64::from(year), month, day) as u64;
    Some(
        days * MS_PER_DAY
            + u64::from(h) * 3_600_000
            + u64::from(min) * 60_000
            + u64::from(sec) * 1_000
            + u64::from(millis),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_and_known_instants() {
        assert_eq!(iso_ms(0), "1970-01-01T00:00:00.000Z");
        // 2024-07-18T00:00:00Z, gpt-4o-mini's launch day.
        assert_eq!(iso_ms(1_721_260_800_000), "2024-07-18T00:00:00.000Z");
        assert_eq!(iso_ms(1_709_251_199_999), "2024-02-29T23:59:59.999Z");
        assert_eq!(date(951_782_400_000), "2000-02-29");
        assert_eq!(hour(1_721_260_800_000 + 13 * 3_600_000 + 59 * 60_000), 13);
        assert_eq!(hour(1_721_260_800_000 - 1), 23);
    }

    /// What `date` and `iso_ms` wrote with `format!` before they wrote digit by digit.
    fn reference_iso(ms: u64) -> String {
        let (y, m, d) = civil_from_days((ms / MS_PER_DAY) as i64);
        let in_day = ms % MS_PER_DAY;
        format!(
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
            in_day / 3_600_000,
            in_day / 60_000 % 60,
            in_day / 1_000 % 60,
            in_day % 1_000
        )
    }

    #[test]
    fn digit_by_digit_writes_what_format_wrote() {
        // Every hour of a leap cycle at odd offsets, the edges of the day, and years past 9999.
        let start = parse_rfc3339_ms("1999-12-31T00:00:00Z").unwrap();
        let mut instants: Vec<u64> =
            (0..4 * 366 * 24).map(|h| start + h * 3_600_000 + h * 61_001 % 3_600_000).collect();
        instants.extend([
            0,
            1,
            999,
            1_000,
            MS_PER_DAY - 1,
            MS_PER_DAY,
            253_402_300_799_999,
            253_402_300_800_000,
            u64::MAX / 4,
        ]);
        for ms in instants {
            let want = reference_iso(ms);
            assert_eq!(iso_ms(ms), want, "{ms}");
            assert_eq!(date(ms), want[..want.find('T').unwrap()], "{ms}");
        }
    }

    #[test]
    fn parse_round_trips_every_day_of_a_leap_cycle() {
        let start = parse_rfc3339_ms("1999-12-31T00:00:00Z").unwrap();
        for day in 0..(4 * 366) {
            let ms = start + day * MS_PER_DAY + 3_723_456;
            let text = iso_ms(ms);
            assert_eq!(parse_rfc3339_ms(&text), Some(ms), "{text}");
        }
    }

    #[test]
    fn fractions_scale_to_milliseconds() {
        let base = parse_rfc3339_ms("2025-01-01T00:00:00Z").unwrap();
        assert_eq!(parse_rfc3339_ms("2025-01-01T00:00:00.5Z"), Some(base + 500));
        assert_eq!(parse_rfc3339_ms("2025-01-01T00:00:00.05Z"), Some(base + 50));
        assert_eq!(parse_rfc3339_ms("2025-01-01T00:00:00.005Z"), Some(base + 5));
    }

    #[test]
    fn malformed_or_out_of_range_is_refused() {
        for bad in [
            "",
            "2024-07-18",
            "2024-07-18T00:00:00",
            "2024-07-18T00:00:00+02:00",
            "2024-07-18 00:00:00Z",
            "2024-13-01T00:00:00Z",
            "2023-02-29T00:00:00Z",
            "2024-04-31T00:00:00Z",
            "2024-07-18T24:00:00Z",
            "2024-07-18T00:60:00Z",
            "1969-12-31T23:59:59Z",
            "2024-07-18T00:00:00.1234Z",
            "2024-07-18T00:00:00.Z",
            "2024-07-18T00:00:00.abcZ",
            "+024-07-18T00:00:00Z",
            "2024-07-18T00:00:00ZZ",
        ] {
            assert_eq!(parse_rfc3339_ms(bad), None, "{bad}");
        }
        assert!(parse_rfc3339_ms("2024-02-29T00:00:00Z").is_some());
    }
}
