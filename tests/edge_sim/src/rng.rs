//! SplitMix64 and the few distributions the simulation draws from: seeded, so a run is
//! reproducible from its seed alone.

#[derive(Debug, Clone)]
pub struct Rng {
    state: u64,
}

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng { state: seed ^ 0x6A09_E667_F3BC_C908 }
    }

    /// An independent stream for one part of the world (so adding draws elsewhere keeps it).
    pub fn fork(&mut self, salt: u64) -> Rng {
        Rng::new(self.next_u64() ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }

    /// Exponential with the given mean.
    pub fn exp(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.unit()).ln()
    }

    pub fn normal(&mut self) -> f64 {
        // Box–Muller; one of the pair is enough here.
        let (u, v) = (1.0 - self.unit(), self.unit());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }

    /// Log-normal with the given median and shape (heavy right tail).
    pub fn lognormal(&mut self, median: f64, sigma: f64) -> f64 {
        median * (sigma * self.normal()).exp()
    }

    /// Geometric on 1, 2, … with the given mean (≥ 1).
    pub fn geometric(&mut self, mean: f64) -> u64 {
        if mean <= 1.0 {
            return 1;
        }
        let p = 1.0 / mean;
        1 + ((1.0 - self.unit()).ln() / (1.0 - p).ln()).floor() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream() {
        let (mut a, mut b) = (Rng::new(9), Rng::new(9));
        assert!((0..100).all(|_| a.next_u64() == b.next_u64()));
        assert_ne!(Rng::new(1).next_u64(), Rng::new(2).next_u64());
    }

    #[test]
    fn means_are_right() {
        let mut r = Rng::new(3);
        let n = 200_000;
        let exp: f64 = (0..n).map(|_| r.exp(50.0)).sum::<f64>() / n as f64;
        assert!((exp - 50.0).abs() < 1.0, "{exp}");
        let geo: f64 = (0..n).map(|_| r.geometric(4.0) as f64).sum::<f64>() / n as f64;
        assert!((geo - 4.0).abs() < 0.1, "{geo}");
        let mut logs: Vec<f64> = (0..n).map(|_| r.lognormal(100.0, 1.0)).collect();
        logs.sort_by(f64::total_cmp);
        assert!((logs[n / 2] - 100.0).abs() < 3.0, "median {}", logs[n / 2]);
        assert!((0..n).all(|_| r.below(7) < 7));
    }
}
