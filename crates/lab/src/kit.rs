//! Small pieces every experiment needs, written once: cache padding, a timed span, thread
//! groups released together, calibration of work to a target time, medians, a cheap RNG.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::sys;

/// Keeps a value on cache lines of its own: 128 bytes, because the adjacent-line prefetcher
/// of Intel cores pulls lines in pairs.
#[repr(align(128))]
#[derive(Default)]
pub struct CachePadded<T>(pub T);

impl<T> std::ops::Deref for CachePadded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> std::ops::DerefMut for CachePadded<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

/// A measured stretch of time: wall-clock nanoseconds and TSC ticks over the same span.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Span {
    pub ns: f64,
    pub ticks: f64,
}

impl Span {
    pub fn as_duration(self) -> Duration {
        Duration::from_nanos(self.ns.max(0.0) as u64)
    }
}

/// Times `body` on the calling thread.
#[inline]
pub fn time(body: impl FnOnce()) -> Span {
    let (t0, c0) = (Instant::now(), sys::rdtsc());
    body();
    let (c1, t1) = (sys::rdtsc(), Instant::now());
    Span {
        ns: (t1 - t0).as_nanos() as f64,
        ticks: c1.wrapping_sub(c0) as f64,
    }
}

/// Runs `body(i)` on `threads` new threads released together; thread `i` is pinned to
/// `cpus[i % cpus.len()]` when `cpus` is given. Thread start-up is not timed: each thread
/// records its own start after the release and its own end, and the span runs from the
/// earliest start to the latest end.
pub fn run_together(threads: usize, cpus: Option<&[usize]>, body: impl Fn(usize) + Sync) -> Span {
    let ready = AtomicUsize::new(0);
    let go = AtomicBool::new(false);
    let spans: Vec<(Instant, u64, Instant, u64)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let (ready, go, body) = (&ready, &go, &body);
                scope.spawn(move || {
                    if let Some(cpus) = cpus.filter(|c| !c.is_empty()) {
                        sys::pin_current_thread(cpus[i % cpus.len()]);
                    }
                    ready.fetch_add(1, Ordering::AcqRel);
                    let mut spins = 0u32;
                    while !go.load(Ordering::Acquire) {
                        spins += 1;
                        if spins.is_multiple_of(64) {
                            std::thread::yield_now();
                        } else {
                            std::hint::spin_loop();
                        }
                    }
                    let (t0, c0) = (Instant::now(), sys::rdtsc());
                    body(i);
                    let (c1, t1) = (sys::rdtsc(), Instant::now());
                    (t0, c0, t1, c1)
                })
            })
            .collect();
        while ready.load(Ordering::Acquire) < threads {
            std::thread::yield_now();
        }
        go.store(true, Ordering::Release);
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    let Some(start) = spans.iter().map(|s| s.0).min() else {
        return Span::default();
    };
    let end = spans.iter().map(|s| s.2).max().unwrap_or(start);
    let c_start = spans.iter().map(|s| s.1).min().unwrap_or(0);
    let c_end = spans.iter().map(|s| s.3).max().unwrap_or(0);
    Span {
        ns: (end - start).as_nanos() as f64,
        ticks: c_end.saturating_sub(c_start) as f64,
    }
}

/// How many times [`calibrate`] goes on doubling after a size it found failed its try.
pub const RETRIES: u32 = 3;

/// The amount of work `n` for which `run(n)` takes about `target`: doubles `n` from `start`
/// until a run takes at least an eighth of the target *and* the work shows in it (the run took
/// at least 1.5 × the previous, smaller one), then scales linearly. The second condition keeps
/// a fixed cost per run (starting 64 threads, say) from passing for the work's: a run of one
/// unit that takes as long as the target because its threads took that long to start would
/// otherwise size every later run to a handful of units, measuring the start-up alone. A run
/// past 4 × the target stops the doubling anyway, once a second run of the same work
/// confirms it (the faster of the two counts): a cost paid once per process — lazy
/// initialisation, or the kernel's `membarrier` registration, which waits for an RCU grace
/// period — falls in one run only, and would otherwise size every later run to a few units (a
/// `rings` run once measured the spsc ring's streaming so, thread start-up over a handful of
/// items). The size found is then tried once: a run that stalled (threads that all slept a
/// millisecond, a preempted waiter) makes the work look dearer than it is, and one such run
/// once sized an 8-thread channel's runs to 222 messages, where starting and stopping the
/// threads was most of the time. When the try takes under a quarter of the target, the
/// doubling goes on from the size tried (at most [`RETRIES`] times). Never returns less than
/// 1 or more than `max`. Costs a few times the target in runs.
pub fn calibrate(
    target: Duration,
    start: u64,
    max: u64,
    mut run: impl FnMut(u64) -> Duration,
) -> u64 {
    let target_ns = target.as_nanos().max(1) as f64;
    let max = max.max(1);
    let mut n = start.clamp(1, max);
    let mut prev: Option<f64> = None;
    let mut retries = 0;
    loop {
        let mut took = run(n).as_nanos().max(1) as f64;
        if took >= 4.0 * target_ns {
            took = took.min(run(n).as_nanos().max(1) as f64);
        }
        let scales = prev.is_some_and(|p| took >= 1.5 * p);
        if (took >= target_ns / 8.0 && scales) || took >= 4.0 * target_ns || n >= max {
            let scaled = ((n as f64 * target_ns / took).round() as u64).clamp(1, max);
            if retries == RETRIES || scaled == max {
                return scaled;
            }
            retries += 1;
            n = scaled;
            took = run(n).as_nanos().max(1) as f64;
            if took >= target_ns / 4.0 {
                return n;
            }
        }
        prev = Some(took);
        // Jump straight to an eighth of the target when the run is far too short.
        let factor = (target_ns / 8.0 / took).clamp(2.0, 1024.0);
        n = ((n as f64 * factor) as u64).clamp(n + 1, max);
    }
}

