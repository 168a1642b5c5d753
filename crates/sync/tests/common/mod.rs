//! What the stress tests share. Thread counts derived from the machine that runs them: every
//! test oversubscribes the CPUs this process may use (its affinity mask and cgroup quota, as
//! `available_parallelism` reports them) by a factor of 2 to 4, on 2 CPUs as on 64. A time cap
//! (`SPINDLE_STRESS_SECONDS`, default 30 s) so that each test ends on any machine; and a small
//! random number generator.

#![allow(dead_code)]

pub mod wakeups;

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

/// Whether this test runs under an emulator of another architecture (`qemu-aarch64` on an
/// x86-64 host, as CI's AArch64 step does), and the evidence: QEMU's user mode passes the
/// host's `/proc/cpuinfo` through, and implements neither `rseq` nor a dependable `fork` of a
/// multithreaded process (a child forked while other test threads run can hang in the
/// emulator). Tests that need what it lacks say `skipped` there.
pub fn emulated() -> Option<&'static str> {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let has = |key: &str| cpuinfo.lines().any(|l| l.starts_with(key));
    if cfg!(target_arch = "aarch64") && (has("vendor_id") || has("flags")) {
        Some("an emulator (an AArch64 build reading an x86 /proc/cpuinfo: qemu-aarch64)")
    } else if cfg!(target_arch = "x86_64") && has("CPU implementer") {
        Some("an emulator (an x86-64 build reading an Arm /proc/cpuinfo)")
    } else {
        None
    }
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
/// (seconds) is counted as a lost wake-up: nothing in a healthy run waits that long, *if the
/// process runs*. A machine that stops running the process for seconds (a paused or
/// overcommitted virtual machine: CI once saw one sender and one receiver of a channel time
/// out together in a run 5 s longer than usual, the signature that stopping the process with
/// SIGSTOP for 6 s reproduces) makes blocked calls time out without any wake-up lost.
///
/// The heartbeat is a thread that sleeps 1 ms at a time and records each gap between two of
/// its wake-ups longer than [`Heartbeat::GAP`]: a sleeping thread woken by its timer runs
/// within milliseconds even on a CPU shared with many runnable threads, so a gap of hundreds
/// of milliseconds means the process (or the machine) was not running. A test excuses a
/// timeout only if the process was frozen for at least half of its patience, and prints it.
pub struct Heartbeat {
    gaps: std::sync::Mutex<Vec<(std::time::Instant, std::time::Instant)>>,
}

/// The process's heartbeat, started by the first call: call it when a test starts, so that it
/// runs before anything it may have to excuse.
pub fn heartbeat() -> &'static Heartbeat {
    static HEARTBEAT: std::sync::OnceLock<&'static Heartbeat> = std::sync::OnceLock::new();
    HEARTBEAT.get_or_init(|| {
        let hb: &'static Heartbeat = Box::leak(Box::new(Heartbeat {
            gaps: std::sync::Mutex::new(Vec::new()),
        }));
        std::thread::spawn(move || {
            let mut last = std::time::Instant::now();
            loop {
                std::thread::sleep(std::time::Duration::from_millis(1));
                let now = std::time::Instant::now();
                if now - last > Heartbeat::GAP {
                    hb.gaps.lock().unwrap().push((last, now));
                }
                last = now;
            }
        });
        hb
    })
}

impl Heartbeat {
    /// Gaps longer than this count as the process being frozen.
    pub const GAP: std::time::Duration = std::time::Duration::from_millis(250);

    /// How much of `[from, now]` fell in gaps of the heartbeat (after a moment for a gap that
    /// has just ended to be recorded: the caller runs, so the process does).
    pub fn frozen_since(&self, from: std::time::Instant) -> std::time::Duration {
        std::thread::sleep(std::time::Duration::from_millis(5));
        let to = std::time::Instant::now();
        self.gaps
            .lock()
            .unwrap()
            .iter()
            .map(|&(a, b)| b.min(to).saturating_duration_since(a.max(from)))
            .sum()
    }

    /// Whether a wait that started at `from` and ran out of `patience` is excused: the process
    /// was frozen for at least half of it. Prints what it decided, naming the waiter `what`.
    pub fn excuses(
        &self,
        what: &str,
        from: std::time::Instant,
        patience: std::time::Duration,
    ) -> bool {
        let frozen = self.frozen_since(from);
        let excused = frozen * 2 >= patience;
        eprintln!(
            "stall: {what} waited {:?} (patience {patience:?}); the process was frozen for \
             {frozen:?} of it{}",
            from.elapsed(),
            if excused {
                ": excused, the machine did not run us"
            } else {
                ""
            }
        );
        excused
    }
}

