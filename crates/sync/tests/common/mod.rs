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

/// A witness for the stress tests' stall verdicts. A blocking call that waits out its patience
/// (5 s) is counted as a lost wake-up: nothing in a healthy run waits that long, *if the
/// process runs*. A machine that stops running the process for seconds (a paused or
/// overcommitted virtual machine: CI once saw one sender and one receiver time out together,
/// and nothing of the kind since) makes every blocked call time out without any wake-up lost.
///
/// The heartbeat is a thread that sleeps 1 ms at a time and records each gap between two of
/// its wake-ups longer than [`Heartbeat::GAP`]: a sleeping thread that is woken by its timer
/// runs within milliseconds even on a CPU shared with many runnable threads, so a gap of
/// hundreds of milliseconds means the process (or the machine) was not running.
/// [`Heartbeat::frozen`] says how much of an interval fell in such gaps; a test excuses a
/// timeout only if the process was frozen for at least half of its patience, and reports it.
pub struct Heartbeat {
    inner: std::sync::Arc<HeartbeatInner>,
}

struct HeartbeatInner {
    stop: std::sync::atomic::AtomicBool,
    gaps: std::sync::Mutex<Vec<(std::time::Instant, std::time::Instant)>>,
}

impl Heartbeat {
    /// Gaps longer than this count as the process being frozen.
    pub const GAP: std::time::Duration = std::time::Duration::from_millis(250);

    pub fn start() -> Heartbeat {
        let inner = std::sync::Arc::new(HeartbeatInner {
            stop: std::sync::atomic::AtomicBool::new(false),
            gaps: std::sync::Mutex::new(Vec::new()),
        });
        let i = inner.clone();
        std::thread::spawn(move || {
            let mut last = std::time::Instant::now();
            while !i.stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(std::time::Duration::from_millis(1));
                let now = std::time::Instant::now();
                if now - last > Self::GAP {
                    i.gaps.lock().unwrap().push((last, now));
                }
                last = now;
            }
        });
        Heartbeat { inner }
    }

    /// How much of `[from, to]` fell in gaps of the heartbeat. A gap still open at `to` is
    /// not seen: call this after the heartbeat has had a moment to wake (the test does it
    /// after the timed-out call returned, which means the process runs again).
    pub fn frozen(&self, from: std::time::Instant, to: std::time::Instant) -> std::time::Duration {
        // Give a gap that ended just now time to be recorded.
        std::thread::sleep(std::time::Duration::from_millis(5));
        self.inner
            .gaps
            .lock()
            .unwrap()
            .iter()
            .map(|&(a, b)| b.min(to).saturating_duration_since(a.max(from)))
            .sum()
    }

    /// Whether a call that started at `from` and timed out after `patience` may be excused:
    /// the process was frozen for at least half of it. Prints what it decided.
    pub fn excuses(
        &self,
        what: &str,
        from: std::time::Instant,
        patience: std::time::Duration,
    ) -> bool {
        let to = std::time::Instant::now();
        let frozen = self.frozen(from, to);
        let excused = frozen * 2 >= patience;
        eprintln!(
            "stall: {what} waited {:?}; the process was frozen for {frozen:?} of it{}",
            to - from,
            if excused {
                " (excused: the machine did not run us)"
            } else {
                ""
            }
        );
        excused
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.inner
            .stop
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }
}
