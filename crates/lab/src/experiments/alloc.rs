//! `alloc`: spindle-alloc (seed 001's size-class allocator on per-CPU rseq caches) against
//! glibc's malloc, mimalloc, jemalloc and snmalloc, each called through Rust's `GlobalAlloc`.
//!
//! Every trial runs in a child process forked for it, so that each allocator starts from a
//! fresh heap and the child's peak resident memory is that trial's alone (`VmHWM` at the end
//! minus `VmRSS` at the start, both read by the child, after it has reset the peak it
//! inherited from the lab with `/proc/self/clear_refs`; the lab's own bookkeeping is made and
//! touched before the start). Workloads, each at 1, cores and 4 × cores threads:
//! - **random** (seed 001's benchmark): each thread allocates blocks of 1–512 B (uniform),
//!   fills them, and every 256 allocations frees 40 % of its live blocks chosen at random;
//! - **traces**: the allocation calls recorded from real programs (`spindle alloc record`),
//!   shipped in `crates/lab/data/alloc/`; each thread replays its own copy, filling the first
//!   256 bytes of each block and one byte per page beyond (as much as makes its pages
//!   resident);
//! - **handoff**: producers allocate and fill blocks of 1–512 B, consumers on other threads
//!   free them (remote frees), through one bounded queue per pair; each pair's two threads
//!   are pinned to two CPUs, where the machine has two.
//!
//! Each allocation call is timed with `rdtsc` (seed 001's cycles): the metrics are cycles per
//! call summed with and without the seed's 50 000-cycle cut-off, p99.9 per call, peak RSS,
//! and RSS over the peak of requested bytes (the allocator's overhead and fragmentation in
//! one number). The throughput, wall-clock ns per call (all threads together), comes from a
//! second pass of the same work in the same child with no call timed: two `rdtsc` around
//! every call cost about as much as a fast allocation, and would hide the allocators'
//! differences behind the timer's. Each pass's wall time runs from the moment all its
//! threads (consumers included) have started to the last one's end: spawning and ending
//! threads is not the allocators' work.
//! *Slow calls* counts calls above the cut-off, less, for
//! spindle-alloc, those that made a system call (which only spindle-alloc reports); the
//! *timer* variant counts the same for an empty timed section on the same workload, the
//! floor that interrupts and preemption alone produce (it has no untimed pass: its ns is
//! its timed pass's, and no claim uses it).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::Ordering::*;
use std::time::{Duration, Instant};

use spindle_alloc::trace::{Event, Trace};

use crate::results::{ExperimentResult, Profile, Verdict};
use crate::runner::{Ctx, Experiment};
use crate::spec::{Claim, Info, Metric, Plan, Sample, Section, Variant};

pub struct Alloc;

static SPINDLE: spindle_alloc::SpindleAlloc = spindle_alloc::SpindleAlloc;
static MIMALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;
static JEMALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
static SNMALLOC: snmalloc_rs::SnMalloc = snmalloc_rs::SnMalloc;

/// An allocator in the contest.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Who {
    Spindle,
    Glibc,
    Mimalloc,
    Jemalloc,
    Snmalloc,
}

impl Who {
    /// Every contestant, spindle-alloc first.
    pub const ALL: [Who; 5] = [
        Who::Spindle,
        Who::Glibc,
        Who::Mimalloc,
        Who::Jemalloc,
        Who::Snmalloc,
    ];

    /// The short name (`--allocator`).
    pub fn id(self) -> &'static str {
        match self {
            Who::Spindle => "spindle",
            Who::Glibc => "glibc",
            Who::Mimalloc => "mimalloc",
            Who::Jemalloc => "jemalloc",
            Who::Snmalloc => "snmalloc",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Who::Spindle => "spindle-alloc (per-CPU rseq caches)",
            Who::Glibc => "glibc malloc (std::alloc::System)",
            Who::Mimalloc => "mimalloc",
            Who::Jemalloc => "jemalloc (tikv-jemallocator)",
            Who::Snmalloc => "snmalloc (snmalloc-rs)",
        }
    }

    /// The contestant with this short name.
    pub fn parse(s: &str) -> Option<Who> {
        Who::ALL.into_iter().find(|w| w.id() == s)
    }

    fn allocator(self) -> &'static (dyn GlobalAlloc + Sync) {
        match self {
            Who::Spindle => &SPINDLE,
            Who::Glibc => &System,
            Who::Mimalloc => &MIMALLOC,
            Who::Jemalloc => &JEMALLOC,
            Who::Snmalloc => &SNMALLOC,
        }
    }
}

/// The shipped traces: name, what was recorded, the `.spat` bytes.
pub const TRACES: &[(&str, &str, &[u8])] = &[
    (
        "python",
        "python3 -S (PYTHONMALLOC=malloc: every object through malloc) building, serialising and parsing a JSON document",
        include_bytes!("../../data/alloc/python.spat"),
    ),
    (
        "sqlite",
        "sqlite3 filling, indexing and querying an in-memory table",
        include_bytes!("../../data/alloc/sqlite.spat"),
    ),
];

/// What a trial's threads do.
#[derive(Clone, Copy)]
pub enum Work<'a> {
    /// Seed 001's random workload: this many allocations per thread.
    Random(usize),
    /// One copy of the trace per thread: its first calls, at most this many (then every
    /// block still live is freed).
    Trace(&'a Trace, usize),
    /// Producer–consumer pairs passing this many blocks per pair.
    Handoff(usize),
}

/// The seed's cut-off between ordinary calls and outliers, in cycles.
pub const CUTOFF: u64 = 50_000;

/// Histogram buckets: 64 exact, then 32 per power of two.
const BUCKETS: usize = 64 + 58 * 32;

/// Per-thread timing: a log-linear histogram of cycles per call (32 steps per power of two),
/// the sums with and without the cut-off, and the slow calls that made no system call.
/// Aligned to 128 bytes (a pair of cache lines, which Intel's L2 prefetcher fetches
/// together): each thread writes its own at every call, and a handoff pair's two are
/// allocated one after the other.
#[repr(align(128))]
struct Times {
    /// The throughput pass: calls are made without timing them (nothing below is counted).
    untimed: bool,
    hist: [u64; BUCKETS],
    calls: u64,
    sum: u64,
    sum_cut: u64,
    below_cut: u64,
    slow: u64,
    live: usize,
    peak_live: usize,
}

