//! A small, fast, seedable random number generator for simulations and resampling.
//!
//! SplitMix64 (Steele, Lea and Flood, 2014): one 64-bit state, an add and a finaliser per
//! output. It passes BigCrush, which is plenty for permutation tests and power simulations, and it
//! keeps this crate free of dependencies. Not for cryptography.

/// SplitMix64 generator.
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator whose whole output is determined by `seed`.
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// A generator seeded from the clock and the process id: for runs that should differ.
    pub fn from_entropy() -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let mut rng = Self::new(nanos ^ ((std::process::id() as u64) << 32));
        rng.next_u64();
        rng
    }

    /// The next 64 uniformly distributed bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1), with 53 random bits.
    #[inline]
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// True with probability `p`.
    #[inline]
    pub fn bernoulli(&mut self, p: f64) -> bool {
        self.next_f64() < p
    }

    /// Uniform in `0..n` without modulo bias (Lemire's multiply-and-reject). `n` must be > 0.
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "below(0)");
        loop {
            let m = (self.next_u64() as u128) * (n as u128);
            let low = m as u64;
            // Reject the few low values that would make some outputs more likely.
            if low >= n.wrapping_neg() % n {
                return (m >> 64) as u64;
            }
        }
    }

    /// Shuffles the first `k` positions of `items` into a uniform random sample without
    /// replacement of the whole slice (a partial Fisher–Yates shuffle).
    pub fn partial_shuffle<T>(&mut self, items: &mut [T], k: usize) {
        let n = items.len();
        for i in 0..k.min(n) {
            let j = i + self.below((n - i) as u64) as usize;
            items.swap(i, j);
        }
    }

    /// A uniform random permutation of `items`.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        let n = items.len();
        self.partial_shuffle(items, n.saturating_sub(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_for_a_seed() {
        let mut a = SplitMix64::new(42);
        let mut b = SplitMix64::new(42);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        // Known first output of SplitMix64 for seed 0.
        assert_eq!(SplitMix64::new(0).next_u64(), 0xe220a8397b1dcdaf);
    }

    #[test]
    fn below_is_in_range_and_roughly_uniform() {
        let mut rng = SplitMix64::new(1);
        let mut counts = [0u32; 6];
        for _ in 0..60_000 {
            counts[rng.below(6) as usize] += 1;
        }
        for &c in &counts {
            // Expected 10000 each; 6 standard deviations is ~570.
            assert!((9_400..10_600).contains(&c), "{counts:?}");
        }
    }

    #[test]
    fn shuffle_is_a_permutation_and_moves_things() {
        let mut rng = SplitMix64::new(3);
        let mut v: Vec<u32> = (0..100).collect();
        rng.shuffle(&mut v);
        let mut sorted = v.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..100).collect::<Vec<_>>());
        assert_ne!(v, sorted);
        // Every position is equally likely to receive element 0.
        let mut first = [0u32; 4];
        for _ in 0..40_000 {
            let mut w = [0, 1, 2, 3];
            rng.shuffle(&mut w);
            first[w.iter().position(|&x| x == 0).unwrap()] += 1;
        }
        for &c in &first {
            assert!((9_400..10_600).contains(&c), "{first:?}");
        }
    }
}
