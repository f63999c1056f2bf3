//! Usage events → R2 objects: NDJSON, one object per date/hour partition of a queue batch, at
//! `usage/dt=YYYY-MM-DD/hour=HH/<first-event-id>-<n>.ndjson`, partitioned by each event's own time.
//!
//! A queue message carries one event or several, one JSON line each (`pack`: events of one
//! partition hour per message, so each message lands in one object). Lines are stored as the
//! producer wrote them, so a consumer older than the producer never drops a field. Duplicates
//! within a batch collapse to one line; across batches the `event_id` removes them
//! (at-least-once delivery).

use limiter::utc;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};

pub const PREFIX: &str = "usage";
/// Where the dead-letter consumer parks what reached the DLQ, in the same partitions and names.
pub const PARKED_PREFIX: &str = "usage-dlq";
pub const CONTENT_TYPE: &str = "application/x-ndjson";

/// One object to write, and the batch positions of the messages it stores. Its body is built
/// only when it is written (`body`), from the batch's own text: a batch is held once, not once
/// per copy (wasm memory never shrinks, so a consumer's peak is kept for the isolate's life).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportObject {
    pub key: String,
    pub events: usize,
    pub members: Vec<usize>,
    lines: Vec<Line>,
}

/// Where one event's line is: a range of its message's text, or (a pretty-printed event) the
/// line re-encoded.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Line {
    At { message: usize, start: usize, end: usize },
    Owned(String),
}

impl ExportObject {
    /// The NDJSON body, one line per event, each ended by `\n`; `bodies` are the batch's message
    /// texts that `plan` read.
    pub fn body(&self, bodies: &[Option<String>]) -> String {
        let mut body = String::with_capacity(self.lines.iter().map(|l| l.text(bodies).len() + 1).sum());
        for line in &self.lines {
            body.push_str(line.text(bodies));
            body.push('\n');
        }
        body
    }
}

impl Line {
    fn text<'a>(&'a self, bodies: &'a [Option<String>]) -> &'a str {
        match self {
            Line::At { message, start, end } => {
                bodies.get(*message).and_then(Option::as_deref).and_then(|b| b.get(*start..*end)).unwrap_or("")
            }
            Line::Owned(s) => s,
        }
    }
}

/// Text in a message that is not a usage event: the message's batch position, why, and the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    pub index: usize,
    pub reason: String,
    pub text: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub objects: Vec<ExportObject>,
    /// Text that is not a usage event: it can never be stored, so retrying it is pointless.
    pub rejected: Vec<Rejected>,
    /// How many messages the batch had.
    pub messages: usize,
}

impl Plan {
    /// Which messages to ack and which to redeliver, given which objects were stored (in
    /// `objects` order): a message is acked once every object holding its events is stored
    /// (one holding only rejected text at once), else redelivered whole.
    pub fn settle(&self, stored: &[bool]) -> (Vec<usize>, Vec<usize>) {
        let mut held = vec![false; self.messages];
        let mut failed = vec![false; self.messages];
        for (object, ok) in self.objects.iter().zip(stored.iter().chain(std::iter::repeat(&false))) {
            for &i in &object.members {
                held[i] = true;
                failed[i] |= !ok;
            }
        }
        let rejected_only = self.rejected.iter().map(|r| r.index).filter(|&i| !held[i]);
        let mut ack: Vec<usize> = (0..self.messages).filter(|&i| held[i] && !failed[i]).chain(rejected_only).collect();
        ack.sort_unstable();
        ack.dedup();
        (ack, (0..self.messages).filter(|&i| failed[i]).collect())
    }
}