fn bucket(v: u64) -> usize {
    if v < 64 {
        v as usize
    } else {
        let msb = 63 - v.leading_zeros() as usize;
        64 + (msb - 6) * 32 + ((v >> (msb - 5)) & 31) as usize
    }
}

fn bucket_low(i: usize) -> u64 {
    if i < 64 {
        i as u64
    } else {
        let (msb, sub) = ((i - 64) / 32 + 6, (i - 64) % 32);
        (1u64 << msb) | ((sub as u64) << (msb - 5))
    }
}

/// The middle of bucket `i` (within 1.6 % of every value in it).
fn bucket_mid(i: usize) -> f64 {
    if i < 64 {
        i as f64
    } else {
        let next = if i + 1 < BUCKETS {
            bucket_low(i + 1)
        } else {
            u64::MAX
        };
        (bucket_low(i) as f64 + next as f64) / 2.0
    }
}

impl Times {
    fn new() -> Box<Times> {
        Box::new(Times {
            untimed: false,
            hist: [0; BUCKETS],
            calls: 0,
            sum: 0,
            sum_cut: 0,
            below_cut: 0,
            slow: 0,
            live: 0,
            peak_live: 0,
        })
    }

    /// Times `f` (one allocator call, or nothing for the timer floor).
    #[inline(always)]
    fn call<R>(&mut self, f: impl FnOnce() -> R) -> R {
        if self.untimed {
            return f();
        }
        let os = spindle_alloc::os::OS_CALLS.load(Relaxed);
        let t0 = crate::sys::rdtsc();
        let r = f();
        let c = crate::sys::rdtsc().saturating_sub(t0);
        self.hist[bucket(c)] += 1;
        self.calls += 1;
        self.sum += c;
        if c <= CUTOFF {
            self.sum_cut += c;
            self.below_cut += 1;
        } else if spindle_alloc::os::OS_CALLS.load(Relaxed) == os {
            self.slow += 1;
        }
        r
    }

    fn grew(&mut self, bytes: usize) {
        self.live += bytes;
        self.peak_live = self.peak_live.max(self.live);
    }
}

/// Fills a block the way programs make it resident: the first 256 bytes, then a byte a page.
fn touch(p: *mut u8, size: usize, v: u8) {
    // SAFETY: p holds `size` bytes.
    unsafe {
        std::ptr::write_bytes(p, v, size.min(256));
        let mut at = 4096;
        while at < size {
            *p.add(at) = v;
            at += 4096;
        }
    }
}

