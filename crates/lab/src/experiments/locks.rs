//! `locks`: spinlocks vs futex mutexes under oversubscription (Malte Skarupke, "Measuring
//! Mutexes, Spinlocks and how Bad the Linux Scheduler Really is", 2020: 16 threads × 16384
//! `lock; unlock` on a Ryzen 7 1700).
//!
//! T threads (unpinned: the kernel's placement is what is measured) each loop over
//! `lock; unlock` on one shared lock. Per run: its duration (start barrier to the last
//! thread's end), the longest wait (TSC from calling `lock` to holding it), the longest
//! idle time (from the timestamp taken just before an unlock, stored under the lock, to the
//! next acquisition by any thread; the first acquisition is skipped), and the means of the four
//! longest waits and of the four longest idle times (the post's "four longest"; the Spindle
//! Mutex's wait and idle guarantees are on these, which a single rare stall moves less than the
//! longest). The Mutex's run guarantees compare it with each sleeping lock a user would
//! otherwise take: std's, parking_lot's and the 3-state futex mutex. T = cores and
//! T = 4 × cores. Iterations per thread are calibrated so that a std Mutex run lasts the
//! profile's target (on the first visit; later visits measure the same runs); a run stops at a
//! cap of 8 × that target and is then marked capped.
//!
//! Two more sections measure condition variables (std's, parking_lot's and Spindle's, each
//! with its own mutex): `notify_one` with nobody waiting (one thread), and two threads passing
//! a turn back and forth with `wait_while` and `notify_one`, where every pass is a futex
//! wake-up or a waiter found not yet asleep.
//!
//! The locks are one table in `run` (id, label, a run over that lock), every lock in both
//! sections; [`REFERENCE`] holds the post's figures under the same ids.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::time::Duration;

use parking_lot::lock_api::{Mutex, RawMutex};
use spindle_sync::lock::{Condvar, FutexMutex, SpinLock, SpindleLock, TicketLock};

use super::spinlocks::{TasLock, TtasLock};
use crate::kit::{calibrate, run_together, time, CachePadded, Span};
use crate::references::MUTEXES;
use crate::results::{ExperimentResult, Table};
use crate::runner::{Ctx, Experiment};
use crate::spec::{Claim, Info, Metric, Plan, Sample, Section, Variant};
use crate::sys::rdtsc;

pub struct Locks;

/// A mutex and condition variable pair as the condition-variable sections use it.
trait CondPair: Sync {
    /// Set the turn back to 0.
    fn reset(&self);
    /// Pass the turn: wait until `*turn % 2 == side`, then increment it and notify one.
    fn pass(&self, side: u64);
    /// Notify one waiter (there is none).
    fn notify(&self);
}

impl CondPair for (std::sync::Mutex<u64>, std::sync::Condvar) {
    fn reset(&self) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = 0;
    }
    fn pass(&self, side: u64) {
        let mut g = self
            .1
            .wait_while(self.0.lock().unwrap_or_else(|e| e.into_inner()), |t| {
                *t % 2 != side
            })
            .unwrap_or_else(|e| e.into_inner());
        *g += 1;
        drop(g);
        self.1.notify_one();
    }
    fn notify(&self) {
        self.1.notify_one();
    }
}

/// parking_lot's and Spindle's pairs: a `lock_api` mutex and a condition variable with
/// parking_lot's API.
macro_rules! lock_api_cond_pair {
    ($mutex:ty, $condvar:ty) => {
        impl CondPair for ($mutex, $condvar) {
            fn reset(&self) {
                *self.0.lock() = 0;
            }
            fn pass(&self, side: u64) {
                let mut g = self.0.lock();
                self.1.wait_while(&mut g, |t| *t % 2 != side);
                *g += 1;
                drop(g);
                self.1.notify_one();
            }
            fn notify(&self) {
                self.1.notify_one();
            }
        }
    };
}
lock_api_cond_pair!(parking_lot::Mutex<u64>, parking_lot::Condvar);
lock_api_cond_pair!(spindle_sync::lock::Mutex<u64>, Condvar);

