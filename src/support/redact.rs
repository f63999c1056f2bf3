//! Redaction of personal data and secrets in text bound for logs or stored diagnostics.
//!
//! One left-to-right pass over the bytes. Matches start only at a word start (never inside a run
//! of `[A-Za-z0-9_]`) and begin and end on ASCII, so the text around them, Unicode included, is
//! copied unchanged. Scanners whose reach is unbounded remember where a failed scan ended and do
//! not rescan that stretch, which keeps the pass linear.

use std::borrow::Cow;
use std::cell::RefCell;
use std::ops::Range;

/// What a credential the gateway sent becomes wherever it is echoed back.
pub const CREDENTIAL_PLACEHOLDER: &str = "[credential]";
/// Shorter values are not secrets worth matching (and would blank ordinary words).
const MIN_SECRET_CHARS: usize = 8;
/// Deployments' credentials in one isolate; a bound keeps a misconfigured table from growing it.
const MAX_SECRETS: usize = 256;

thread_local! {
    static SECRETS: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

/// Remembers a credential this isolate sends to a vendor, so [`redact`] and [`without_secrets`]
/// remove it by value, whatever its format (prefix rules miss keys like GLM's, Azure's or Mistral's).
pub fn remember_secret(value: &str) {
    if value.len() < MIN_SECRET_CHARS {
        return;
    }
    SECRETS.with(|secrets| {
        let mut secrets = secrets.borrow_mut();
        if secrets.len() < MAX_SECRETS && !secrets.iter().any(|s| s == value) {
            secrets.push(value.to_string());
            // Longest first, so a secret containing another is replaced whole.
            secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        }
    });
}

/// `text` with every remembered credential replaced by [`CREDENTIAL_PLACEHOLDER`].
pub fn without_secrets(text: &str) -> Cow<'_, str> {
    SECRETS.with(|secrets| {
        let secrets = secrets.borrow();
        let mut out = Cow::Borrowed(text);
        for secret in secrets.iter().filter(|s| text.contains(s.as_str())) {
            out = Cow::Owned(out.replace(secret.as_str(), CREDENTIAL_PLACEHOLDER));
        }
        out
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Email,
    Phone,
    CnId,
    Card,
    ApiKey,
}

impl Kind {
    pub fn placeholder(self) -> &'static str {
        match self {
            Kind::Email => "[EMAIL]",
            Kind::Phone => "[PHONE]",
            Kind::CnId => "[CN_ID]",
            Kind::Card => "[CARD]",
            Kind::ApiKey => "[API_KEY]",
        }
    }
}

/// `text` with every remembered credential, email, phone number, Chinese resident ID, card number
/// and API key replaced by its placeholder.
pub fn redact(text: &str) -> String {
    let text = &*without_secrets(text);
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    for (span, kind) in Scanner::new(text.as_bytes()) {
        out.push_str(&text[copied..span.start]);
        out.push_str(kind.placeholder());
        copied = span.end;
    }
    out.push_str(&text[copied..]);
    out
}

/// Where each redaction goes, in order; spans are byte ranges on ASCII boundaries.
pub fn find(text: &str) -> Vec<(Range<usize>, Kind)> {
    Scanner::new(text.as_bytes()).collect()
}

/// Vendor and gateway key prefixes (case-sensitive) and the shortest body that counts as a key.
const KEY_PREFIXES: &[(&[u8], usize)] = &[
    (b"sk-", 20), // OpenAI (sk-, sk-proj-), Anthropic (sk-ant-), DeepSeek and others
    (b"gk_", 16), // this gateway's virtual keys
    (b"ghp_", 30),
    (b"gho_", 30),
    (b"ghs_", 30),
    (b"github_pat_", 30),
    (b"xoxb-", 20),
    (b"xoxp-", 20),
    (b"hf_", 30),
    (b"AIza", 30),
];

/// `<name>=<value>` pairs whose value is a secret when the name ends with one of these.
const SECRET_NAMES: &[&[u8]] = &[b"key", b"token", b"secret"];

/// A secret value after `key=` or `Bearer` is at least this long and contains a digit.
const MIN_SECRET_LEN: usize = 16;
const MIN_BEARER_LEN: usize = 8;

struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
    /// Failed scans ended here: no email / secret value / bearer token starts before it.
    no_email_before: usize,
    no_value_before: usize,
    no_token_before: usize,
}