/// The events of one message body: the byte ranges of its JSON values in order (one per line as
/// the producer writes them; a pretty-printed one spans lines), or why the rest is not JSON.
fn values(body: &str) -> Vec<Result<(usize, usize), String>> {
    if !body.contains('\n') {
        return vec![Ok((0, body.len()))];
    }
    let mut out = Vec::new();
    let mut stream = serde_json::Deserializer::from_str(body).into_iter::<serde::de::IgnoredAny>();
    let mut start = 0;
    loop {
        match stream.next() {
            None => break,
            Some(Ok(_)) => {
                let end = stream.byte_offset();
                out.push(Ok((start, end)));
                start = end;
            }
            Some(Err(e)) => {
                out.push(Err(format!("not a usage event: {e}")));
                break;
            }
        }
    }
    if out.is_empty() {
        out.push(Ok((0, body.len())));
    }
    out
}

/// The producer's messages, read in one pass: each line one event, its head parsed from it.
/// `None` when a line is not one whole event or there is none, and the message is read by
/// `values` instead (which reports the same thing with the same words).
fn compact_lines(body: &str) -> Option<Vec<((usize, usize), Head)>> {
    let mut out = Vec::new();
    let mut at = 0;
    for raw in body.split('\n') {
        let (start, end) = trimmed(body, at, at + raw.len());
        at += raw.len() + 1;
        if start == end {
            continue;
        }
        let head = serde_json::from_str::<Head>(&body[start..end]).ok().filter(|h| !h.event_id.is_empty())?;
        out.push(((start, end), head));
    }
    (!out.is_empty()).then_some(out)
}

/// The range `start..end` of `text` without surrounding whitespace.
fn trimmed(text: &str, start: usize, end: usize) -> (usize, usize) {
    let slice = &text[start..end];
    let from = start + (slice.len() - slice.trim_start().len());
    (from, from + slice.trim().len())
}

/// The hour a partition covers, as a number: events of one hour share an object.
pub fn partition_hour(ts_ms: u64) -> u64 {
    ts_ms / 3_600_000
}

/// Event lines (with their partition hour) packed into queue message bodies: lines of one hour
/// per message, joined by `\n`, in order of first appearance, each body at most `max_bytes`
/// (a longer line goes alone: the queue refuses it, and the producer logs it).
pub fn pack(lines: &[(u64, String)], max_bytes: usize) -> Vec<String> {
    let mut hours: Vec<u64> = Vec::new();
    for (hour, _) in lines {
        if !hours.contains(hour) {
            hours.push(*hour);
        }
    }
    let mut bodies = Vec::new();
    for hour in hours {
        let mut body = String::new();
        for (_, line) in lines.iter().filter(|(h, _)| *h == hour) {
            if !body.is_empty() && body.len() + 1 + line.len() > max_bytes {
                bodies.push(std::mem::take(&mut body));
            }
            if !body.is_empty() {
                body.push('\n');
            }
            body.push_str(line);
        }
        if !body.is_empty() {
            bodies.push(body);
        }
    }
    bodies
}

/// Message bodies grouped into `sendBatch` calls of at most `max_messages` and `max_bytes` each.
pub fn calls(bodies: Vec<String>, max_messages: usize, max_bytes: usize) -> Vec<Vec<String>> {
    let mut calls: Vec<Vec<String>> = Vec::new();
    let mut bytes = 0;
    for body in bodies {
        let full = calls.last().is_none_or(|c| c.len() >= max_messages || bytes + body.len() > max_bytes);
        if full {
            calls.push(Vec::new());
            bytes = 0;
        }
        bytes += body.len();
        if let Some(call) = calls.last_mut() {
            call.push(body);
        }
    }
    calls
}

/// The two fields the export needs; every other field passes through untouched.
#[derive(Deserialize)]
struct Head {
    event_id: String,
    ts_ms: u64,
}

pub fn partition(ts_ms: u64) -> String {
    format!("{PREFIX}/dt={}/hour={:02}", utc::date(ts_ms), utc::hour(ts_ms))
}

pub fn object_key(ts_ms: u64, first_event_id: &str, events: usize) -> String {
    let id: String = first_event_id
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' })
        .take(64)
        .collect();
    format!("{}/{id}-{events}.ndjson", partition(ts_ms))
}

#[derive(Default)]
struct Group {
    first: Option<(u64, String)>,
    lines: Vec<Line>,
    seen: BTreeSet<String>,
    members: Vec<usize>,
}