fn layout(size: usize) -> Layout {
    Layout::from_size_align(size.max(1), 8).expect("a small layout")
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn alloc_timed(a: &dyn GlobalAlloc, size: usize, t: &mut Times, floor: bool) -> *mut u8 {
    if floor {
        t.call(|| ());
        // SAFETY: a non-zero layout.
        unsafe { a.alloc(layout(size)) }
    } else {
        // SAFETY: a non-zero layout.
        t.call(|| unsafe { a.alloc(layout(size)) })
    }
}

fn free_timed(a: &dyn GlobalAlloc, p: usize, size: usize, t: &mut Times, floor: bool) {
    // (A handoff consumer frees what it never counted: wrapping, and not used there.)
    t.live = t.live.wrapping_sub(size);
    if floor {
        t.call(|| ());
        // SAFETY: p is a live block of `a` with this layout.
        unsafe { a.dealloc(p as *mut u8, layout(size)) }
    } else {
        // SAFETY: p is a live block of `a` with this layout.
        t.call(|| unsafe { a.dealloc(p as *mut u8, layout(size)) })
    }
}

/// Seed 001's workload on one thread.
fn random(
    a: &dyn GlobalAlloc,
    n: usize,
    seed: u64,
    t: &mut Times,
    floor: bool,
    live: &mut Vec<(usize, usize)>,
) {
    let mut rng = Rng(seed | 1);
    for i in 0..n {
        let size = 1 + (rng.next() % 512) as usize;
        let p = alloc_timed(a, size, t, floor);
        if p.is_null() {
            continue;
        }
        touch(p, size, i as u8);
        live.push((p as usize, size));
        t.grew(size);
        if i % 256 == 255 {
            for _ in 0..live.len() * 2 / 5 {
                let (p, s) = live.swap_remove(rng.next() as usize % live.len());
                free_timed(a, p, s, t, floor);
            }
        }
    }
    for (p, s) in live.drain(..) {
        free_timed(a, p, s, t, floor);
    }
}

/// One copy of a trace on one thread; `table` has a slot per id.
fn replay(
    a: &dyn GlobalAlloc,
    trace: &Trace,
    calls: usize,
    t: &mut Times,
    table: &mut [(usize, usize)],
) {
    for (i, e) in trace.events.iter().take(calls).enumerate() {
        match *e {
            Event::Malloc { id, size } => {
                let size = size as usize;
                let p = alloc_timed(a, size, t, false);
                if !p.is_null() {
                    touch(p, size, i as u8);
                    table[id as usize] = (p as usize, size);
                    t.grew(size);
                }
            }
            Event::Free { id } => {
                let (p, s) = std::mem::take(&mut table[id as usize]);
                if p != 0 {
                    free_timed(a, p, s, t, false);
                }
            }
            Event::Realloc { from, to, size } => {
                let (p, s) = std::mem::take(&mut table[from as usize]);
                let size = (size as usize).max(1);
                if p == 0 {
                    continue;
                }
                // SAFETY: p is live with layout(s); the new size is non-zero.
                let q = t.call(|| unsafe { a.realloc(p as *mut u8, layout(s), size) });
                if q.is_null() {
                    table[from as usize] = (p, s);
                    continue;
                }
                if size > s {
                    // SAFETY: q holds `size` bytes.
                    touch(unsafe { q.add(s) }, size - s, i as u8);
                }
                t.live -= s;
                t.grew(size);
                table[to as usize] = (q as usize, size);
            }
        }
    }
    for slot in table.iter_mut() {
        let (p, s) = std::mem::take(slot);
        if p != 0 {
            free_timed(a, p, s, t, false);
        }
    }
}

/// One producer–consumer pair: `n` blocks allocated here, freed there.
/// Its start and end, from the moment both threads (and every other pair of the pass) have
/// passed `gate`; None if the pass was called off.
fn handoff(
    a: &(dyn GlobalAlloc + Sync),
    n: usize,
    seed: u64,
    tp: &mut Times,
    tc: &mut Times,
    gate: &Gate,
    cpus: Option<(usize, usize)>,
) -> Option<(Instant, Instant)> {
    let q = crossbeam_queue::ArrayQueue::<(usize, usize)>::new(256);
    if let Some((producer, _)) = cpus {
        crate::sys::pin_current_thread(producer);
    }
    let start = std::thread::scope(|s| {
        let q = &q;
        let consumer = std::thread::Builder::new().spawn_scoped(s, move || {
            if let Some((_, consumer)) = cpus {
                crate::sys::pin_current_thread(consumer);
            }
            if !gate.wait() {
                return;
            }
            let mut got = 0;
            while got < n {
                match q.pop() {
                    Some((p, size)) => {
                        free_timed(a, p, size, tc, false);
                        got += 1;
                    }
                    None => std::thread::yield_now(),
                }
            }
        });
        if let Err(e) = consumer {
            gate.off.store(true, Release);
            panic!("could not start a consumer thread: {e}");
        }
        if !gate.wait() {
            return None;
        }
        let start = Instant::now();
        let mut rng = Rng(seed | 1);
        for i in 0..n {
            let size = 1 + (rng.next() % 512) as usize;
            let p = alloc_timed(a, size, tp, false);
            assert!(!p.is_null(), "out of memory");
            touch(p, size, i as u8);
            tp.grew(size);
            let mut item = (p as usize, size);
            while let Err(back) = q.push(item) {
                item = back;
                std::thread::yield_now();
            }
        }
        Some(start)
    })?;
    // Live bytes peak at a full queue: 256 blocks of 256.5 B on average, and one in hand.
    tp.peak_live = 257 * 257;
    Some((start, Instant::now()))
}

/// What a child sends back.
#[derive(Clone, Copy)]
#[repr(C)]
struct Out {
    calls: u64,
    sum: u64,
    sum_cut: u64,
    below_cut: u64,
    slow: u64,
    p999: f64,
    peak_live: u64,
    rss_start_kib: u64,
    hwm_kib: u64,
    wall_ns: u64,
    faults: u64,
    /// spindle-alloc's cache mode, as text.
    mode: [u8; 64],
    done: u64,
}

impl Default for Out {
    fn default() -> Self {
        // SAFETY: every field is an integer, a float or bytes: all zeros is a valid value.
        unsafe { std::mem::zeroed() }
    }
}

/// Minor page faults of this process so far (`getrusage`).
fn minor_faults() -> u64 {
    #[repr(C)]
    struct Rusage {
        times: [i64; 4],
        maxrss: i64,
        ixrss: i64,
        idrss: i64,
        isrss: i64,
        minflt: i64,
        rest: [i64; 7],
    }
    extern "C" {
        fn getrusage(who: i32, usage: *mut Rusage) -> i32;
    }
    let mut u = std::mem::MaybeUninit::<Rusage>::zeroed();
    // SAFETY: RUSAGE_SELF (0) into a struct rusage-sized buffer.
    if unsafe { getrusage(0, u.as_mut_ptr()) } != 0 {
        return 0;
    }
    // SAFETY: filled by getrusage (or zeroed).
    unsafe { u.assume_init() }.minflt.max(0) as u64
}

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// A start line for `n` threads that a failed spawn can call off (a `Barrier` would leave
/// the threads already started waiting forever).
struct Gate {
    n: usize,
    ready: std::sync::atomic::AtomicUsize,
    off: std::sync::atomic::AtomicBool,
}

impl Gate {
    fn new(n: usize) -> Gate {
        Gate {
            n,
            ready: 0.into(),
            off: false.into(),
        }
    }

    /// Waits until all `n` have arrived (true) or the start was called off (false).
    fn wait(&self) -> bool {
        self.ready.fetch_add(1, AcqRel);
        while self.ready.load(Acquire) < self.n {
            if self.off.load(Acquire) {
                return false;
            }
            std::thread::yield_now();
        }
        true
    }
}

/// One pass of `work`: a thread per table (and, for handoff, its consumer). Returns its wall
/// time: from the moment every thread, consumers included, has started (a gate) to the last
/// one's end, so that creating the threads, which takes as long as thousands of calls and
/// varies from one pass to the next, is not counted as the allocator's. Ending a thread
/// (where spindle-alloc hands its cached lists to the shared stacks, and mimalloc abandons
/// its heap) is not counted either. `seed` picks the random and handoff workloads' sequence
/// (each thread's from it).
fn pass(
    a: &(dyn GlobalAlloc + Sync),
    work: Work<'_>,
    seed: u64,
    floor: bool,
    times: &mut [Box<Times>],
    tables: &mut [Vec<(usize, usize)>],
) -> Duration {
    let consumers = if matches!(work, Work::Handoff(_)) {
        2
    } else {
        1
    };
    let gate = Gate::new(tables.len() * consumers);
    let gate = &gate;
    let cpus = crate::sys::allowed_cpus();
    let cpus = &cpus;
    std::thread::scope(|s| {
        let mut ts = times.iter_mut();
        let mut threads = Vec::new();
        for (k, table) in tables.iter_mut().enumerate() {
            let (t, t2) = (ts.next().expect("times"), ts.next().expect("times"));
            let seed = seed ^ (k as u64) << 32;
            // A handoff pair's producer and consumer on two CPUs, where there are two (pair k
            // on the allowed CPUs 2k and 2k + 1, wrapping around: the lab's cores / 2 pairs
            // get CPUs of their own): left to the scheduler, a pair shared one CPU in some
            // trials and not in others, and every allocator's rate differed severalfold
            // between the two (the commit that pinned them has the figures).
            let pair_cpus = (cpus.len() >= 2)
                .then(|| (cpus[2 * k % cpus.len()], cpus[(2 * k + 1) % cpus.len()]));
            let spawned = std::thread::Builder::new().spawn_scoped(s, move || {
                if let Work::Handoff(n) = work {
                    return handoff(a, n, seed, t, t2, gate, pair_cpus);
                }
                // The thread's own copy of its list's header (pointer, capacity, length), on
                // its stack: the headers of all threads' lists share cache lines in `tables`,
                // and the random workload writes its length at every call.
                let mut mine = std::mem::take(table);
                if let Work::Random(_) = work {
                    mine.clear(); // the live blocks' list (a trace's table keeps a slot per id)
                }
                if !gate.wait() {
                    *table = mine;
                    return None;
                }
                let start = Instant::now();
                match work {
                    Work::Random(n) => random(a, n, seed, t, floor, &mut mine),
                    Work::Trace(tr, calls) => replay(a, tr, calls, t, &mut mine),
                    Work::Handoff(_) => unreachable!("returned above"),
                }
                let end = Instant::now();
                *table = mine;
                Some((start, end))
            });
            match spawned {
                Ok(t) => threads.push(t),
                Err(e) => {
                    gate.off.store(true, Release);
                    panic!("could not start a workload thread: {e}");
                }
            }
        }
        let spans: Vec<(Instant, Instant)> = threads
            .into_iter()
            .map(|t| t.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .map(|s| s.expect("every thread started"))
            .collect();
        let start = spans.iter().map(|s| s.0).min().expect("a thread");
        let end = spans.iter().map(|s| s.1).max().expect("a thread");
        end - start
    })
}

/// Runs `work` on `threads` threads of allocator `who`, in the current process: the timed
/// pass, then the untimed one for the throughput.
///
/// `seed` picks the random and handoff workloads' sequence: a trial of 15 000 calls (quick)
/// that replayed the same sequence every time could be learnt by the branch predictors, as
/// the `itoa` experiment's inputs were (see its `INPUTS`), so each trial, and its untimed
/// pass, draws a sequence of its own from the same distribution ([`trial_seed`]).
fn run_work(who: Who, work: Work<'_>, threads: usize, floor: bool, seed: u64) -> Out {
    let a = who.allocator();
    // Every allocator's first-use setup (spindle-alloc: its cache mode, region and slabs)
    // before the start, untimed; glibc's free memory inherited from the parent given back.
    // SAFETY: one small block, freed at once.
    unsafe {
        let l = layout(64);
        a.dealloc(a.alloc(l), l);
    }
    extern "C" {
        fn malloc_trim(pad: usize) -> i32;
    }
    // SAFETY: glibc's malloc_trim has no preconditions.
    unsafe { malloc_trim(0) };
    let mut times: Vec<Box<Times>> = (0..threads * 2).map(|_| Times::new()).collect();
    let mut tables: Vec<Vec<(usize, usize)>> = (0..threads)
        .map(|_| {
            let n = match work {
                Work::Trace(t, _) => t.ids as usize,
                _ => 1024,
            };
            // Written twice so that its pages are resident before the start (`vec![0; n]`
            // would be fresh zero pages, made resident during the trial).
            vec![(1, 1); n].into_iter().map(|_| (0, 0)).collect()
        })
        .collect();
    // A forked child inherits its parent's peak RSS (VmHWM): reset it to the current RSS
    // (Linux 4.0+), so that the peak is this trial's.
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let mut out = Out {
        rss_start_kib: status_kib("VmRSS:"),
        ..Out::default()
    };
    let faults = minor_faults();
    let timed_ns = pass(a, work, seed, floor, &mut times, &mut tables).as_nanos() as u64;
    out.faults = minor_faults().saturating_sub(faults);
    out.hwm_kib = status_kib("VmHWM:");
    // The throughput: the same work again, its calls untimed (two rdtsc per call would add
    // their own cost to every allocator's and hide the differences).
    out.wall_ns = timed_ns;
    if !floor {
        let mut untimed: Vec<Box<Times>> = (0..threads * 2).map(|_| Times::new()).collect();
        for t in &mut untimed {
            t.untimed = true;
        }
        let seed = seed ^ 0x5bd1_e995_0000_0000;
        out.wall_ns = pass(a, work, seed, floor, &mut untimed, &mut tables).as_nanos() as u64;
    }
    let mut hist = [0u64; BUCKETS];
    for t in &times {
        out.calls += t.calls;
        out.sum += t.sum;
        out.sum_cut += t.sum_cut;
        out.below_cut += t.below_cut;
        out.slow += t.slow;
        out.peak_live += t.peak_live as u64;
        for (h, x) in hist.iter_mut().zip(t.hist.iter()) {
            *h += x;
        }
    }
    let mut seen = 0;
    let rank = (out.calls as f64 * 0.999).ceil() as u64;
    for (i, h) in hist.iter().enumerate() {
        seen += h;
        if seen >= rank {
            out.p999 = bucket_mid(i);
            break;
        }
    }
    if who == Who::Spindle {
        let m = spindle_alloc::cache_mode().as_bytes();
        let n = m.len().min(out.mode.len());
        out.mode[..n].copy_from_slice(&m[..n]);
    }
    out.done = 1;
    out
}

extern "C" {
    fn fork() -> i32;
    fn waitpid(pid: i32, status: *mut i32, options: i32) -> i32;
    fn kill(pid: i32, sig: i32) -> i32;
    fn _exit(code: i32) -> !;
}

/// The seed of a variant's `trial`-th trial: the same for every contestant's `trial`-th, so that
/// the trials the runner pairs compare allocators on one sequence, and a new one each trial.
fn trial_seed(trial: u64) -> u64 {
    0x9e37_79b9_7f4a_7c15 ^ trial.wrapping_mul(0xd6e8_feb8_6659_fd93)
}

/// Runs one trial in a child process forked for it; the child writes its [`Out`] into a
/// shared page and exits without running destructors. A child that crashes or takes longer
/// than `limit` is reported as an error (and killed). `seed`: see [`run_work`].
fn in_child(
    who: Who,
    work: Work<'_>,
    threads: usize,
    floor: bool,
    limit: Duration,
    seed: u64,
) -> Result<Out, String> {
    use rustix::mm::{mmap_anonymous, munmap, MapFlags, ProtFlags};
    // SAFETY: a new shared anonymous page, unmapped below.
    let page = unsafe {
        mmap_anonymous(
            std::ptr::null_mut(),
            4096,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::SHARED,
        )
    }
    .map_err(|e| format!("mmap: {e}"))? as *mut Out;
    // SAFETY: fork; the child only runs the workload (allocations through glibc, which is
    // fork-safe, and through the contestant, which the parent never used) and `_exit`s.
    let pid = unsafe { fork() };
    if pid == 0 {
        // A panic must not unwind into the parent's lab code (the child would go on running
        // it): it ends the child, which the parent reports.
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_work(who, work, threads, floor, seed)
        }));
        // SAFETY: the shared page; then leave without unwinding or destructors.
        unsafe {
            match out {
                Ok(out) => page.write(out),
                Err(_) => _exit(101),
            }
            _exit(0)
        }
    }
    let result = if pid < 0 {
        Err(format!("fork: {}", std::io::Error::last_os_error()))
    } else {
        wait_child(pid, limit, true)
            // SAFETY: the child finished writing before it exited.
            .map(|()| unsafe { page.read() })
            .and_then(|o| {
                if o.done == 1 {
                    Ok(o)
                } else {
                    Err("the child wrote no result".into())
                }
            })
    };
    // SAFETY: our page, no longer used.
    let _ = unsafe { munmap(page.cast(), 4096) };
    result
}