impl Iterator for Scanner<'_> {
    type Item = (Range<usize>, Kind);

    fn next(&mut self) -> Option<Self::Item> {
        while self.i < self.b.len() {
            let i = self.i;
            if let Some((span, kind)) = self.match_at(i) {
                self.i = span.end;
                return Some((span, kind));
            }
            self.i = if is_word(self.b[i]) { word_end(self.b, i) } else { i + 1 };
        }
        None
    }
}

impl<'a> Scanner<'a> {
    fn new(b: &'a [u8]) -> Self {
        Scanner { b, i: 0, no_email_before: 0, no_value_before: 0, no_token_before: 0 }
    }

    fn match_at(&mut self, i: usize) -> Option<(Range<usize>, Kind)> {
        let c = self.b[i];
        if c == b'+' {
            return intl_phone(self.b, i).map(|end| (i..end, Kind::Phone));
        }
        if c == b'(' {
            return nanp(self.b, i).map(|end| (i..end, Kind::Phone));
        }
        if !c.is_ascii_alphanumeric() {
            return None;
        }
        if c.is_ascii_alphabetic() {
            if let Some(found) = self.bearer(i).or_else(|| self.named_secret(i)).or_else(|| key_with_prefix(self.b, i))
            {
                return Some(found);
            }
        }
        if let Some(end) = self.email(i) {
            return Some((i..end, Kind::Email));
        }
        if c.is_ascii_digit() && starts_number(self.b, i) {
            return numeric(self.b, i);
        }
        None
    }

    /// `Bearer <token>`: the token is redacted, the scheme kept.
    fn bearer(&mut self, i: usize) -> Option<(Range<usize>, Kind)> {
        let b = self.b;
        if !b.get(i..i + 6)?.eq_ignore_ascii_case(b"bearer") {
            return None;
        }
        let start = skip_while(b, i + 6, |c| c == b' ' || c == b'\t');
        if start == i + 6 || start < self.no_token_before {
            return None;
        }
        let end = skip_while(b, start, is_token_char);
        if end - start >= MIN_BEARER_LEN && b[start..end].iter().any(u8::is_ascii_digit) {
            return Some((start..end, Kind::ApiKey));
        }
        self.no_token_before = end;
        None
    }

    /// `api_key=…`, `x-api-key: "…"`, `access_token=…`: the value is redacted, the name kept.
    fn named_secret(&mut self, i: usize) -> Option<(Range<usize>, Kind)> {
        let b = self.b;
        let name_end = word_end(b, i);
        let name = &b[i..name_end];
        if !SECRET_NAMES.iter().any(|s| name.len() >= s.len() && name[name.len() - s.len()..].eq_ignore_ascii_case(s)) {
            return None;
        }
        let mut p = name_end;
        if matches!(b.get(p), Some(b'"' | b'\'')) {
            p += 1;
        }
        p = skip_while(b, p, |c| c == b' ');
        if !matches!(b.get(p), Some(b'=' | b':')) {
            return None;
        }
        p = skip_while(b, p + 1, |c| c == b' ');
        if matches!(b.get(p), Some(b'"' | b'\'')) {
            p += 1;
        }
        if p < self.no_value_before {
            return None;
        }
        let mut end = skip_while(b, p, is_secret_char);
        while end > p && b[end - 1] == b'.' {
            end -= 1;
        }
        if end - p >= MIN_SECRET_LEN && b[p..end].iter().any(u8::is_ascii_digit) {
            return Some((p..end, Kind::ApiKey));
        }
        self.no_value_before = end.max(p + 1);
        None
    }

    fn email(&mut self, i: usize) -> Option<usize> {
        if i < self.no_email_before {
            return None;
        }
        let b = self.b;
        let at = skip_while(b, i, is_local_char);
        if b.get(at) == Some(&b'@') && b[at - 1] != b'.' {
            if let Some(end) = domain_end(b, at + 1) {
                return Some(end);
            }
        }
        self.no_email_before = at;
        None
    }
}

