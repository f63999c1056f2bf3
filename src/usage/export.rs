//! Usage events → R2 objects: NDJSON, one object per date/hour partition of a queue batch, at
//! `usage/dt=YYYY-MM-DD/hour=HH/<first-event-id>-<n>.ndjson`, partitioned by each event's own time.
//!
//! Lines are the message bodies as the producer wrote them, so a consumer older than the producer
//! never drops a field. Duplicates within a batch collapse to one line; across batches the
//! `event_id` removes them (at-least-once delivery).

use limiter::utc;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};

pub const PREFIX: &str = "usage";
/// Where the dead-letter consumer parks what reached the DLQ, in the same partitions and names.
pub const PARKED_PREFIX: &str = "usage-dlq";
pub const CONTENT_TYPE: &str = "application/x-ndjson";

/// One object to write, and the batch positions of the messages it stores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportObject {
    pub key: String,
    pub body: String,
    pub events: usize,
    pub members: Vec<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    pub index: usize,
    pub reason: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub objects: Vec<ExportObject>,
    /// Messages that are not usage events: they can never be stored, so retrying them is pointless.
    pub rejected: Vec<Rejected>,
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
    lines: Vec<String>,
    seen: BTreeSet<String>,
    members: Vec<usize>,
}

/// Groups a batch's message bodies (in batch order; `None`: not text) into objects by partition.
pub fn plan(bodies: &[Option<String>]) -> Plan {
    let mut groups: BTreeMap<String, Group> = BTreeMap::new();
    let mut rejected = Vec::new();
    for (index, body) in bodies.iter().enumerate() {
        let Some(body) = body else {
            rejected.push(Rejected { index, reason: "message body is not text".into() });
            continue;
        };
        let head = match serde_json::from_str::<Head>(body) {
            Ok(h) if !h.event_id.is_empty() => h,
            Ok(_) => {
                rejected.push(Rejected { index, reason: "event_id is empty".into() });
                continue;
            }
            Err(e) => {
                rejected.push(Rejected { index, reason: format!("not a usage event: {e}") });
                continue;
            }
        };
        let group = groups.entry(partition(head.ts_ms)).or_default();
        group.members.push(index);
        if !group.seen.insert(head.event_id.clone()) {
            continue;
        }
        group.first.get_or_insert((head.ts_ms, head.event_id));
        group.lines.push(one_line(body));
    }
    let objects = groups
        .into_values()
        .filter_map(|g| {
            let (ts_ms, first_id) = g.first?;
            let mut body = g.lines.join("\n");
            body.push('\n');
            Some(ExportObject {
                key: object_key(ts_ms, &first_id, g.lines.len()),
                body,
                events: g.lines.len(),
                members: g.members,
            })
        })
        .collect();
    Plan { objects, rejected }
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

/// NDJSON needs one line per event: a pretty-printed body is re-encoded compactly.
fn one_line(body: &str) -> String {
    let body = body.trim();
    if !body.contains(['\n', '\r']) {
        return body.to_string();
    }
    serde_json::from_str::<serde_json::Value>(body)
        .map(|v| v.to_string())
        .unwrap_or_else(|_| body.replace(['\n', '\r'], " "))
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
        assert_eq!(plan.objects[0].body, format!("{}\n{}\n", bodies[0].as_ref().unwrap(), bodies[2].as_ref().unwrap()));
    }

    #[test]
    fn ndjson_lines_parse_back_and_keep_unknown_fields() {
        let plan = plan(&[event("req_a", 1), event("req_b", 2)]);
        let body = &plan.objects[0].body;
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
        let plan = plan(&[Some(pretty)]);
        assert_eq!(plan.objects[0].body.lines().count(), 1);
        let v: serde_json::Value = serde_json::from_str(plan.objects[0].body.trim_end()).unwrap();
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
        assert!(p.rejected[3].reason.contains("missing field `event_id`"));
        assert_eq!(p.objects.len(), 1);
        assert_eq!(p.objects[0].members, vec![4]);
        assert_eq!(plan(&[]), Plan::default());
    }

    #[test]
    fn parked_copies_keep_the_partition_and_name() {
        let key = object_key(END_OF_HOUR, "req_ab12", 3);
        assert_eq!(parked_key(&key), "usage-dlq/dt=2026-01-02/hour=03/req_ab12-3.ndjson");
        assert_eq!(parked_key("odd"), "usage-dlq/odd");
    }

    #[test]
    fn tenants_are_found_by_field_not_by_text() {
        let body = plan(&[event("req_a", 1)]).objects[0].body.clone();
        assert!(holds_tenant(&body, "acme"));
        assert!(!holds_tenant(&body, "acm"));
        assert!(!holds_tenant("{\"note\":\"tenant acme\"}\n", "acme"));
    }
}