/// Busy-waits for about `ticks` TSC ticks.
pub fn spin_ticks(ticks: u64) {
    let start = sys::rdtsc();
    while sys::rdtsc().wrapping_sub(start) < ticks {
        std::hint::spin_loop();
    }
}

/// Median of `v` (sorted in place); NaN when empty.
pub fn median(v: &mut [f64]) -> f64 {
    quantile(v, 0.5)
}

/// The `q`-quantile of `v` (sorted in place; nearest rank, averaging the two middle values
/// for the median of an even count); NaN when empty.
pub fn quantile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if q == 0.5 && n.is_multiple_of(2) {
        return (v[n / 2 - 1] + v[n / 2]) / 2.0;
    }
    v[((n - 1) as f64 * q).round() as usize]
}

/// Marsaglia's xorshift64: a few instructions per number, for benchmark kernels that must not
/// be dominated by their random numbers.
#[derive(Clone, Copy, Debug)]
pub struct XorShift(u64);

impl XorShift {
    pub fn new(seed: u64) -> Self {
        XorShift(seed | 1)
    }

    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in `0..n` (Lemire's multiply-shift; the bias is below 2^-32 for the lab's n).
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_together_times_all_threads() {
        let cpus = sys::allowed_cpus();
        let t = run_together(2, Some(&cpus), |_| {
            std::thread::sleep(Duration::from_millis(20))
        });
        assert!(t.ns >= 20e6, "{t:?}");
        assert!(t.ticks > 0.0);
    }

    #[test]
    fn calibration_is_not_fooled_by_a_one_time_cost() {
        // 1 µs per unit, and 50 ms more in the first run only (a registration, say): the
        // first run is past 4 × the target, and a second one shows the work's real cost.
        let mut first = true;
        let n = calibrate(Duration::from_millis(5), 1, u64::MAX, |n| {
            let once = if std::mem::take(&mut first) {
                Duration::from_millis(50)
            } else {
                Duration::ZERO
            };
            Duration::from_micros(n) + once
        });
        assert_eq!(n, 5000);
    }

    #[test]
    fn calibration_tries_the_size_it_found() {
        // 1 µs per unit, but the first run of 100 units or more stalls for the whole target
        // (its threads all slept): without a try, runs would be sized to 555 units.
        let mut stalled = false;
        let n = calibrate(Duration::from_millis(5), 1, u64::MAX, |n| {
            let stall = if n >= 100 && !std::mem::replace(&mut stalled, true) {
                Duration::from_millis(5)
            } else {
                Duration::ZERO
            };
            Duration::from_micros(n) + stall
        });
        assert!((4000..=6000).contains(&n), "{n}");
        // Every other run stalls: each stalled run sizes too low (555, 908, 1334 here), the
        // tries go on doubling, and calibration ends within its RETRIES tries, closer to the
        // real 5000 than the first stalled estimate.
        let mut runs = 0;
        let n = calibrate(Duration::from_millis(5), 1, u64::MAX, |n| {
            runs += 1;
            Duration::from_micros(n) + Duration::from_millis(if runs % 2 == 1 { 5 } else { 0 })
        });
        assert!((1000..=5000).contains(&n), "{n}");
        assert!(runs <= 4 * (RETRIES + 1), "{runs} runs");
    }

    #[test]
    fn calibration_scales_to_the_target() {
        // A fake run that costs 1 µs per unit of work: 5 ms needs 5000 units.
        let n = calibrate(Duration::from_millis(5), 1, u64::MAX, |n| {
            Duration::from_micros(n)
        });
        assert_eq!(n, 5000);
        // Never past the maximum, never below one.
        assert_eq!(
            calibrate(Duration::from_secs(1), 1, 300, Duration::from_micros),
            300
        );
        assert_eq!(
            calibrate(Duration::from_nanos(1), 1, 10, |_| Duration::from_secs(1)),
            1
        );
        // A fixed 5 ms per run (threads starting) must not pass for the work: the old rule
        // stopped at n = 1 (5 ms ≥ an eighth of the target) and sized runs to one unit.
        let n = calibrate(Duration::from_millis(5), 1, u64::MAX, |n| {
            Duration::from_millis(5) + Duration::from_micros(n)
        });
        assert!((1000..=5000).contains(&n), "{n}");
    }

    #[test]
    fn medians_and_quantiles() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&mut []).is_nan());
        let mut v = [5.0, 4.0, 3.0, 2.0, 1.0];
        assert_eq!(quantile(&mut v, 0.0), 1.0);
        assert_eq!(quantile(&mut v, 1.0), 5.0);
    }

    #[test]
    fn xorshift_below_stays_in_range() {
        let mut r = XorShift::new(7);
        let mut seen = [false; 10];
        for _ in 0..1000 {
            let x = r.below(10);
            assert!(x < 10);
            seen[x as usize] = true;
        }
        assert!(seen.iter().all(|&s| s), "every value appears: {seen:?}");
    }
}