/// Waits for the trial's child `pid` to end; after `limit` kills it.
///
/// The lab sleeps in `poll` on a pidfd of the child (Linux 5.3+, `pidfd`), which wakes it
/// once, when the child exits. It used to ask `waitpid` every 500 µs: each of those wake-ups
/// that the scheduler ran on the child's CPU preempted the child, and the allocator call it
/// fell in took tens of microseconds, above the cut-off (the commit that made this has the
/// figures). Where `pidfd_open` or `poll` is refused (or `pidfd` is false), it still polls,
/// its naps doubling from 500 µs to 20 ms.
fn wait_child(pid: i32, limit: Duration, pidfd: bool) -> Result<(), String> {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    use rustix::io::Errno;
    const WNOHANG: i32 = 1;
    let deadline = Instant::now().checked_add(limit);
    let mut pidfd = rustix::process::Pid::from_raw(pid)
        .filter(|_| pidfd)
        .and_then(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok());
    let mut nap = Duration::from_micros(500);
    let mut status = 0;
    loop {
        // SAFETY: waits for our own child.
        let r = unsafe { waitpid(pid, &mut status, WNOHANG) };
        if r == pid {
            break;
        }
        if r < 0 {
            return Err(format!("waitpid: {}", std::io::Error::last_os_error()));
        }
        let left = deadline.map_or(Duration::MAX, |d| {
            d.saturating_duration_since(Instant::now())
        });
        if left.is_zero() {
            // SAFETY: our own child; SIGKILL, then reap it.
            unsafe {
                kill(pid, 9);
                waitpid(pid, &mut status, 0);
            }
            return Err(format!(
                "the trial's child took more than {} s and was killed",
                limit.as_secs_f64()
            ));
        }
        let timeout = Timespec::try_from(left).ok();
        match (&pidfd, timeout) {
            (Some(fd), Some(timeout)) => {
                let mut fds = [PollFd::new(fd, PollFlags::IN)];
                // Readable once the child has exited; a signal (EINTR) or the timeout: ask
                // `waitpid` again above. Any other error would come back at once, every
                // round: naps instead.
                if let Err(e) = poll(&mut fds, Some(&timeout)) {
                    if e != Errno::INTR {
                        pidfd = None;
                    }
                }
            }
            _ => {
                std::thread::sleep(nap.min(left));
                nap = (nap * 2).min(Duration::from_millis(20));
            }
        }
    }
    // WIFEXITED && WEXITSTATUS == 0
    if status & 0x7f == 0 && (status >> 8) & 0xff == 0 {
        Ok(())
    } else if status & 0x7f != 0 {
        Err(format!(
            "the trial's child died of signal {}",
            status & 0x7f
        ))
    } else {
        Err(format!(
            "the trial's child exited with {}",
            (status >> 8) & 0xff
        ))
    }
}