/// The end of a domain of two or more labels ending in an alphabetic TLD, starting at `start`.
fn domain_end(b: &[u8], start: usize) -> Option<usize> {
    let mut best = None;
    let mut p = start;
    let mut labels = 0;
    loop {
        let end = skip_while(b, p, |c| c.is_ascii_alphanumeric() || c == b'-');
        let label = &b[p..end];
        if label.is_empty() || label[0] == b'-' || label[label.len() - 1] == b'-' {
            return best;
        }
        labels += 1;
        if labels >= 2 && label.len() >= 2 && label.iter().all(u8::is_ascii_alphabetic) {
            best = Some(end);
        }
        if b.get(end) != Some(&b'.') {
            return best;
        }
        p = end + 1;
    }
}

fn key_with_prefix(b: &[u8], i: usize) -> Option<(Range<usize>, Kind)> {
    let rest = &b[i..];
    if rest.len() >= 20 && (rest.starts_with(b"AKIA") || rest.starts_with(b"ASIA")) {
        let body = &rest[4..20];
        if body.iter().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
            && !rest.get(20).is_some_and(|&c| is_word(c))
        {
            return Some((i..i + 20, Kind::ApiKey));
        }
    }
    for &(prefix, min_body) in KEY_PREFIXES {
        if rest.starts_with(prefix) {
            let end = skip_while(b, i + prefix.len(), |c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-');
            if end - i - prefix.len() >= min_body {
                return Some((i..end, Kind::ApiKey));
            }
        }
    }
    None
}

/// Numbers that start at `i`: resident ID, card, Chinese mobile, North American number.
fn numeric(b: &[u8], i: usize) -> Option<(Range<usize>, Kind)> {
    if let Some(end) = cn_id(b, i) {
        return Some((i..end, Kind::CnId));
    }
    if let Some(end) = card(b, i) {
        return Some((i..end, Kind::Card));
    }
    cn_mobile(b, i).or_else(|| nanp(b, i)).map(|end| (i..end, Kind::Phone))
}

/// 18-character resident ID: 6-digit region, YYYYMMDD birth date, 3-digit sequence, and an
/// ISO 7064 MOD 11-2 check character (`0`–`9` or `X`).
fn cn_id(b: &[u8], i: usize) -> Option<usize> {
    let run = digit_run(b, i);
    let end = match run - i {
        18 => run,
        17 if matches!(b.get(run), Some(b'X' | b'x')) => run + 1,
        _ => return None,
    };
    if b[i] == b'0' || !ends_number(b, end) {
        return None;
    }
    let num = |from: usize, len: usize| b[from..from + len].iter().fold(0u32, |n, &c| n * 10 + (c - b'0') as u32);
    let (year, month, day) = (num(i + 6, 4), num(i + 10, 2), num(i + 12, 2));
    if !(1800..=2099).contains(&year) || !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
        return None;
    }
    const WEIGHTS: [u32; 17] = [7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2];
    let sum: u32 = b[i..i + 17].iter().zip(WEIGHTS).map(|(&c, w)| (c - b'0') as u32 * w).sum();
    let check = b"10X98765432"[(sum % 11) as usize];
    (b[i + 17].to_ascii_uppercase() == check).then_some(end)
}

fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        2 if year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400)) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// 13–19 digits starting with an issuer digit (2–6), bare or in groups of 3–6 separated by one
/// consistent space or dash, passing Luhn. The longest such prefix of the groups wins.
fn card(b: &[u8], i: usize) -> Option<usize> {
    if !(b'2'..=b'6').contains(&b[i]) {
        return None;
    }
    let first = digit_run(b, i);
    let len = first - i;
    if len >= 13 {
        return (len <= 19 && luhn(&b[i..first]) && ends_number(b, first)).then_some(first);
    }
    if !(3..=6).contains(&len) {
        return None;
    }
    let sep = *b.get(first).filter(|&&c| c == b' ' || c == b'-')?;
    let (mut end, mut digits, mut best) = (first, len, None);
    while b.get(end) == Some(&sep) && b.get(end + 1).is_some_and(u8::is_ascii_digit) {
        let group_end = digit_run(b, end + 1);
        let group = group_end - end - 1;
        if !(3..=6).contains(&group) || digits + group > 19 {
            break;
        }
        digits += group;
        end = group_end;
        if digits >= 13 && luhn(&b[i..end]) && ends_number(b, end) {
            best = Some(end);
        }
    }
    best
}