/// Whether a blocking call of a channel stress test that waited out its patience is excused
/// because its side made progress meanwhile: `served` operations of its own side (receives,
/// for a waiting receiver; sends, for a waiting sender) completed on the channels it waited
/// on, by other threads, during its wait. Prints the verdict when it excuses the call.
///
/// A woken waiter retries and may lose the value (or the room) to a thread that was already
/// running; under heavy oversubscription it can lose every time for seconds (seen on a 2-vCPU
/// VM with CPU hogs beside the test: a receiver woken at every scheduler tick for 5 s, its
/// rival receiver, already running, taking each value first). No channel promises fairness
/// among its waiters (crossbeam-channel's, std's and ours do not), so that is no failure.
///
/// What this gives up: from outside, a waiter left asleep while its rivals keep working looks
/// the same, so such a lost wake-up is excused too. What stays detected is a stall of a whole
/// side (every waiter of the side asleep: the last one to start waiting sees `served` 0), and
/// any stall on the channels with a single thread per side that the MPMC and unbounded stress
/// tests run for that reason (`served` is always 0 there). The loom models check the wake-up
/// protocols with several waiters exhaustively on small cases.
pub fn starved(
    what: &str,
    from: std::time::Instant,
    patience: std::time::Duration,
    served: u64,
) -> bool {
    if served == 0 {
        return false;
    }
    eprintln!(
        "starved: {what} waited {:?} (patience {patience:?}) while its side completed {served} \
         operations: not counted (no fairness among waiters is promised)",
        from.elapsed()
    );
    true
}

/// Operations completed by one side of one channel, for [`starved`].
#[derive(Default)]
pub struct Served(std::sync::atomic::AtomicU64);

impl Served {
    /// One more operation completed.
    pub fn add(&self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Operations completed so far.
    pub fn now(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// Per sender of a channel stress test: how many values, and the sum of their sequence
/// numbers — one tally of what was sent, one of what was received.
pub struct PerSender(Vec<(std::sync::atomic::AtomicU64, std::sync::atomic::AtomicU64)>);

impl PerSender {
    pub fn new(senders: usize) -> PerSender {
        PerSender((0..senders).map(|_| Default::default()).collect())
    }

    /// Sender `id`'s value with sequence number `seq`.
    pub fn add(&self, id: usize, seq: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        self.0[id].0.fetch_add(1, Relaxed);
        self.0[id].1.fetch_add(seq, Relaxed);
    }

    /// Values counted, all senders.
    pub fn total(&self) -> u64 {
        use std::sync::atomic::Ordering::Relaxed;
        self.0.iter().map(|s| s.0.load(Relaxed)).sum()
    }

    /// The senders whose values `got` does not match (lost or duplicated), each printed.
    pub fn mismatches(&self, got: &PerSender) -> usize {
        use std::sync::atomic::Ordering::Relaxed;
        let read = |t: &(std::sync::atomic::AtomicU64, std::sync::atomic::AtomicU64)| {
            (t.0.load(Relaxed), t.1.load(Relaxed))
        };
        let mut mismatches = 0;
        for (id, (s, g)) in self.0.iter().zip(&got.0).enumerate() {
            let ((n, sum), (m, gsum)) = (read(s), read(g));
            if (n, sum) != (m, gsum) {
                eprintln!("sender {id}: sent {n} (sum {sum}), received {m} (sum {gsum})");
                mismatches += 1;
            }
        }
        mismatches
    }
}

/// Each flavour of `mpmc` channel, by its capacity: `Some(0)` rendezvous, `Some(n)` bounded,
/// `None` unbounded (for [`chan`]).
pub const FLAVOURS: [Option<usize>; 4] = [Some(0), Some(1), Some(8), None];

/// An `mpmc` channel of the flavour `capacity` names (see [`FLAVOURS`]).
pub fn chan<T>(
    capacity: Option<usize>,
) -> (
    spindle_sync::mpmc::Sender<T>,
    spindle_sync::mpmc::Receiver<T>,
) {
    match capacity {
        Some(n) => spindle_sync::mpmc::channel(n),
        None => spindle_sync::mpmc::unbounded(),
    }
}