impl Group {
    fn add(&mut self, index: usize, head: Head, line: Line) {
        if self.members.last() != Some(&index) {
            self.members.push(index);
        }
        if !self.seen.insert(head.event_id.clone()) {
            return;
        }
        self.first.get_or_insert((head.ts_ms, head.event_id));
        self.lines.push(line);
    }
}

/// Groups a batch's message bodies (in batch order; `None`: not text) into objects by partition.
pub fn plan(bodies: &[Option<String>]) -> Plan {
    let mut groups: BTreeMap<String, Group> = BTreeMap::new();
    let mut rejected = Vec::new();
    for (index, body) in bodies.iter().enumerate() {
        let Some(body) = body else {
            rejected.push(Rejected { index, reason: "message body is not text".into(), text: None });
            continue;
        };
        if let Some(lines) = compact_lines(body) {
            for ((start, end), head) in lines {
                let group = groups.entry(partition(head.ts_ms)).or_default();
                group.add(index, head, Line::At { message: index, start, end });
            }
            continue;
        }
        for value in values(body) {
            let reject = |reason: String, text: &str| Rejected { index, reason, text: Some(text.trim().to_string()) };
            let (start, end) = match value {
                Ok(range) => range,
                Err(reason) => {
                    rejected.push(reject(reason, body));
                    continue;
                }
            };
            let text = &body[start..end];
            let head = match serde_json::from_str::<Head>(text) {
                Ok(h) if !h.event_id.is_empty() => h,
                Ok(_) => {
                    rejected.push(reject("event_id is empty".into(), text));
                    continue;
                }
                Err(e) => {
                    rejected.push(reject(format!("not a usage event: {e}"), text));
                    continue;
                }
            };
            let (start, end) = trimmed(body, start, end);
            let line = match one_line(&body[start..end]) {
                Some(encoded) => Line::Owned(encoded),
                None => Line::At { message: index, start, end },
            };
            groups.entry(partition(head.ts_ms)).or_default().add(index, head, line);
        }
    }
    let objects = groups
        .into_values()
        .filter_map(|g| {
            let (ts_ms, first_id) = g.first?;
            Some(ExportObject {
                key: object_key(ts_ms, &first_id, g.lines.len()),
                events: g.lines.len(),
                members: g.members,
                lines: g.lines,
            })
        })
        .collect();
    Plan { objects, rejected, messages: bodies.len() }
}

/// The parked copy's key of an export object: `usage-dlq/` in place of `usage/`.
pub fn parked_key(object_key: &str) -> String {
    match object_key.strip_prefix(PREFIX) {
        Some(rest) => format!("{PARKED_PREFIX}{rest}"),
        None => format!("{PARKED_PREFIX}/{object_key}"),
    }
}

/// Whether an object body holds an event of `tenant` (for the test-only export fault).
pub fn holds_tenant(body: &str, tenant: &str) -> bool {
    body.lines()
        .any(|line| serde_json::from_str::<serde_json::Value>(line).is_ok_and(|v| v["tenant"].as_str() == Some(tenant)))
}

