//! Random bytes for request ids and routing draws, taken from a per-isolate pool that one
//! `getrandom` call refills: each call is a new typed array, `crypto.getRandomValues` and a copy
//! into wasm, twice per request before; with the pool about once per 25 requests.

use std::cell::RefCell;

/// Bytes drawn from the runtime at a time (a request takes 20).
const POOL_BYTES: usize = 512;

/// A buffer of random bytes handed out once each, refilled from `source` when it runs dry.
struct Pool {
    bytes: [u8; POOL_BYTES],
    /// Bytes before this index are spent (zeroed); it starts at the end, so the first draw refills.
    next: usize,
}

impl Default for Pool {
    fn default() -> Self {
        Pool { bytes: [0; POOL_BYTES], next: POOL_BYTES }
    }
}

impl Pool {
    /// Fills `out` with unspent bytes, refilling from `source` as needed; false when the source
    /// fails (`out` then holds no meaning: the caller falls back as it would without a pool).
    fn fill<E>(&mut self, out: &mut [u8], mut source: impl FnMut(&mut [u8]) -> Result<(), E>) -> bool {
        let mut done = 0;
        while done < out.len() {
            if self.next == POOL_BYTES {
                if source(&mut self.bytes).is_err() {
                    return false;
                }
                self.next = 0;
            }
            let n = (out.len() - done).min(POOL_BYTES - self.next);
            let spent = &mut self.bytes[self.next..self.next + n];
            out[done..done + n].copy_from_slice(spent);
            // Spent bytes are not kept: nothing read later can reveal an id handed out before.
            spent.fill(0);
            self.next += n;
            done += n;
        }
        true
    }
}

thread_local! {
    static POOL: RefCell<Pool> = RefCell::new(Pool::default());
}

/// Fills `out` with random bytes from the runtime's CSPRNG (through the pool); false when the
/// runtime has none.
pub fn fill(out: &mut [u8]) -> bool {
    POOL.with(|pool| pool.borrow_mut().fill(out, getrandom::getrandom))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A source counting up from 1, byte by byte, that counts how many times it was asked.
    #[derive(Default)]
    struct Counting {
        value: u8,
        calls: usize,
    }

    impl Counting {
        fn fill(&mut self, buf: &mut [u8]) -> Result<(), ()> {
            self.calls += 1;
            for b in buf.iter_mut() {
                self.value = self.value.wrapping_add(1);
                *b = self.value;
            }
            Ok(())
        }
    }

    #[test]
    fn hands_out_each_byte_once_in_order_refilling_only_when_dry() {
        let mut source = Counting::default();
        let mut pool = Pool::default();
        let mut all = Vec::new();
        // Draws of every size up to two pools, so draws straddle refills at every offset.
        for size in 0..=2 * POOL_BYTES {
            let mut out = vec![0u8; size];
            assert!(pool.fill(&mut out, |b| source.fill(b)));
            all.extend(out);
        }
        let expected: Vec<u8> = (1..=all.len()).map(|i| (i % 256) as u8).collect();
        assert_eq!(all, expected, "the source's bytes, each once, in order");
        assert_eq!(source.calls, all.len().div_ceil(POOL_BYTES), "one refill per pool's worth");
    }

    #[test]
    fn spent_bytes_are_zeroed() {
        let mut source = Counting::default();
        let mut pool = Pool::default();
        let mut out = [0u8; 20];
        assert!(pool.fill(&mut out, |b| source.fill(b)));
        assert!(pool.bytes[..20].iter().all(|&b| b == 0));
        let unspent: Vec<u8> = (21..=POOL_BYTES).map(|i| (i % 256) as u8).collect();
        assert_eq!(pool.bytes[20..], unspent[..], "the rest still as the source gave it");
    }

    #[test]
    fn a_failing_source_fails_the_draw_and_is_asked_again_next_time() {
        let mut pool = Pool::default();
        let mut out = [7u8; 12];
        assert!(!pool.fill(&mut out, |_: &mut [u8]| Err(())));
        let mut source = Counting::default();
        assert!(pool.fill(&mut out, |b| source.fill(b)));
        assert_eq!(out, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
        assert_eq!(source.calls, 1);
    }

    #[test]
    fn an_empty_draw_asks_nothing() {
        let mut source = Counting::default();
        assert!(Pool::default().fill(&mut [], |b| source.fill(b)));
        assert_eq!(source.calls, 0);
    }
}