/// Luhn over the digits of `s`, separators skipped.
fn luhn(s: &[u8]) -> bool {
    let mut sum = 0;
    for (k, d) in s.iter().rev().filter(|c| c.is_ascii_digit()).map(|c| (c - b'0') as u32).enumerate() {
        sum += if k % 2 == 1 { [0, 2, 4, 6, 8, 1, 3, 5, 7, 9][d as usize] } else { d };
    }
    sum % 10 == 0
}

/// Chinese mobile `1[3-9]` + 9 digits, bare or as 3-4-4 with one consistent space or dash.
fn cn_mobile(b: &[u8], i: usize) -> Option<usize> {
    if b[i] != b'1' || !b.get(i + 1).is_some_and(|c| (b'3'..=b'9').contains(c)) {
        return None;
    }
    let run = digit_run(b, i);
    if run - i == 11 {
        return ends_number(b, run).then_some(run);
    }
    if run - i != 3 {
        return None;
    }
    let sep = *b.get(run).filter(|&&c| c == b' ' || c == b'-')?;
    let second = digit_run(b, run + 1);
    if second - run - 1 != 4 || b.get(second) != Some(&sep) {
        return None;
    }
    let third = digit_run(b, second + 1);
    (third - second - 1 == 4 && ends_number(b, third)).then_some(third)
}

/// North American numbers with separators: `415-555-0123`, `415.555.0123`, `(415) 555-0123`,
/// `1 415 555 0123`. Bare 10-digit runs are left alone: too many ordinary numbers look like them.
fn nanp(b: &[u8], i: usize) -> Option<usize> {
    let with_country =
        (b[i] == b'1' && b.get(i + 1).is_some_and(|&c| is_phone_sep(c))).then(|| nanp_local(b, i + 2)).flatten();
    with_country.or_else(|| nanp_local(b, i))
}

fn nanp_local(b: &[u8], i: usize) -> Option<usize> {
    let mut p = i;
    if b.get(p) == Some(&b'(') {
        exact_digits(b, p + 1, 3)?;
        if b.get(p + 4) != Some(&b')') {
            return None;
        }
        p += 5;
        if matches!(b.get(p), Some(b' ' | b'-')) {
            p += 1;
        }
    } else {
        exact_digits(b, p, 3)?;
        if !b.get(p + 3).is_some_and(|&c| is_phone_sep(c)) {
            return None;
        }
        p += 4;
    }
    let area = if b[i] == b'(' { b[i + 1] } else { b[i] };
    exact_digits(b, p, 3)?;
    if area < b'2' || b[p] < b'2' || !b.get(p + 3).is_some_and(|&c| is_phone_sep(c)) {
        return None;
    }
    let end = exact_digits(b, p + 4, 4)?;
    ends_number(b, end).then_some(end)
}

/// `+` and a country code, then 8–15 digits in all (E.164) with at most two separators in a row.
fn intl_phone(b: &[u8], i: usize) -> Option<usize> {
    if (i > 0 && is_word(b[i - 1])) || !b.get(i + 1).is_some_and(|c| (b'1'..=b'9').contains(c)) {
        return None;
    }
    let (mut digits, mut end, mut gap) = (0, i + 1, 0);
    for (p, &c) in b.iter().enumerate().skip(i + 1) {
        if c.is_ascii_digit() {
            digits += 1;
            if digits > 15 {
                return None;
            }
            end = p + 1;
            gap = 0;
        } else if matches!(c, b' ' | b'-' | b'.' | b'(' | b')') && gap < 2 {
            gap += 1;
        } else {
            break;
        }
    }
    (digits >= 8 && ends_number(b, end)).then_some(end)
}

fn is_word(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

fn is_local_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'%' | b'+' | b'-')
}

fn is_token_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'~' | b'+' | b'/' | b'=' | b'-')
}

fn is_secret_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'+' | b'/' | b'=' | b'_' | b'.' | b'-')
}

