//! What the stress tests share. Thread counts derived from the machine that runs them: every
//! test oversubscribes the CPUs this process may use (its affinity mask and cgroup quota, as
//! `available_parallelism` reports them) by a factor of 2 to 4, on 2 CPUs as on 64. A time cap
//! (`SPINDLE_STRESS_SECONDS`, default 30 s) so that each test ends on any machine; and a small
//! random number generator.

#![allow(dead_code)]

/// CPUs this process may run on.
pub fn cpus() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

/// `factor` threads per CPU, and at least `min`.
pub fn per_cpu(factor: usize, min: usize) -> usize {
    (factor * cpus()).max(min)
}

/// How long a stress test may run: `SPINDLE_STRESS_SECONDS` (default 30).
pub fn time_limit() -> std::time::Duration {
    let secs: f64 = std::env::var("SPINDLE_STRESS_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|s: &f64| s.is_finite() && *s > 0.0)
        .unwrap_or(30.0);
    std::time::Duration::from_secs_f64(secs)
}

/// xorshift64*: enough randomness for burst lengths, dawdling and mixing call forms.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform-ish in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
