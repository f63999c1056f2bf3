//! Choosing the order in which a logical model's deployments are tried: priority tiers, weights
//! within a tier, session affinity. Randomness is passed in. (The capability gate is `pipeline::gate`.)

/// One chain entry as the selector sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate<'a> {
    pub id: &'a str,
    pub priority: u32,
    pub weight: u32,
}

/// FNV-1a: a stable hash for affinity and for spreading a random draw.
fn fnv(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in *part {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// SplitMix64's finalizer: full avalanche, so draws for different candidates are independent.
fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Weighted score in (0, 1]-space mapped to u64 order: higher wins (rendezvous / weighted shuffle).
fn score(weight: u32, draw: u64) -> f64 {
    // Efraimidis–Spirakis: u^(1/w) orders a weighted random permutation.
    let u = ((draw >> 11) as f64 + 1.0) / ((1u64 << 53) as f64 + 1.0);
    u.powf(1.0 / f64::from(weight.max(1)))
}

/// The try order: ascending priority; within a tier a weighted random order, or with a session
/// id a stable weighted order per session (affinity: the same session keeps its deployment
/// while it is healthy, and falls through to the next when it is not).
pub fn order<'a>(candidates: &[Candidate<'a>], random: u64, session: Option<&str>) -> Vec<&'a str> {
    let mut scored: Vec<(u32, f64, &'a str)> = candidates
        .iter()
        .filter(|c| c.weight > 0)
        .map(|c| {
            let seed = match session {
                Some(s) => fnv(&[s.as_bytes()]),
                None => random,
            };
            let draw = splitmix(seed ^ splitmix(fnv(&[c.id.as_bytes()])));
            (c.priority, score(c.weight, draw), c.id)
        })
        .collect();
    scored.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.total_cmp(&a.1)).then(a.2.cmp(b.2)));
    scored.into_iter().map(|(_, _, id)| id).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(id: &str, priority: u32, weight: u32) -> Candidate<'_> {
        Candidate { id, priority, weight }
    }

    #[test]
    fn priorities_come_first_in_order() {
        let chain = [c("b", 1, 1), c("a", 0, 1), c("z", 2, 100)];
        for r in 0..50 {
            assert_eq!(order(&chain, r, None), vec!["a", "b", "z"]);
        }
    }

    #[test]
    fn weights_split_traffic_in_proportion() {
        let chain = [c("heavy", 0, 3), c("light", 0, 1), c("backup", 1, 1)];
        let mut first_heavy = 0;
        let n = 20_000u64;
        for r in 0..n {
            let o = order(&chain, r.wrapping_mul(0x9e37_79b9_7f4a_7c15), None);
            assert_eq!(o.len(), 3);
            assert_eq!(o[2], "backup");
            if o[0] == "heavy" {
                first_heavy += 1;
            }
        }
        let share = first_heavy as f64 / n as f64;
        assert!((share - 0.75).abs() < 0.02, "heavy first {share}");
    }

    #[test]
    fn zero_weight_is_never_chosen() {
        let chain = [c("off", 0, 0), c("on", 0, 1)];
        assert_eq!(order(&chain, 7, None), vec!["on"]);
    }

    #[test]
    fn affinity_is_stable_per_session_and_spreads_sessions() {
        let chain = [c("a", 0, 1), c("b", 0, 1)];
        let first = order(&chain, 1, Some("session-42"));
        for r in 0..100 {
            assert_eq!(order(&chain, r, Some("session-42")), first, "random draw must not matter");
        }
        let a_first = (0..1000).filter(|i| order(&chain, 0, Some(&format!("s{i}")))[0] == "a").count();
        assert!((400..600).contains(&a_first), "{a_first}");
    }
}