/// A trial's metrics (see the module documentation).
fn sample(o: &Out) -> Sample {
    let calls = o.calls.max(1) as f64;
    let rss = o.hwm_kib.saturating_sub(o.rss_start_kib) as f64 / 1024.0;
    Sample::new()
        .with("ns", o.wall_ns as f64 / calls)
        .with("cyc", o.sum as f64 / calls)
        .with("cyc_cut", o.sum_cut as f64 / o.below_cut.max(1) as f64)
        .with("p999", o.p999)
        .with("rss", rss)
        .with("overhead", rss * 1048576.0 / o.peak_live.max(1) as f64)
        .with("faults", o.faults as f64 * 1000.0 / calls)
        .with("slow", o.slow as f64 * 1e9 / o.sum.max(1) as f64 + 1.0)
}

/// `spindle alloc replay`: one trace on `threads` threads (one copy each) of `who`, in a
/// child process; the metrics by name.
pub fn replay_cli(
    trace: &Trace,
    who: Who,
    threads: usize,
) -> Result<Vec<(&'static str, f64)>, String> {
    let o = in_child(
        who,
        Work::Trace(trace, usize::MAX),
        threads,
        false,
        Duration::from_secs(600),
        trial_seed(0),
    )?;
    let s = sample(&o);
    Ok([
        "ns", "cyc", "cyc_cut", "p999", "rss", "overhead", "faults", "slow",
    ]
    .into_iter()
    .map(|m| (m, s.value(m).unwrap_or(f64::NAN)))
    .chain([("calls", o.calls as f64)])
    .collect())
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

impl Experiment for Alloc {
    fn info(&self) -> Info {
        Info {
            name: "alloc",
            title: "Allocators: the LibQ benchmark's random workload, real programs' traces and remote frees",
            summary: "spindle-alloc vs glibc, mimalloc, jemalloc, snmalloc: wall ns and cycles per call (with and without the 50 000-cycle cut-off), p99.9, peak RSS, at 1, cores and 4 × cores threads",
            question: "Is a lock-free size-class allocator on per-CPU rseq caches as fast as today's best allocators, \
                       with as little memory, on the seed's workload and on real programs' allocation traces?",
            references: &[],
            quick_seconds: 20,
        }
    }

    fn run(&self, ctx: &mut Ctx) -> Result<(), String> {
        let cores = ctx.cores().max(1);
        let quick = !matches!(ctx.profile, Profile::Full);
        // Every trial forks the lab, whose page tables the kernel copies: late in a full run
        // the lab holds a few hundred MiB, much of it free heap that glibc keeps. Give that
        // back first (a few ms) so that forks stay cheap and the claims get their trials.
        extern "C" {
            fn malloc_trim(pad: usize) -> i32;
        }
        // SAFETY: glibc's malloc_trim has no preconditions.
        unsafe { malloc_trim(0) };
        let traces: Vec<(&str, Trace)> = TRACES
            .iter()
            .map(|&(name, _, bytes)| Trace::decode(bytes).map(|t| (name, t)))
            .collect::<Result<_, _>>()
            .map_err(|e| format!("a shipped trace does not parse: {e}"))?;
        // Quick: a trial's two passes at one thread are short beside forking and ending its
        // child (the commit that corrected this comment measured both), so that the claims
        // get their trials in a share of the lab's budget.
        let (per_thread, trace_calls) = if quick {
            (15_000, 60_000)
        } else {
            (400_000, usize::MAX)
        };
        let mut threads = vec![1, cores, 4 * cores];
        threads.dedup();
        let failure = std::sync::Mutex::new(None::<String>);
        let failure = &*Box::leak(Box::new(failure));
        let mut plan = Plan::new();
        plan.param("threads", format!("{threads:?}"));
        plan.param("random: allocations per thread", per_thread);
        plan.param("spindle-alloc cache", spindle_alloc_mode());
        if cfg!(target_arch = "aarch64") {
            plan.note(format!("On AArch64 the 'cycles' are ticks of the generic timer (CNTVCT_EL0, {:.3} GHz here), which user space can read; the core's cycle counter cannot be. The 50 000-tick cut-off and the p99.9 are in those ticks.", ctx.machine.tsc_ghz));
        }
        for (name, what, _) in TRACES {
            let t = &traces.iter().find(|t| t.0 == *name).expect("parsed").1;
            plan.param(
                format!("trace {name}"),
                format!("{what}: {} calls recorded", t.events.len()),
            );
        }
        let traces: &'static [(&str, Trace)] = Box::leak(traces.into_boxed_slice());
        let mut works: Vec<(&'static str, Work<'static>)> =
            vec![("random", Work::Random(per_thread))];
        works.extend(
            traces
                .iter()
                .map(|(n, t)| (*n, Work::Trace(t, trace_calls))),
        );
        let handoff_pairs = (cores / 2).max(1);
        let sections: Vec<(String, Work<'static>, usize)> = works
            .iter()
            .flat_map(|&(n, w)| threads.iter().map(move |&t| (format!("{n}-{t}"), w, t)))
            .chain([(
                format!("handoff-{}", 2 * handoff_pairs),
                Work::Handoff(per_thread),
                handoff_pairs,
            )])
            .collect();
        for (id, work, t) in &sections {
            let id = leak(id.clone());
            let what = match work {
                Work::Random(_) => format!(
                    "the LibQ random workload (1–512 B, 40 % purged every 256), {t} threads"
                ),
                Work::Trace(tr, n) => format!(
                    "trace {}, {} calls, one copy on each of {t} threads",
                    id.split('-').next().unwrap_or(""),
                    tr.events.len().min(*n)
                ),
                Work::Handoff(_) => {
                    format!("{t} producers allocate, {t} consumers free (remote frees)")
                }
            };
            plan.section(
                Section::new(id, what)
                    .baseline(format!("{id}-mimalloc"))
                    .metric(Metric::time("ns", "wall time per call, all threads, in an untimed second pass, from the moment all its threads have started (1 / throughput)"))
                    .metric(Metric::count("cyc", "cycles per call (LibQ's sum)"))
                    .metric(Metric::count("cyc_cut", "cycles per call below the 50 000-cycle cut-off"))
                    .metric(Metric::count("p999", "cycles per call, p99.9"))
                    .metric(Metric::count("rss", "peak RSS, MiB"))
                    .metric(Metric::ratio("overhead", "peak RSS / peak requested bytes"))
                    .metric(Metric::count("faults", "page faults per 1000 calls (the whole process)"))
                    .metric(Metric::count("slow", "calls above the cut-off without a system call, per 10^9 timed cycles, plus 1").hidden()),
            );
            let limit = Duration::from_secs(if quick { 60 } else { 300 });
            let threads_used = if matches!(work, Work::Handoff(_)) {
                2 * t
            } else {
                *t
            };
            let variants: Vec<(Who, bool)> = Who::ALL
                .iter()
                .map(|&w| (w, false))
                .chain((id == "random-1").then_some((Who::Spindle, true)))
                .collect();
            for (who, floor) in variants {
                let (work, t) = (*work, *t);
                let (vid, label) = if floor {
                    (
                        format!("{id}-timer"),
                        "timer floor: an empty timed section per call (spindle-alloc untimed)"
                            .to_string(),
                    )
                } else {
                    (format!("{id}-{}", who.id()), who.label().to_string())
                };
                // The k-th trial of every contestant draws the k-th sequence (the runner runs a
                // claim's sides in step).
                let mut trial = 0;
                plan.variant(
                    Variant::fixed(id, vid, label, move || {
                        trial += 1;
                        match in_child(who, work, t, floor, limit, trial_seed(trial)) {
                            Ok(o) => sample(&o),
                            Err(e) => {
                                let mut f = failure.lock().unwrap_or_else(|e| e.into_inner());
                                f.get_or_insert(format!("{}: {e}", who.id()));
                                Sample::new()
                            }
                        }
                    })
                    .threads(threads_used),
                );
            }
        }
        plan.finish(move |r| {
            if let Some(e) = failure.lock().unwrap_or_else(|e| e.into_inner()).clone() {
                let note = format!("a trial failed: {e}");
                if !r.notes.contains(&note) {
                    r.notes.push(note);
                }
            }
        });
        plan.finish(slow_calls_reach);
        claims(
            &mut plan,
            &sections.iter().map(|s| s.0.clone()).collect::<Vec<_>>(),
        );
        ctx.measure(plan)
    }
}

fn claims(plan: &mut Plan<'_>, sections: &[String]) {
    for s in sections {
        let g = |what: &str, text: String, metric: &'static str, bound: f64| {
            Claim::guarantee(leak(format!("alloc-{s}-{what}")), text)
                .ratio(format!("{s}-spindle"), format!("{s}-mimalloc"))
                .metric(metric)
                .at_most(bound)
        };
        plan.claim(g("throughput", format!("{s}: spindle-alloc's throughput is at least mimalloc's (untimed wall time per call at most 1 ×)"), "ns", 1.0));
        if s.starts_with("handoff") {
            continue;
        }
        plan.claim(g(
            "rss",
            format!("{s}: spindle-alloc's peak RSS is at most 1.1 × mimalloc's"),
            "rss",
            1.1,
        ));
        plan.claim(g(
            "p999",
            format!("{s}: spindle-alloc's p99.9 cycles per call are at most mimalloc's"),
            "p999",
            1.0,
        ));
    }
    plan.claim(
        Claim::guarantee(
            "alloc-no-slow-calls",
            "random-1: spindle-alloc's calls above the 50 000-cycle cut-off that made no system call are no more frequent per timed cycle than an empty timed section's (at most 1.5 ×): only OS calls are slow",
        )
        .ratio("random-1-spindle", "random-1-timer")
        .metric("slow")
        .at_most(1.5),
    );
}

/// Where `alloc-no-slow-calls` did not hold, every peer's calls, too, are slow more than
/// 1.5 × as often per timed cycle as the floor's empty timed section, and spindle-alloc's no
/// more often than the slowest peer's (ratios of `random-1`'s `slow` medians), the claim says
/// so with the figures: the slow calls are then not spindle-alloc's alone. On the 2-vCPU Intel
/// Xeon guest, whose full profile violated the claim, a probe of the same workload found them
/// to be stalls of tens to hundreds of microseconds with no page fault in them, landing in
/// spindle-alloc's and mimalloc's calls (the two probed) more often per timed cycle than in an
/// empty timed section, or in one that spins, or loads or stores a word of the block just
/// allocated; and far more often in one that stores a byte into a random page of a buffer
/// written beforehand, with no page fault either: touching a page, now and then, waits for
/// the host, and in each operation an allocator's call is the first to touch its metadata and
/// free blocks. The commits that added this note have the figures. The claim keeps its bound
/// and verdict.
fn slow_calls_reach(r: &mut ExperimentResult) {
    let ratio = |who: &str, floor: f64| {
        r.variant(&format!("random-1-{who}"))
            .and_then(|(_, v)| v.metric("slow"))
            .map(|m| m.summary.median / floor)
            .filter(|x| !x.is_nan())
    };
    // `slow` counts one more than the calls, so a floor without any slow call is 1 and the
    // ratios are then 1 + each peer's count: still more slow calls than the empty section's.
    let Some(floor) = ratio("timer", 1.0).filter(|&f| f >= 1.0) else {
        return;
    };
    let Some(spindle) = ratio(Who::Spindle.id(), floor) else {
        return;
    };
    // Every peer measured, each slow more than 1.5 × as often as the floor.
    let Some(peers) = Who::ALL
        .iter()
        .filter(|&&w| w != Who::Spindle)
        .map(|w| {
            ratio(w.id(), floor)
                .filter(|&x| x > 1.5)
                .map(|x| (w.id(), x))
        })
        .collect::<Option<Vec<(&str, f64)>>>()
    else {
        return;
    };
    if peers.is_empty() || peers.iter().all(|&(_, x)| spindle > x) {
        return;
    }
    let Some(c) = r
        .claims
        .iter_mut()
        .find(|c| c.id == "alloc-no-slow-calls" && c.verdict != Verdict::Holds)
    else {
        return;
    };
    let figures: Vec<String> = peers.iter().map(|(w, x)| format!("{w} {x:.2} ×")).collect();
    c.explanation.push_str(&format!(
        "; every peer's calls, too, are slow more than 1.5 × as often per timed cycle as the \
         empty timed section's (ratios of medians: spindle-alloc {spindle:.2} ×; {}): the slow \
         calls are not spindle-alloc's alone, possibly the machine's own stalls (in a virtual \
         machine, the host taking the CPU), which seem to land in allocator calls more often \
         than in an empty section",
        figures.join(", ")
    ));
}

/// The cache mode spindle-alloc decides, in a child (the lab itself never allocates with it,
/// so that every child starts it from nothing).
fn spindle_alloc_mode() -> String {
    match in_child(
        Who::Spindle,
        Work::Random(1),
        1,
        false,
        Duration::from_secs(30),
        trial_seed(0),
    ) {
        Ok(o) => String::from_utf8_lossy(&o.mode)
            .trim_end_matches('\0')
            .to_string(),
        Err(e) => format!("unknown ({e})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An `alloc` result with only what `slow_calls_reach` reads: `random-1`'s `slow` medians
    /// by contestant, and the claim with `verdict`. Built from JSON: a field that the result
    /// types gain shows up here when the test runs, not when it compiles.
    fn slow_result(slow: &[(&str, f64)], verdict: &str) -> ExperimentResult {
        use serde_json::json;
        let summary = |m: f64| {
            json!({"n": 1, "min": m, "p10": m, "median": m, "median_lo": null,
                   "median_hi": null, "p90": m, "max": m, "mean": m})
        };
        let variants: Vec<_> = slow
            .iter()
            .map(|&(who, m)| {
                json!({"id": format!("random-1-{who}"), "label": who, "threads": 1,
                       "capped": [], "reference_ratio": null, "series": null,
                       "metrics": [{"id": "slow", "values": [m], "summary": summary(m),
                                    "ratio_to_baseline": null, "pooled": null,
                                    "vs_baseline_run": null}]})
            })
            .collect();
        serde_json::from_value(json!({
            "name": "alloc", "title": "", "question": "", "references": [], "parameters": [],
            "budget_s": 0.0, "trials": 1, "stop_reason": "", "wall_s": 0.0, "tables": [],
            "notes": [], "complete": true,
            "sections": [{"id": "random-1", "title": "", "baseline": null, "metrics": [],
                          "variants": variants}],
            "claims": [{"id": "alloc-no-slow-calls", "kind": "guarantee", "statement": "",
                        "reference": null, "relation": "at_most", "bound": 1.5,
                        "numerator": {"variant": "random-1-spindle", "metric": "slow"},
                        "denominator": {"variant": "random-1-timer", "metric": "slow"},
                        "verdict": verdict, "explanation": "why", "trials": 1, "successes": 0,
                        "capped_trials": 0, "eps": 0.001, "ratio": summary(2.0),
                        "ratios": [2.0]}],
        }))
        .expect("a well-formed result")
    }

    #[test]
    fn slow_calls_note_only_where_every_peer_is_slow_too() {
        let explained = |slow: &[(&str, f64)], verdict: &str| {
            let mut r = slow_result(slow, verdict);
            slow_calls_reach(&mut r);
            r.claims[0].explanation.clone()
        };
        // Medians of the full profile on the 2-vCPU Intel Xeon guest at 972bb51 (the message
        // of the commit that added this test).
        let machine = [
            ("spindle", 151.75),
            ("glibc", 135.13),
            ("mimalloc", 190.04),
            ("jemalloc", 156.68),
            ("snmalloc", 679.62),
            ("timer", 71.41),
        ];
        let note = explained(&machine, "violated");
        assert!(note.starts_with("why; every peer's calls, too,"), "{note}");
        for figure in [
            "spindle-alloc 2.13 ×;",
            "glibc 1.89 ×",
            "mimalloc 2.66 ×",
            "jemalloc 2.19 ×",
            "snmalloc 9.52 ×",
        ] {
            assert!(note.contains(figure), "{figure} in {note}");
        }
        // A claim that held gets no note; an undecided one does.
        assert_eq!(explained(&machine, "holds"), "why");
        assert!(explained(&machine, "undecided").starts_with("why; every peer's"));
        let with =
            |who: &str, slow: f64| machine.map(|(w, m)| (w, if w == who { slow } else { m }));
        // One peer quiet, or at the bound: the machine is not shown to be the cause.
        assert_eq!(explained(&with("glibc", 1.2 * 71.41), "violated"), "why");
        assert_eq!(explained(&with("glibc", 1.5 * 71.41), "violated"), "why");
        // A peer not measured (NaN median) or missing, no peers, or no floor.
        assert_eq!(explained(&with("jemalloc", f64::NAN), "violated"), "why");
        let without = |who: &str| -> Vec<(&str, f64)> {
            machine.iter().copied().filter(|&(w, _)| w != who).collect()
        };
        assert_eq!(explained(&without("snmalloc"), "violated"), "why");
        assert_eq!(explained(&without("timer"), "violated"), "why");
        assert_eq!(
            explained(&[("spindle", 151.75), ("timer", 71.41)], "violated"),
            "why"
        );
        // spindle-alloc slower than every peer: the note would excuse it, so there is none.
        assert_eq!(explained(&with("spindle", 50.0 * 71.41), "violated"), "why");
        // No slow call in the floor (1: the count plus one) but some in every call.
        let quiet_floor = with("timer", 1.0);
        assert!(explained(&quiet_floor, "violated").contains("glibc 135.13 ×"));
    }

    #[test]
    fn buckets_are_ordered_and_cover_their_values() {
        let mut last = 0;
        for v in [0u64, 1, 63, 64, 65, 100, 1000, 50_000, 1 << 40, u64::MAX] {
            let b = bucket(v);
            assert!(b >= last && b < BUCKETS, "{v}");
            assert!(bucket_low(b) <= v, "{v}");
            last = b;
        }
    }

    #[test]
    fn every_contestant_runs_every_workload_and_a_child_reports_back() {
        let traces: Vec<Trace> = TRACES.iter().map(|t| Trace::decode(t.2).unwrap()).collect();
        assert!(traces.iter().all(|t| t.events.len() > 100_000));
        for who in Who::ALL {
            for work in [
                Work::Random(3000),
                Work::Trace(&traces[0], 5000),
                Work::Handoff(2000),
            ] {
                let o = run_work(who, work, 2, false, trial_seed(0));
                assert!(o.calls >= 4000, "{} {}", who.id(), o.calls);
                assert!(o.sum >= o.sum_cut && o.p999 > 0.0, "{}", who.id());
            }
            assert_eq!(Who::parse(who.id()), Some(who));
        }
        let o = in_child(
            Who::Spindle,
            Work::Random(2000),
            1,
            true,
            Duration::from_secs(60),
            trial_seed(0),
        )
        .unwrap();
        let s = sample(&o);
        assert!(s.value("ns").unwrap() > 0.0 && s.value("rss").unwrap() >= 0.0);
    }

    #[test]
    fn a_child_past_its_limit_is_killed_and_reported() {
        extern "C" {
            fn pause() -> i32;
        }
        // Both ways of waiting: a pidfd's poll, and naps.
        for pidfd in [true, false] {
            // SAFETY: the child only calls `pause` (async-signal-safe) until it is killed.
            let pid = unsafe { fork() };
            if pid == 0 {
                loop {
                    // SAFETY: no preconditions.
                    unsafe { pause() };
                }
            }
            assert!(pid > 0, "fork: {}", std::io::Error::last_os_error());
            let e = wait_child(pid, Duration::from_millis(200), pidfd)
                .expect_err("the child never ends by itself");
            assert!(e.contains("more than 0.2 s and was killed"), "{pidfd}: {e}");
        }
    }
}