/// One pair of each kind, each on lines of its own.
struct CondPairs {
    std: CachePadded<(std::sync::Mutex<u64>, std::sync::Condvar)>,
    pl: CachePadded<(parking_lot::Mutex<u64>, parking_lot::Condvar)>,
    spindle: CachePadded<(spindle_sync::lock::Mutex<u64>, Condvar)>,
}

impl CondPairs {
    fn new() -> CondPairs {
        CondPairs {
            std: CachePadded((std::sync::Mutex::new(0), std::sync::Condvar::new())),
            pl: CachePadded((parking_lot::Mutex::new(0), parking_lot::Condvar::new())),
            spindle: CachePadded((spindle_sync::lock::Mutex::new(0), Condvar::new())),
        }
    }
}

/// `n` notifies with nobody waiting, one thread.
#[inline(never)]
fn notifies(pair: &impl CondPair, n: u64) -> Span {
    time(|| (0..n).for_each(|_| pair.notify()))
}

/// Two threads pass a turn back and forth `n` times in all (each waits for its turn, takes it
/// and notifies the other): every pass wakes a thread asleep on the condition variable, or
/// finds it not yet asleep.
fn hand_offs(pair: &impl CondPair, n: u64) -> Span {
    pair.reset();
    let half = n.div_ceil(2);
    run_together(2, None, |side| {
        for _ in 0..half {
            pair.pass(side as u64);
        }
    })
}

/// One condition variable's variants, `notify-<id>` and `handoff-<id>`.
fn condvar_variants<'a>(plan: &mut Plan<'a>, id: &str, name: &str, pair: &'a impl CondPair) {
    plan.variant(Variant::per_op(
        "notify",
        format!("notify-{id}"),
        format!("{name} Condvar"),
        move |n| notifies(pair, n),
    ));
    plan.variant(
        Variant::per_op(
            "handoff",
            format!("handoff-{id}"),
            format!("{name} Mutex + Condvar"),
            move |n| hand_offs(pair, n),
        )
        .threads(2),
    );
}

/// The condition-variable sections: std's, parking_lot's and Spindle's, each with its own
/// mutex.
fn condvar_sections<'a>(plan: &mut Plan<'a>, pairs: &'a CondPairs) {
    plan.section(
        Section::per_op(
            "notify",
            "Condition variable: notify_one with nobody waiting, one thread",
            "notify",
        )
        .baseline("notify-std"),
    );
    plan.section(
        Section::per_op(
            "handoff",
            "Condition variable: two threads pass a turn back and forth (wait_while, notify_one)",
            "pass",
        )
        .baseline("handoff-std"),
    );
    condvar_variants(plan, "std", "std", &*pairs.std);
    condvar_variants(plan, "pl", "parking_lot", &*pairs.pl);
    condvar_variants(plan, "spindle", "Spindle", &*pairs.spindle);
}

/// One run of a lock with T threads and n iterations each.
type RunOf<'a> = &'a dyn Fn(usize, u64) -> Sample;

/// What a thread finds under the lock: the TSC just before the last unlock.
#[derive(Default)]
struct Slot {
    last_unlock: u64,
    seen_unlock: bool,
}

/// One lock of any kind, as the benchmark loop uses it.
trait BenchLock: Sync {
    fn with(&self, f: impl FnOnce(&mut Slot));
}

impl<R: RawMutex + Sync + Send> BenchLock for Mutex<R, Slot> {
    #[inline]
    fn with(&self, f: impl FnOnce(&mut Slot)) {
        f(&mut self.lock())
    }
}