/// NDJSON needs one line per event: a pretty-printed body is re-encoded compactly (`None`: the
/// text is one line already).
fn one_line(body: &str) -> Option<String> {
    if !body.contains(['\n', '\r']) {
        return None;
    }
    let encoded = serde_json::from_str::<serde_json::Value>(body).map(|v| v.to_string());
    Some(encoded.unwrap_or_else(|_| body.replace(['\n', '\r'], " ")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // 2026-01-02T03:59:59.999Z and the next millisecond, in the next hour.
    const END_OF_HOUR: u64 = 1_767_326_399_999;

    fn event(id: &str, ts_ms: u64) -> Option<String> {
        Some(
            json!({"schema_version": 1, "event_id": id, "ts_ms": ts_ms, "tenant": "acme", "future_field": [1]})
                .to_string(),
        )
    }

    #[test]
    fn keys_are_partitioned_by_the_events_own_time() {
        assert_eq!(partition(0), "usage/dt=1970-01-01/hour=00");
        assert_eq!(object_key(END_OF_HOUR, "req_ab12", 3), "usage/dt=2026-01-02/hour=03/req_ab12-3.ndjson");
        assert_eq!(object_key(END_OF_HOUR + 1, "req_ab12", 1), "usage/dt=2026-01-02/hour=04/req_ab12-1.ndjson");
        assert_eq!(
            object_key(END_OF_HOUR, "../../etc/x y", 1),
            "usage/dt=2026-01-02/hour=03/______etc_x_y-1.ndjson",
            "ids never escape their partition"
        );
    }

    #[test]
    fn one_object_per_partition_in_batch_order() {
        let bodies = vec![
            event("req_b", END_OF_HOUR),
            event("req_c", END_OF_HOUR + 1),
            event("req_a", END_OF_HOUR - 5),
            event("req_d", END_OF_HOUR + 3_600_000 * 24),
        ];
        let plan = plan(&bodies);
        assert!(plan.rejected.is_empty());
        let keys: Vec<&str> = plan.objects.iter().map(|o| o.key.as_str()).collect();
        assert_eq!(
            keys,
            vec![
                "usage/dt=2026-01-02/hour=03/req_b-2.ndjson",
                "usage/dt=2026-01-02/hour=04/req_c-1.ndjson",
                "usage/dt=2026-01-03/hour=03/req_d-1.ndjson",
            ]
        );
        assert_eq!(plan.objects[0].members, vec![0, 2]);
        let want = format!("{}\n{}\n", bodies[0].as_ref().unwrap(), bodies[2].as_ref().unwrap());
        assert_eq!(plan.objects[0].body(&bodies), want);
    }

    #[test]
    fn ndjson_lines_parse_back_and_keep_unknown_fields() {
        let bodies = [event("req_a", 1), event("req_b", 2)];
        let body = &plan(&bodies).objects[0].body(&bodies);
        assert!(body.ends_with('\n'));
        let lines: Vec<serde_json::Value> = body.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[1]["event_id"], "req_b");
        assert_eq!(lines[0]["future_field"], json!([1]));
    }

    #[test]
    fn duplicates_in_a_batch_are_stored_once_and_acked_together() {
        let plan = plan(&[event("req_a", 1), event("req_a", 1), event("req_b", 1)]);
        assert_eq!(plan.objects.len(), 1);
        assert_eq!(plan.objects[0].events, 2);
        assert_eq!(plan.objects[0].key, "usage/dt=1970-01-01/hour=00/req_a-2.ndjson");
        assert_eq!(plan.objects[0].members, vec![0, 1, 2]);
    }

    #[test]
    fn pretty_printed_bodies_become_one_line() {
        let pretty = serde_json::to_string_pretty(&json!({"event_id": "req_p", "ts_ms": 1, "note": "a\nb"})).unwrap();
        let bodies = [Some(pretty)];
        let body = plan(&bodies).objects[0].body(&bodies);
        assert_eq!(body.lines().count(), 1);
        let v: serde_json::Value = serde_json::from_str(body.trim_end()).unwrap();
        assert_eq!(v["note"], "a\nb");
    }

    #[test]
    fn non_events_are_rejected_not_stored() {
        let p = plan(&[
            None,
            Some("not json".into()),
            Some(r#"{"event_id":"","ts_ms":1}"#.into()),
            Some(r#"{"ts_ms":1}"#.into()),
            event("req_ok", 1),
        ]);
        let rejected: Vec<usize> = p.rejected.iter().map(|r| r.index).collect();
        assert_eq!(rejected, vec![0, 1, 2, 3]);
        // A message with no event at all is rejected too, not silently acked.
        for blank in ["", " ", "\n\n", "\r\n"] {
            let p = plan(&[Some(blank.to_string())]);
            assert_eq!((p.objects.len(), p.rejected.len()), (0, 1), "{blank:?}");
            assert_eq!(p.settle(&[]), (vec![0], vec![]), "{blank:?}");
        }
        assert!(p.rejected[3].reason.contains("missing field `event_id`"));
        assert_eq!(p.objects.len(), 1);
        assert_eq!(p.objects[0].members, vec![4]);
        assert_eq!(plan(&[]), Plan::default());
    }

    fn packed(events: &[Option<String>]) -> Option<String> {
        Some(events.iter().map(|e| e.clone().unwrap()).collect::<Vec<_>>().join("\n"))
    }

    #[test]
    fn a_message_of_several_lines_stores_each_event_as_written() {
        let (a, b, c) = (event("req_a", 1), event("req_b", 2), event("req_c", 3));
        let bodies = [packed(&[a.clone(), b.clone()]), c.clone()];
        let p = plan(&bodies);
        assert!(p.rejected.is_empty());
        assert_eq!(p.objects.len(), 1);
        assert_eq!(p.objects[0].events, 3);
        assert_eq!(p.objects[0].members, vec![0, 1], "each message once");
        let want = format!("{}\n{}\n{}\n", a.unwrap(), b.unwrap(), c.unwrap());
        assert_eq!(p.objects[0].body(&bodies), want, "the producer's bytes");
        assert_eq!(p.settle(&[true]), (vec![0, 1], vec![]));
        assert_eq!(p.settle(&[false]), (vec![], vec![0, 1]));
    }

    #[test]
    fn bad_text_in_a_packed_message_is_rejected_alone() {
        let good = event("req_ok", 1);
        let body = format!("{}\n{{\"ts_ms\":1}}\n", good.clone().unwrap());
        let p = plan(&[Some(body)]);
        assert_eq!(p.objects.len(), 1);
        assert_eq!(p.objects[0].events, 1);
        assert_eq!(p.rejected.len(), 1);
        assert_eq!(p.rejected[0].text.as_deref(), Some("{\"ts_ms\":1}"));
        assert!(p.rejected[0].reason.contains("missing field `event_id`"));
        // The message holds a stored event: it waits for its object, not acked as rejected.
        assert_eq!(p.settle(&[false]), (vec![], vec![0]));
        assert_eq!(p.settle(&[true]), (vec![0], vec![]));
        // Text that is not JSON stops the reading of its message; what came before is kept.
        let p = plan(&[Some(format!("{}\nnot json\n", good.unwrap()))]);
        assert_eq!((p.objects[0].events, p.rejected.len()), (1, 1));
        assert!(p.rejected[0].reason.starts_with("not a usage event"));
    }

    #[test]
    fn a_message_is_read_alike_by_lines_and_by_values() {
        let (a, b) = (event("req_a", 1).unwrap(), event("req_b", 2).unwrap());
        // Read line by line: CRLF, blank lines and spaces around an event are not part of it.
        let lines = [Some(format!("  {a}\r\n\n{b}\n"))];
        // Read value by value (two events on one line is not the producer's shape).
        let values = [Some(format!("{a} {b}\n"))];
        let (by_lines, by_values) = (plan(&lines), plan(&values));
        assert!(by_lines.rejected.is_empty() && by_values.rejected.is_empty());
        let want = format!("{a}\n{b}\n");
        assert_eq!(by_lines.objects[0].body(&lines), want);
        assert_eq!(by_values.objects[0].body(&values), want);
        assert_eq!((by_lines.objects[0].events, by_values.objects[0].events), (2, 2));
        // A body the plan was not made from yields no text rather than a panic.
        assert_eq!(by_lines.objects[0].body(&[]), "\n\n");
    }

    #[test]
    fn a_message_spanning_two_hours_is_acked_only_when_both_are_stored() {
        let p = plan(&[packed(&[event("req_a", END_OF_HOUR), event("req_b", END_OF_HOUR + 1)]), event("req_c", 1)]);
        // Objects in partition order: 1970 (message 1), then the two hours of message 0.
        let members: Vec<&[usize]> = p.objects.iter().map(|o| o.members.as_slice()).collect();
        assert_eq!(members, vec![&[1][..], &[0], &[0]]);
        assert_eq!(p.settle(&[true, false, true]), (vec![1], vec![0]));
        assert_eq!(p.settle(&[true, true, false]), (vec![1], vec![0]));
        assert_eq!(p.settle(&[true, true, true]), (vec![0, 1], vec![]));
        assert_eq!(p.settle(&[]).1, vec![0, 1], "unknown counts as not stored");
    }

    #[test]
    fn rejected_only_messages_are_acked() {
        let p = plan(&[None, Some("not json".into()), event("req_a", 1)]);
        assert_eq!(p.settle(&[false]), (vec![0, 1], vec![2]));
    }

    #[test]
    fn packing_keeps_one_hour_per_message_and_order_within_it() {
        let line = |h: u64, s: &str| (h, s.to_string());
        let lines = vec![line(5, "a"), line(6, "b"), line(5, "c"), line(6, "d")];
        assert_eq!(pack(&lines, 100), vec!["a\nc", "b\nd"]);
        assert_eq!(pack(&lines, 3), vec!["a\nc", "b\nd"], "exactly at the limit");
        assert_eq!(pack(&lines, 2), vec!["a", "c", "b", "d"]);
        let long = vec![line(1, "xxxxx"), line(1, "y")];
        assert_eq!(pack(&long, 3), vec!["xxxxx", "y"], "a line over the limit goes alone");
        assert!(pack(&[], 10).is_empty());
        assert_eq!(partition_hour(END_OF_HOUR), partition_hour(END_OF_HOUR - 3_599_999));
        assert_ne!(partition_hour(END_OF_HOUR), partition_hour(END_OF_HOUR + 1));
    }

    #[test]
    fn packed_messages_read_back_as_the_same_events() {
        let events: Vec<(u64, String)> = (0..250).map(|i| (0, event(&format!("req_{i}"), i).unwrap())).collect();
        let bodies = pack(&events, 4_000);
        assert!(bodies.len() > 1 && bodies.iter().all(|b| b.len() <= 4_000));
        let bodies: Vec<Option<String>> = bodies.into_iter().map(Some).collect();
        let p = plan(&bodies);
        assert_eq!(p.objects[0].events, 250);
        let want: Vec<String> = events.into_iter().map(|(_, l)| l).collect();
        assert_eq!(p.objects[0].body(&bodies), format!("{}\n", want.join("\n")));
    }

    #[test]
    fn calls_respect_the_queues_message_and_byte_limits() {
        let bodies = |n: usize, len: usize| (0..n).map(|_| "x".repeat(len)).collect::<Vec<_>>();
        let sizes = |c: Vec<Vec<String>>| c.iter().map(Vec::len).collect::<Vec<_>>();
        assert_eq!(sizes(calls(bodies(250, 1), 100, 1_000)), vec![100, 100, 50]);
        assert_eq!(sizes(calls(bodies(5, 40), 100, 100)), vec![2, 2, 1]);
        assert_eq!(sizes(calls(bodies(1, 500), 100, 100)), vec![1], "an oversized body goes alone");
        assert!(calls(Vec::new(), 100, 100).is_empty());
    }

    #[test]
    fn parked_copies_keep_the_partition_and_name() {
        let key = object_key(END_OF_HOUR, "req_ab12", 3);
        assert_eq!(parked_key(&key), "usage-dlq/dt=2026-01-02/hour=03/req_ab12-3.ndjson");
        assert_eq!(parked_key("odd"), "usage-dlq/odd");
    }

    #[test]
    fn tenants_are_found_by_field_not_by_text() {
        let bodies = [event("req_a", 1)];
        let body = plan(&bodies).objects[0].body(&bodies);
        assert!(holds_tenant(&body, "acme"));
        assert!(!holds_tenant(&body, "acm"));
        assert!(!holds_tenant("{\"note\":\"tenant acme\"}\n", "acme"));
    }
}