fn is_phone_sep(c: u8) -> bool {
    matches!(c, b' ' | b'-' | b'.')
}

fn skip_while(b: &[u8], from: usize, keep: impl Fn(u8) -> bool) -> usize {
    from + b.get(from..).unwrap_or_default().iter().take_while(|&&c| keep(c)).count()
}

fn word_end(b: &[u8], i: usize) -> usize {
    skip_while(b, i, is_word)
}

fn digit_run(b: &[u8], i: usize) -> usize {
    skip_while(b, i, |c| c.is_ascii_digit())
}

/// Exactly `n` digits at `p` (not more); returns where they end.
fn exact_digits(b: &[u8], p: usize, n: usize) -> Option<usize> {
    (digit_run(b, p) == p + n).then_some(p + n)
}

/// A number starting here is not the tail of a word or the fraction of a decimal.
fn starts_number(b: &[u8], i: usize) -> bool {
    i == 0 || !(is_word(b[i - 1]) || b[i - 1] == b'.')
}

/// A number ending here is not followed by a word character or a decimal/thousands tail.
fn ends_number(b: &[u8], end: usize) -> bool {
    match b.get(end) {
        None => true,
        Some(&c) if is_word(c) => false,
        Some(b'.' | b',') => !b.get(end + 1).is_some_and(u8::is_ascii_digit),
        Some(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_kept(text: &str) {
        assert_eq!(redact(text), text, "mangled: {text}");
    }

    fn assert_redacts(text: &str, want: &str) {
        assert_eq!(redact(text), want, "input: {text}");
    }

    #[test]
    fn emails() {
        for (text, want) in [
            ("mail alice@example.com now", "mail [EMAIL] now"),
            ("john.doe+tag@mail.example.co.uk.", "[EMAIL]."),
            ("<Bob_O-Neil%x@sub-domain.example.org>", "<[EMAIL]>"),
            ("13812345678@qq.com", "[EMAIL]"),
            ("a@b.io,c@d.io", "[EMAIL],[EMAIL]"),
            (".lead@x.com", ".[EMAIL]"),
            ("mailto:ops@corp.example", "mailto:[EMAIL]"),
        ] {
            assert_redacts(text, want);
        }
        for text in ["user@localhost", "@handle", "a@b", "x@-bad.com", "a@b.c1", "me@.com", "trailing.@x.com"] {
            assert_kept(text);
        }
    }

    #[test]
    fn phones() {
        for (text, want) in [
            ("call +1 415 555 0123.", "call [PHONE]."),
            ("+1 (415) 555-0123", "[PHONE]"),
            ("+86 138 1234 5678", "[PHONE]"),
            ("+8613812345678", "[PHONE]"),
            ("+44 20 7946 0958", "[PHONE]"),
            ("+49-30-901820", "[PHONE]"),
            ("(415) 555-0123", "[PHONE]"),
            ("(415)555-0123", "[PHONE]"),
            ("415-555-0123", "[PHONE]"),
            ("415.555.0123", "[PHONE]"),
            ("415 555 0123", "[PHONE]"),
            ("1-415-555-0123", "[PHONE]"),
            ("13812345678", "[PHONE]"),
            ("138 1234 5678", "[PHONE]"),
            ("138-1234-5678", "[PHONE]"),
            ("tel:19912345678;", "tel:[PHONE];"),
        ] {
            assert_redacts(text, want);
        }
        for text in [
            "+5",
            "+1234567",
            "score +12 today",
            "a+8613812345678",
            "12812345678",
            "1381234567",
            "138123456789",
            "138 1234-5678",
            "555-0123",
            "123-456-7890",
            "415-155-0123",
            "4155550123",
            "+1234567890123456",
            "13812345678.5",
            "x13812345678",
        ] {
            assert_kept(text);
        }
    }

    #[test]
    fn chinese_resident_ids() {
        for (text, want) in [
            ("ID 11010519491231002X ok", "ID [CN_ID] ok"),
            ("11010519491231002x", "[CN_ID]"),
            ("440524188001010014", "[CN_ID]"),
            ("身份证号：110101199003078515。", "身份证号：[CN_ID]。"),
        ] {
            assert_redacts(text, want);
        }
        for text in [
            "110105194912310021",  // wrong check digit
            "110105194913310021",  // month 13
            "110105190002290025",  // 1900 is not a leap year
            "11010519491231002",   // 17 characters
            "1101051949123100211", // 19 digits
            "A11010519491231002X",
            "11010519491231002XY",
        ] {
            assert_kept(text);
        }
        assert_eq!(cn_id(b"110105200002290021", 0), Some(18), "2000-02-29 exists");
        assert_eq!(cn_id(b"110105200002290022", 0), None, "check digit must still match");
    }

    #[test]
    fn leap_days() {
        assert_eq!(
            (days_in_month(2000, 2), days_in_month(1900, 2), days_in_month(2024, 2), days_in_month(2023, 2)),
            (29, 28, 29, 28)
        );
        assert_eq!((days_in_month(2023, 4), days_in_month(2023, 12)), (30, 31));
    }

    #[test]
    fn cards() {
        for (text, want) in [
            ("card 4111111111111111 exp", "card [CARD] exp"),
            ("4111 1111 1111 1111", "[CARD]"),
            ("4111-1111-1111-1111", "[CARD]"),
            ("3782 822463 10005", "[CARD]"),
            ("5555555555554444", "[CARD]"),
            ("6011000990139424", "[CARD]"),
            ("4111 1111 1111 1111 2027", "[CARD] 2027"),
            ("卡号6222021234567890123结束", "卡号6222021234567890123结束"),
            ("卡号4012888888881881结束", "卡号[CARD]结束"),
        ] {
            assert_redacts(text, want);
        }
        for text in [
            "4111111111111112",
            "4111 1111-1111 1111",
            "1700000000000",
            "1234567812345670",
            "41111111111111111111",
            "4111 11 1111 1111 1111",
            "0.4111111111111111",
        ] {
            assert_kept(text);
        }
        assert!(luhn(b"79927398713") && !luhn(b"79927398710"));
    }

    #[test]
    fn api_keys() {
        for (text, want) in [
            ("key sk-proj-AbCdEf0123456789xyzXYZ_-abc done", "key [API_KEY] done"),
            ("sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789", "[API_KEY]"),
            ("sk-abcdefghijklmnopqrstuvwxyz012345", "[API_KEY]"),
            ("use gk_0123456789abcdef0123", "use [API_KEY]"),
            ("gk_e2e_tenant_a_0001", "[API_KEY]"),
            ("AKIAIOSFODNN7EXAMPLE", "[API_KEY]"),
            ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig", "Authorization: Bearer [API_KEY]"),
            ("authorization: bearer  gk_live_12345678", "authorization: bearer  [API_KEY]"),
            ("https://x.io/v1?api_key=0123456789abcdef0123&x=1", "https://x.io/v1?api_key=[API_KEY]&x=1"),
            ("token=YWJjZGVmZ2hpamtsbW5vcDEyMzQ=", "token=[API_KEY]"),
            (r#"{"x-api-key": "9f86d081884c7d659a2feaa0c55ad015"}"#, r#"{"x-api-key": "[API_KEY]"}"#),
            ("ACCESS_TOKEN = 'abcDEF1234567890ghi'.", "ACCESS_TOKEN = '[API_KEY]'."),
            ("client_secret:abcdefgh12345678.", "client_secret:[API_KEY]."),
            ("ghp_abcdefghijklmnopqrstuvwxyz0123456789", "[API_KEY]"),
        ] {
            assert_redacts(text, want);
        }
        for text in [
            "scikit-learn and sk-learn",
            "task-force",
            "gk_1",
            "Use a Bearer token here",
            "Bearer authentication",
            "key=short1",
            "key=abcdefghijklmnopqrstuvwxyz",
            "AKIAIOSFODNN7EXAMPLEX",
            "max_tokens=1024",
            "monkey business",
            "request_id=req_01J8Z7ABCDEF0123456789",
        ] {
            assert_kept(text);
        }
    }

    #[test]
    fn ordinary_numbers_dates_times_prices_and_ids_are_kept() {
        for text in [
            "The answer is 42, not 3.14159265358979.",
            "Population: 1,400,000,000 (2024-01-15), 1400000000 people.",
            "Meet at 10:30:45 on 2024/01/15 or 15.01.2024; ts 2024-01-15T10:30:00Z.",
            "Epoch 1700000000 and 1700000000000 ms.",
            "Price $1,299.99, ¥13812.00, €4.111.111,11, 20% off.",
            "Order #20240115123 shipped; version 1.2.3; ip 192.168.1.1.",
            "req_01HZX3K9Q2W8E5R7T1Y4U6I0O9 and req_4111111111111111",
            "uuid 550e8400-e29b-41d4-a716-446655440000",
            "trace 4bf92f3577b34da6a3ce929d0e0e4736 span 00f067aa0ba902b7",
            "sha 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
            "room 415, floor 555, ext 0123",
            "1+1=2, 13812345678a, a13812345678",
            "",
        ] {
            assert_kept(text);
        }
    }

    #[test]
    fn mixed_text_and_unicode_around_matches() {
        let text = "用户张三（zhang.san@example.com，电话13812345678）的身份证11010519491231002X，\
                    卡号 4111 1111 1111 1111；key: sk-proj-abcdefghijklmnopqrstuvwxyz0123 🚀 café+1 415 555 0123";
        assert_eq!(
            redact(text),
            "用户张三（[EMAIL]，电话[PHONE]）的身份证[CN_ID]，卡号 [CARD]；key: [API_KEY] 🚀 café[PHONE]"
        );
        assert_eq!(redact("émail: é@example.com"), "émail: é@example.com");
        assert_eq!(redact("→alice@example.com←"), "→[EMAIL]←");
        assert_eq!(redact("Ünïcödé 13812345678 ñ"), "Ünïcödé [PHONE] ñ");
    }

    #[test]
    fn spans_are_reported_in_order() {
        let text = "a@b.io 13812345678 AKIAIOSFODNN7EXAMPLE";
        let spans = find(text);
        assert_eq!(spans, vec![(0..6, Kind::Email), (7..18, Kind::Phone), (19..39, Kind::ApiKey)]);
    }

    #[test]
    fn random_text_never_panics_and_spans_fall_on_char_boundaries() {
        let alphabet: Vec<char> = "0123456789 +-.()@_=:Xxkeyb/\"'你é🚀\nskAKIAgk".chars().collect();
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..2_000 {
            let text: String = (0..60)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    alphabet[(state % alphabet.len() as u64) as usize]
                })
                .collect();
            for (span, _) in find(&text) {
                assert!(text.is_char_boundary(span.start) && text.is_char_boundary(span.end) && span.start < span.end);
            }
            let _ = redact(&text);
        }
    }

    #[test]
    fn pathological_inputs_stay_linear() {
        let n = 200_000;
        for unit in ["a.", "key=", "Bearer ", "1 ", "+1 ", "a@", "(4", "sk-", "x"] {
            let text = unit.repeat(n / unit.len());
            let start = std::time::Instant::now();
            let _ = redact(&text);
            assert!(start.elapsed().as_millis() < 2_000, "{unit:?} took {:?}", start.elapsed());
        }
    }

    #[test]
    fn remembered_credentials_are_removed_by_value_whatever_their_format() {
        let glm = "3f9a1c2e7b8d4a6f.Zk9XqLmNoPqRsTuV";
        let azure = "8e2f4c1a9b7d46e3a5c0f1e2d3c4b5a6";
        assert!(redact(&format!("bad key {glm}")).contains(glm), "unknown formats pass until remembered");
        remember_secret(glm);
        remember_secret(azure);
        remember_secret(azure);
        remember_secret("short");
        let echoed = format!("Incorrect API key provided: {glm}. Also {azure}; and short stays.");
        let out = redact(&echoed);
        assert!(!out.contains(glm) && !out.contains(azure), "{out}");
        assert_eq!(out.matches(CREDENTIAL_PLACEHOLDER).count(), 2, "{out}");
        assert!(out.contains("short stays"), "short values are never treated as secrets: {out}");
        assert!(matches!(without_secrets("nothing here"), Cow::Borrowed(_)), "no copy when nothing matches");
        SECRETS.with(|s| assert_eq!(s.borrow().len(), 2, "each secret remembered once"));
    }
}