impl BenchLock for std::sync::Mutex<Slot> {
    #[inline]
    fn with(&self, f: impl FnOnce(&mut Slot)) {
        // A poisoned lock only means another benchmark thread panicked; keep measuring.
        f(&mut self.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// One run: `threads` × `iterations` of {lock; unlock}, stopping early past `cap_ticks`.
/// Returns its duration, longest wait, longest idle time and the mean of its four longest idle
/// times (ns), and whether it was capped.
fn one_run(
    lock: &impl BenchLock,
    threads: usize,
    iterations: u64,
    cap_ticks: u64,
    ticks_per_ns: f64,
) -> Sample {
    lock.with(|s| *s = Slot::default());
    let (longest_wait, longest_idle) = (AtomicU64::new(0), AtomicU64::new(0));
    let idle_tops = std::sync::Mutex::new(Vec::with_capacity(4 * threads));
    let wait_tops = std::sync::Mutex::new(Vec::with_capacity(4 * threads));
    let capped = AtomicBool::new(false);
    let stop_at = rdtsc().saturating_add(cap_ticks);
    let span = run_together(threads, None, |_| {
        // This thread's four longest waits and idle times, longest first.
        let mut waits = [0u64; 4];
        let mut top = [0u64; 4];
        for i in 0..iterations {
            if i.is_multiple_of(64) && rdtsc() > stop_at {
                capped.store(true, Relaxed);
                break;
            }
            let before = rdtsc();
            lock.with(|s| {
                let now = rdtsc();
                push_top(&mut waits, now.saturating_sub(before));
                if s.seen_unlock {
                    push_top(&mut top, now.saturating_sub(s.last_unlock));
                }
                s.seen_unlock = true;
                s.last_unlock = rdtsc();
            });
        }
        longest_wait.fetch_max(waits[0], Relaxed);
        longest_idle.fetch_max(top[0], Relaxed);
        for (all, mine) in [(&idle_tops, &top), (&wait_tops, &waits)] {
            all.lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend_from_slice(mine);
        }
    });
    let four = |tops: std::sync::Mutex<Vec<u64>>| {
        let mut tops = tops.into_inner().unwrap_or_else(|e| e.into_inner());
        tops.sort_unstable_by(|a, b| b.cmp(a));
        tops.iter().take(4).sum::<u64>() as f64 / 4.0 / ticks_per_ns
    };
    Sample::new()
        .with("run", span.ns)
        .with("wait", longest_wait.into_inner() as f64 / ticks_per_ns)
        .with("wait4", four(wait_tops))
        .with("idle", longest_idle.into_inner() as f64 / ticks_per_ns)
        .with("idle4", four(idle_tops))
        .capped(capped.into_inner())
}

/// Keeps `top` the four largest values seen, largest first.
#[inline]
fn push_top(top: &mut [u64; 4], x: u64) {
    if x > top[3] {
        top[3] = x;
        top.sort_unstable_by(|a, b| b.cmp(a));
    }
}

type Four = [f64; 4];

/// The post's Linux CFS table (16 threads, Ryzen 7 1700): average run and four longest waits
/// from its latency runs, four longest idle times from its idle runs (ms).
const REFERENCE: &[(&str, &str, f64, Four, Four)] = &[
    (
        "std::mutex",
        "std",
        62.0,
        [2.9, 2.8, 1.5, 1.4],
        [0.8, 0.28, 0.26, 0.25],
    ),
    (
        "terrible_spinlock",
        "tas",
        825.0,
        [103.5, 90.6, 77.1, 75.7],
        [134.8, 124.6, 119.7, 96.5],
    ),
    (
        "spinlock_amd",
        "ttas",
        68.0,
        [62.3, 61.5, 60.9, 59.8],
        [7.0, 6.9, 0.54, 0.45],
    ),
    (
        "spinlock",
        "spin",
        69.0,
        [11.4, 10.8, 10.4, 9.9],
        [1.4, 1.2, 0.33, 0.32],
    ),
    (
        "ticket_spinlock",
        "ticket",
        93.0,
        [1.5, 1.5, 1.49, 1.48],
        [13.0, 3.3, 2.6, 2.4],
    ),
];

/// A thread count of the experiment: (section id, threads, iterations per thread).
type Level = (&'static str, usize, u64);

/// T = cores and T = 4 × cores, with iterations per thread calibrated on std's Mutex so that a
/// run lasts `target`; calibrated on the first visit only, so that every visit measures the
/// same runs.
fn levels(ctx: &mut Ctx, target: Duration, ticks_per_ns: f64) -> Vec<Level> {
    let cores = ctx.cores();
    let probe = std::sync::Mutex::new(Slot::default());
    [
        ("t1", "iterations-t1", cores),
        ("t4", "iterations-t4", 4 * cores),
    ]
    .into_iter()
    .map(|(id, key, t)| {
        let n = ctx.once(key, |ctx| {
            ctx.status(&format!("calibrating iterations for {t} threads"));
            calibrate(target, 64, 1 << 24, |n| {
                Duration::from_nanos(
                    one_run(&probe, t, n, u64::MAX, ticks_per_ns)
                        .value("run")
                        .unwrap_or(0.0) as u64,
                )
            })
        });
        (id, t, n)
    })
    .collect()
}

/// One section per thread count, every lock in each; `target`: the calibrated run length.
fn sections<'a>(
    plan: &mut Plan<'a>,
    levels: &[Level],
    locks: &[(&'static str, &'static str, RunOf<'a>)],
    target: Duration,
) {
    for &(level, threads, iterations) in levels {
        let what = if level == "t1" {
            "= cores"
        } else {
            "= 4 × cores"
        };
        plan.param(
            format!("iterations per thread, T = {threads}"),
            format!(
                "{iterations} (std Mutex run ≈ {} ms; the post: 16384)",
                target.as_millis()
            ),
        );
        plan.section(
            Section::new(level, format!("T = {threads} threads ({what}), unpinned"))
                .baseline(format!("std-{level}"))
                .metric(Metric::time("run", "run duration"))
                .metric(Metric::time("wait", "longest wait").show_max())
                .metric(Metric::time("wait4", "four longest waits, mean"))
                .metric(Metric::time("idle", "longest idle").show_max())
                .metric(Metric::time("idle4", "four longest idle, mean")),
        );
        for &(id, label, run) in locks {
            let reference = REFERENCE
                .iter()
                .find(|r| r.1 == id && level == "t1")
                .map(|r| r.2 / REFERENCE[0].2);
            plan.variant(
                Variant::fixed(level, format!("{id}-{level}"), label, move || {
                    run(threads, iterations)
                })
                .threads(threads)
                .reference(reference),
            );
        }
    }
}

/// Spindle's Mutex against the sleeping locks a user would otherwise take, at both thread
/// counts; the post's two clearest findings at T = cores.
fn claims(plan: &mut Plan<'_>) {
    // (claim id, level, peer id, peer's name): run duration at most the peer's.
    const RUNS: [(&str, &str, &str, &str); 6] = [
        ("spindle-run-std-t1", "t1", "std", "std's Mutex"),
        ("spindle-run-pl-t1", "t1", "pl", "parking_lot's Mutex"),
        (
            "spindle-run-futex-t1",
            "t1",
            "futex",
            "the 3-state futex mutex",
        ),
        ("spindle-run-std-t4", "t4", "std", "std's Mutex"),
        ("spindle-run-pl-t4", "t4", "pl", "parking_lot's Mutex"),
        (
            "spindle-run-futex-t4",
            "t4",
            "futex",
            "the 3-state futex mutex",
        ),
    ];
    // (claim id, level, metric, what): the four longest at most std's.
    const TAILS: [(&str, &str, &str, &str); 4] = [
        ("spindle-wait4-t1", "t1", "wait4", "waits"),
        ("spindle-idle4-t1", "t1", "idle4", "idle times"),
        ("spindle-wait4-t4", "t4", "wait4", "waits"),
        ("spindle-idle4-t4", "t4", "idle4", "idle times"),
    ];
    let what = |level: &str| if level == "t1" { "cores" } else { "4 × cores" };
    for (id, level, peer, name) in RUNS {
        plan.claim(
            Claim::guarantee(
                id,
                format!("At T = {}, a Spindle Mutex run takes at most 1.0 × as long as a run with {name}", what(level)),
            )
            .ratio(format!("spindle-{level}"), format!("{peer}-{level}"))
            .metric("run")
            .at_most(1.0),
        );
    }
    for (id, level, metric, name) in TAILS {
        plan.claim(
            Claim::guarantee(
                id,
                format!("At T = {}, a Spindle Mutex run's four longest {name} (their mean) are at most 1.0 × a std Mutex run's", what(level)),
            )
            .ratio(format!("spindle-{level}"), format!("std-{level}"))
            .metric(metric)
            .at_most(1.0),
        );
    }
    plan.claim(Claim::reproduction("tas-terrible", "At T = cores, a run with the terrible spinlock takes at least 2 × as long as with std's mutex", MUTEXES, "13.3 × (825 ms vs 62 ms)")
        .ratio("tas-t1", "std-t1").metric("run").at_least(2.0));
    plan.claim(
        Claim::reproduction(
            "ticket-slow",
            "At T = cores, a ticket-spinlock run takes at least 1.2 × as long as with std's mutex",
            MUTEXES,
            "1.5 × (93 ms vs 62 ms)",
        )
        .ratio("ticket-t1", "std-t1")
        .metric("run")
        .at_least(1.2),
    );
    plan.claim(
        Claim::guarantee(
            "condvar-notify",
            "Spindle's Condvar::notify_one with nobody waiting costs at most 1.1 × parking_lot's (a load and a branch: no system call)",
        )
        .ratio("notify-spindle", "notify-pl")
        .at_most(1.1),
    );
    for (id, peer, name) in [
        ("condvar-handoff-pl", "pl", "parking_lot's"),
        ("condvar-handoff-std", "std", "std's"),
    ] {
        plan.claim(
            Claim::guarantee(
                id,
                format!("Passing a turn between two threads through Spindle's Mutex + Condvar takes at most 1.1 × as long as through {name} (the kernel's futex wake-up dominates every pass)"),
            )
            .ratio("handoff-spindle", format!("handoff-{peer}"))
            .at_most(1.1),
        );
    }
    plan.note("“SpinLock” is the post's improved spinlock (TTAS, 16 pauses, then sched_yield). Waits and idle times: the claims compare the mean of the four longest of one Spindle run with that of one std run of the same trial (the post's “four longest”; one rare stall of the VM moves it less than the longest alone).");
    plan.note("The post ran latency and idle measurements in separate runs (100 and 1000 of them); here each run measures both, and “largest” is the largest per-run value over this run's trials.");
}

/// The post's own table, for comparison.
fn post_table(r: &mut ExperimentResult) {
    r.tables.push(Table {
        title: "The post's table (Linux CFS, 16 threads on a Ryzen 7 1700): average run, four longest waits, four longest idle times".into(),
        columns: vec!["lock (ours)".into(), "average run".into(), "four longest waits".into(), "four longest idle times".into()],
        rows: REFERENCE
            .iter()
            .map(|(name, ours, run, waits, idles)| {
                let list = |v: &[f64; 4]| v.iter().map(|x| format!("{x} ms")).collect::<Vec<_>>().join(", ");
                vec![format!("{name} ({ours})"), format!("{run} ms"), list(waits), list(idles)]
            })
            .collect(),
    })
}

impl Experiment for Locks {
    fn info(&self) -> Info {
        Info {
            name: "locks",
            title: "Spinlocks vs mutexes under oversubscription",
            summary: "T threads hammer one lock: run duration, longest wait, longest idle time; spinlocks, futex mutexes, std, parking_lot",
            question: "When T threads hammer one lock, how long does a run take, how long can one thread wait, and how long \
                       can the lock sit free while a thread wants it — spinlocks, futex mutexes, std, parking_lot and \
                       Spindle's Mutex, at T = cores and T = 4 × cores?",
            references: &[MUTEXES],
            quick_seconds: 36,
        }
    }

    fn run(&self, ctx: &mut Ctx) -> Result<(), String> {
        // Parameters: T, and iterations calibrated on std's Mutex at each T.
        let ticks_per_ns = ctx.machine.tsc_ghz;
        let target = ctx.run_target(16) / 2;
        let cap = target * 8;
        let cap_ticks = (cap.as_nanos() as f64 * ticks_per_ns) as u64;
        let levels = levels(ctx, target, ticks_per_ns);

        // State: one lock of each kind, each on its own lines.
        let tas = CachePadded(Mutex::<TasLock, Slot>::new(Slot::default()));
        let ttas = CachePadded(Mutex::<TtasLock, Slot>::new(Slot::default()));
        let spin = CachePadded(Mutex::<SpinLock, Slot>::new(Slot::default()));
        let ticket = CachePadded(Mutex::<TicketLock, Slot>::new(Slot::default()));
        let futex = CachePadded(Mutex::<FutexMutex, Slot>::new(Slot::default()));
        let spindle = CachePadded(Mutex::<SpindleLock, Slot>::new(Slot::default()));
        let std_lock = CachePadded(std::sync::Mutex::new(Slot::default()));
        let pl = CachePadded(parking_lot::Mutex::new(Slot::default()));
        let locks: [(&str, &str, RunOf); 8] = [
            ("tas", "TasLock (swap loop, no pause)", &|t, n| {
                one_run(&*tas, t, n, cap_ticks, ticks_per_ns)
            }),
            (
                "ttas",
                "TtasLock (test-and-test-and-set + pause)",
                &|t, n| one_run(&*ttas, t, n, cap_ticks, ticks_per_ns),
            ),
            ("spin", "SpinLock (TTAS, pause ×16 then yield)", &|t, n| {
                one_run(&*spin, t, n, cap_ticks, ticks_per_ns)
            }),
            (
                "ticket",
                "TicketLock (FIFO, pause ×16 then yield)",
                &|t, n| one_run(&*ticket, t, n, cap_ticks, ticks_per_ns),
            ),
            ("futex", "FutexMutex (3-state futex mutex)", &|t, n| {
                one_run(&*futex, t, n, cap_ticks, ticks_per_ns)
            }),
            ("spindle", "Spindle Mutex", &|t, n| {
                one_run(&*spindle, t, n, cap_ticks, ticks_per_ns)
            }),
            ("std", "std::sync::Mutex", &|t, n| {
                one_run(&*std_lock, t, n, cap_ticks, ticks_per_ns)
            }),
            ("pl", "parking_lot::Mutex", &|t, n| {
                one_run(&*pl, t, n, cap_ticks, ticks_per_ns)
            }),
        ];

        let pairs = CondPairs::new();

        // Sections and variants: every lock at both thread counts.
        let mut plan = Plan::new();
        sections(&mut plan, &levels, &locks, target);
        condvar_sections(&mut plan, &pairs);
        plan.param(
            "per-run time cap",
            format!(
                "{} ms (8 × the target run); a capped run's figures are lower bounds",
                cap.as_millis()
            ),
        );
        claims(&mut plan);
        if ctx.machine.virtualised {
            plan.note("On a virtual machine the hypervisor can deschedule a vCPU at any moment, which shows up as long waits and idle times for every lock alike.");
        }
        plan.finish(post_table);
        ctx.measure(plan)
    }
}
