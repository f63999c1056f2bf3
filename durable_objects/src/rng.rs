//! A tiny xorshift64* generator: enough for ramp sampling, and needs no platform entropy.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XorShift {
    state: u64,
}

impl XorShift {
    pub fn new(seed: u64) -> Self {
        // A zero state would stay zero forever; mix the seed so nearby seeds diverge.
        let mixed = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
        XorShift { state: if mixed == 0 { 1 } else { mixed } }
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform-enough value in `0..n` (n > 0) for tests and sampling.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_spread() {
        let mut a = XorShift::new(42);
        let mut b = XorShift::new(42);
        assert_eq!(a.next_u64(), b.next_u64());
        let mut hits = [0u32; 10];
        for _ in 0..10_000 {
            hits[a.below(10) as usize] += 1;
        }
        assert!(hits.iter().all(|&h| (800..1_200).contains(&h)), "{hits:?}");
    }

    #[test]
    fn any_seed_works() {
        for seed in [0, 1, u64::MAX] {
            let mut r = XorShift::new(seed);
            assert_ne!(r.next_u64(), r.next_u64());
        }
    }
}
