//! `locks`: spinlocks vs futex mutexes under oversubscription (seed 003, "Measuring Latency"
//! and "Measuring Idle Time").
//!
//! The seed runs 16 threads on a Ryzen 7 1700 (16 hardware threads), each looping 16384 times
//! over `lock; unlock` on one shared lock, repeats the run 100 times (1000 for idle times), and
//! reports per lock the average run duration, the four longest waits (time from calling `lock`
//! to holding it; per run the longest, then the four largest runs) and the four longest idle
//! times (time from one thread's unlock — a timestamp taken just before unlocking, stored under
//! the lock — to the next acquisition; the very first acquisition is skipped). We measure all
//! three in the same loop, with the TSC, for Spindle's locks, std's and parking_lot's mutexes.
//!
//! Variants: TasLock, TtasLock, SpinLock, TicketLock, FutexMutex, Spindle Mutex,
//! `std::sync::Mutex`, `parking_lot::Mutex`. Parameters: T = cores and T = 4 × cores threads
//! (unpinned: the kernel places them, as in the seed); 16384 iterations per thread; a per-run
//! time cap. Trial: one run of each lock, in random order. Claims (T = 4 × cores): Spindle
//! Mutex's run duration ≤ 1.0 × SpinLock's (the seed's improved spinlock, the best spinlock
//! here), and its longest idle time ≤ 1.0 × std Mutex's.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::time::Duration;

use spindle_sync::lock::{FutexMutex, SpinLock, SpindleLock, TasLock, TicketLock, TtasLock};

use super::{Experiment, ExperimentInfo};
use crate::harness::{
    run_together, run_trials, Budget, Claim, Ctx, Measurement, Profile, Relation, Summary, Trials,
    Variant,
};
use crate::report::{Bar, ExperimentResult, Figure, Param, Reference, VariantResult};
use crate::sys::rdtsc;

pub struct Locks;

/// The seed's iterations per thread per run.
const SEED_ITERATIONS: u64 = 16384;
/// Our multiple of it (quick and full profiles). On the 2-vCPU Zen 5 guest this was built on,
/// a run of 16384 iterations × 8 threads lasted about 4 ms for every sane lock — one scheduler
/// tick, spent mostly releasing the threads — so it measured thread start-up, not the lock. At
/// 16 × 16384 a run lasts about 60 ms, as the seed's runs did on its machine.
const SCALE: u64 = 16;

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

impl<R: parking_lot::lock_api::RawMutex + Sync> BenchLock
    for parking_lot::lock_api::Mutex<R, Slot>
{
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

/// One lock per 128 bytes, so the locks never share a cache line with each other.
#[repr(align(128))]
struct Padded<T>(T);

/// The figures of one run, in milliseconds.
#[derive(Clone, Copy, Debug)]
struct Run {
    duration_ms: f64,
    longest_wait_ms: f64,
    longest_idle_ms: f64,
    /// The run hit the time cap before every thread finished its iterations.
    capped: bool,
}

/// The seed's loop on `threads` threads: `iterations` × {lock; unlock} each, stopping early if
/// the TSC passes `cap_ticks` after the start.
fn one_run<L: BenchLock>(
    lock: &L,
    threads: usize,
    iterations: u64,
    cap_ticks: u64,
    ticks_per_ms: f64,
) -> Run {
    lock.with(|s| *s = Slot::default());
    let longest_wait = AtomicU64::new(0);
    let longest_idle = AtomicU64::new(0);
    let capped = AtomicBool::new(false);
    let stop_at = rdtsc().saturating_add(cap_ticks);
    let timing = run_together(threads, None, |_| {
        let (mut wait, mut idle) = (0u64, 0u64);
        for i in 0..iterations {
            if i.is_multiple_of(64) && rdtsc() > stop_at {
                capped.store(true, Relaxed);
                break;
            }
            let before = rdtsc();
            lock.with(|s| {
                let now = rdtsc();
                wait = wait.max(now.saturating_sub(before));
                if s.seen_unlock {
                    idle = idle.max(now.saturating_sub(s.last_unlock));
                }
                s.seen_unlock = true;
                s.last_unlock = rdtsc();
            });
        }
        longest_wait.fetch_max(wait, Relaxed);
        longest_idle.fetch_max(idle, Relaxed);
    });
    Run {
        duration_ms: timing.elapsed.as_secs_f64() * 1e3,
        longest_wait_ms: longest_wait.into_inner() as f64 / ticks_per_ms,
        longest_idle_ms: longest_idle.into_inner() as f64 / ticks_per_ms,
        capped: capped.into_inner(),
    }
}

/// A lock under test, its runs, and (for the idle claim) a second variant that reports the
/// longest idle time of the *same* run: whichever of the pair runs first in a trial performs
/// the run and leaves it in `pending`; the other takes it. Each trial runs every variant once,
/// so the pair always meets within the trial.
struct Contestant<'a> {
    id: &'static str,
    label: &'static str,
    run: Box<dyn Fn() -> Run + 'a>,
    runs: RefCell<Vec<Run>>,
    paired: bool,
    pending: Cell<Option<Run>>,
}

impl Contestant<'_> {
    fn next(&self) -> Run {
        if self.paired {
            if let Some(r) = self.pending.take() {
                return r;
            }
        }
        let r = (self.run)();
        self.runs.borrow_mut().push(r);
        if self.paired {
            self.pending.set(Some(r));
        }
        r
    }
}

/// The seed's tables for Linux CFS (16 threads, Ryzen 7 1700): average run duration and four
/// longest waits from the latency runs, then the same from the idle-time runs.
struct SeedRow {
    name: &'static str,
    ours: &'static str,
    wait_run_ms: f64,
    waits_ms: [f64; 4],
    idle_run_ms: f64,
    idles_ms: [f64; 4],
}

const SEED_CFS: &[SeedRow] = &[
    SeedRow {
        name: "std::mutex",
        ours: "std",
        wait_run_ms: 62.0,
        waits_ms: [2.9, 2.8, 1.5, 1.4],
        idle_run_ms: 86.0,
        idles_ms: [0.8, 0.28, 0.26, 0.25],
    },
    SeedRow {
        name: "terrible_spinlock",
        ours: "tas",
        wait_run_ms: 825.0,
        waits_ms: [103.5, 90.6, 77.1, 75.7],
        idle_run_ms: 852.0,
        idles_ms: [134.8, 124.6, 119.7, 96.5],
    },
    SeedRow {
        name: "spinlock_amd",
        ours: "ttas",
        wait_run_ms: 68.0,
        waits_ms: [62.3, 61.5, 60.9, 59.8],
        idle_run_ms: 65.0,
        idles_ms: [7.0, 6.9, 0.54, 0.45],
    },
    SeedRow {
        name: "spinlock",
        ours: "spin",
        wait_run_ms: 69.0,
        waits_ms: [11.4, 10.8, 10.4, 9.9],
        idle_run_ms: 66.0,
        idles_ms: [1.4, 1.2, 0.33, 0.32],
    },
    SeedRow {
        name: "ticket_spinlock",
        ours: "ticket",
        wait_run_ms: 93.0,
        waits_ms: [1.5, 1.5, 1.49, 1.48],
        idle_run_ms: 95.0,
        idles_ms: [13.0, 3.3, 2.6, 2.4],
    },
];

/// The four largest values, largest first.
fn four_largest(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(|a, b| b.total_cmp(a));
    v.truncate(4);
    v
}

fn ms_list(v: &[f64]) -> String {
    v.iter()
        .map(|x| duration(*x))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A duration given in milliseconds, with three significant figures, in ms or µs.
fn duration(ms: f64) -> String {
    let sig3 = |x: f64| {
        if x >= 100.0 {
            format!("{x:.0}")
        } else if x >= 10.0 {
            format!("{x:.1}")
        } else {
            format!("{x:.2}")
        }
    };
    if ms >= 1.0 {
        format!("{} ms", sig3(ms))
    } else {
        format!("{} µs", sig3(ms * 1e3))
    }
}

/// Ids of a lock at the two thread counts, and the idle views used by the claim.
const IDS: &[(&str, &str, &str)] = &[
    ("tas", "tas-1x", "tas-4x"),
    ("ttas", "ttas-1x", "ttas-4x"),
    ("spin", "spin-1x", "spin-4x"),
    ("ticket", "ticket-1x", "ticket-4x"),
    ("futex", "futex-1x", "futex-4x"),
    ("spindle", "spindle-1x", "spindle-4x"),
    ("std", "std-1x", "std-4x"),
    ("pl", "pl-1x", "pl-4x"),
];

fn id_at(base: &str, level: usize) -> &'static str {
    let row = IDS.iter().find(|r| r.0 == base).expect("known lock");
    if level == 0 {
        row.1
    } else {
        row.2
    }
}

fn claims() -> Vec<Claim> {
    vec![
        Claim::ratio(
            "spindle-throughput",
            "At T = 4 × cores, a Spindle Mutex run takes at most 1.0 × as long as a SpinLock run (the seed's improved spinlock)",
            "spindle-4x",
            "spin-4x",
            Relation::AtMost(1.0),
        ),
        Claim::ratio(
            "spindle-idle",
            "At T = 4 × cores, a Spindle Mutex run's longest idle time is at most 1.0 × a std Mutex run's",
            "spindle-4x-idle",
            "std-4x-idle",
            Relation::AtMost(1.0),
        ),
    ]
}

struct Level {
    threads: usize,
    /// Per lock (in `IDS` order): its runs at this level, warm-up excluded.
    runs: Vec<(&'static str, &'static str, Vec<Run>)>,
    trials: Trials,
}

impl Experiment for Locks {
    fn info(&self) -> ExperimentInfo {
        ExperimentInfo {
            name: "locks",
            title: "Spinlocks vs mutexes under oversubscription",
            seed: "003",
            summary: "T threads × 16 × 16384 lock/unlock: run duration, longest waits, longest idle times; spinlocks, futex mutexes, std, parking_lot",
        }
    }

    fn run(&self, ctx: &mut Ctx) -> Result<ExperimentResult, String> {
        let cores = ctx.machine.cpus_allowed.len().max(1);
        let (iterations, cap, budgets) = match ctx.profile {
            Profile::Smoke => (
                256u64,
                Duration::from_millis(100),
                [
                    Budget {
                        min_trials: 2,
                        max_trials: 2,
                        max_time: Duration::from_secs(5),
                    },
                    Budget {
                        min_trials: 2,
                        max_trials: 3,
                        max_time: Duration::from_secs(5),
                    },
                ],
            ),
            Profile::Quick => (
                SEED_ITERATIONS * SCALE,
                Duration::from_millis(500),
                [
                    Budget {
                        min_trials: 10,
                        max_trials: 10,
                        max_time: Duration::from_secs(15),
                    },
                    Budget {
                        min_trials: 15,
                        max_trials: 200,
                        max_time: Duration::from_secs(55),
                    },
                ],
            ),
            Profile::Full => (
                SEED_ITERATIONS * SCALE,
                Duration::from_secs(3),
                [
                    Budget {
                        min_trials: 50,
                        max_trials: 100,
                        max_time: Duration::from_secs(120),
                    },
                    Budget {
                        min_trials: 100,
                        max_trials: 1000,
                        max_time: Duration::from_secs(480),
                    },
                ],
            ),
        };
        let ticks_per_ms = ctx.machine.tsc_ghz * 1e6;
        let cap_ticks = (cap.as_secs_f64() * 1e3 * ticks_per_ms) as u64;

        let tas = Padded(parking_lot::lock_api::Mutex::<TasLock, Slot>::new(
            Slot::default(),
        ));
        let ttas = Padded(parking_lot::lock_api::Mutex::<TtasLock, Slot>::new(
            Slot::default(),
        ));
        let spin = Padded(parking_lot::lock_api::Mutex::<SpinLock, Slot>::new(
            Slot::default(),
        ));
        let ticket = Padded(parking_lot::lock_api::Mutex::<TicketLock, Slot>::new(
            Slot::default(),
        ));
        let futex = Padded(parking_lot::lock_api::Mutex::<FutexMutex, Slot>::new(
            Slot::default(),
        ));
        let spindle = Padded(parking_lot::lock_api::Mutex::<SpindleLock, Slot>::new(
            Slot::default(),
        ));
        let std_lock = Padded(std::sync::Mutex::new(Slot::default()));
        let pl = Padded(parking_lot::Mutex::new(Slot::default()));

        let mut levels = Vec::new();
        for (level, threads) in [cores, 4 * cores].into_iter().enumerate() {
            macro_rules! contestant {
                ($base:literal, $label:literal, $lock:expr) => {{
                    let lock = &$lock.0;
                    Contestant {
                        id: id_at($base, level),
                        label: $label,
                        run: Box::new(move || {
                            one_run(lock, threads, iterations, cap_ticks, ticks_per_ms)
                        }),
                        runs: RefCell::new(Vec::new()),
                        paired: level == 1 && ($base == "spindle" || $base == "std"),
                        pending: Cell::new(None),
                    }
                }};
            }
            let contestants = [
                contestant!("tas", "TasLock (swap loop, no pause)", tas),
                contestant!("ttas", "TtasLock (test-and-test-and-set + pause)", ttas),
                contestant!("spin", "SpinLock (TTAS, pause ×16 then yield)", spin),
                contestant!("ticket", "TicketLock (FIFO, pause ×16 then yield)", ticket),
                contestant!("futex", "FutexMutex (3-state futex mutex)", futex),
                contestant!("spindle", "Spindle Mutex", spindle),
                contestant!("std", "std::sync::Mutex", std_lock),
                contestant!("pl", "parking_lot::Mutex", pl),
            ];
            let mut variants: Vec<Variant> = contestants
                .iter()
                .map(|c| Variant {
                    id: c.id,
                    label: c.label.to_string(),
                    threads,
                    run: Box::new(move || Measurement {
                        value: c.next().duration_ms,
                        ticks: None,
                    }),
                })
                .collect();
            let level_claims = if level == 1 {
                for (base, view) in [("spindle", "spindle-4x-idle"), ("std", "std-4x-idle")] {
                    let c = contestants
                        .iter()
                        .find(|c| c.id == id_at(base, 1))
                        .expect("listed above");
                    variants.push(Variant {
                        id: view,
                        label: format!("{} (longest idle, same run)", c.label),
                        threads,
                        run: Box::new(move || Measurement {
                            value: c.next().longest_idle_ms,
                            ticks: None,
                        }),
                    });
                }
                claims()
            } else {
                Vec::new()
            };
            ctx.progress.set_message(format!("{threads} threads"));
            let trials = run_trials(ctx, &mut variants, &level_claims, budgets[level]);
            drop(variants);
            let runs = contestants
                .iter()
                .map(|c| {
                    // The first run of each lock is run_trials' unrecorded warm-up.
                    let mut r = c.runs.take();
                    if !r.is_empty() {
                        r.remove(0);
                    }
                    (c.id, c.label, r)
                })
                .collect();
            levels.push(Level {
                threads,
                runs,
                trials,
            });
        }

        let eps = ctx.eps;
        let mut variants = Vec::new();
        let mut figures = Vec::new();
        let mut claims_out = Vec::new();
        let mut trials_total = 0;
        let mut wall = 0.0;
        let mut stop_reasons = Vec::new();
        for (level, l) in levels.iter().enumerate() {
            trials_total += l.trials.count();
            wall += l.trials.wall.as_secs_f64();
            stop_reasons.push(format!("T = {}: {}", l.threads, l.trials.stop_reason));
            let std_id = id_at("std", level);
            for (id, label, runs) in &l.runs {
                let durations: Vec<f64> = runs.iter().map(|r| r.duration_ms).collect();
                let base = IDS.iter().find(|r| r.1 == *id || r.2 == *id).map(|r| r.0);
                let reference_ratio = if level == 0 {
                    let seed_std = SEED_CFS[0].wait_run_ms;
                    SEED_CFS
                        .iter()
                        .find(|s| Some(s.ours) == base)
                        .map(|s| s.wait_run_ms / seed_std)
                } else {
                    None
                };
                variants.push(VariantResult {
                    id,
                    label: format!("{label} · T={}", l.threads),
                    threads: l.threads,
                    unit: "ms per run".into(),
                    value: Summary::of(&durations, eps),
                    ticks: None,
                    ratio_to_baseline: Some(Summary::of(&l.trials.ratios(id, std_id), eps)),
                    reference_ratio,
                });
            }
            let rows: Vec<Vec<String>> = l
                .runs
                .iter()
                .map(|(_, label, runs)| {
                    let n = runs.len().max(1) as f64;
                    let capped = runs.iter().filter(|r| r.capped).count();
                    vec![
                        label.to_string(),
                        duration(runs.iter().map(|r| r.duration_ms).sum::<f64>() / n),
                        ms_list(&four_largest(
                            runs.iter().map(|r| r.longest_wait_ms).collect(),
                        )),
                        ms_list(&four_largest(
                            runs.iter().map(|r| r.longest_idle_ms).collect(),
                        )),
                        format!("{} / {}", capped, runs.len()),
                    ]
                })
                .collect();
            figures.push(Figure::Table {
                title: format!(
                    "T = {} threads ({}): average run duration, four longest waits and idle times over all runs",
                    l.threads,
                    if level == 0 { "= cores" } else { "= 4 × cores" }
                ),
                columns: vec![
                    "lock".into(),
                    "average run duration".into(),
                    "four longest waits".into(),
                    "four longest idle times".into(),
                    "runs capped".into(),
                ],
                rows,
            });
            figures.push(Figure::Bars {
                title: format!(
                    "Run duration at T = {} (median over runs, with its confidence interval)",
                    l.threads
                ),
                axis: "ms per run (log scale)".into(),
                log: true,
                bars: l
                    .runs
                    .iter()
                    .map(|(_, label, runs)| {
                        let s = Summary::of(
                            &runs.iter().map(|r| r.duration_ms).collect::<Vec<_>>(),
                            eps,
                        );
                        Bar::median(label.to_string(), &s)
                    })
                    .collect(),
            });
            figures.push(Figure::Bars {
                title: format!(
                    "Longest idle time per run at T = {} (median over runs)",
                    l.threads
                ),
                axis: "ms (log scale)".into(),
                log: true,
                bars: l
                    .runs
                    .iter()
                    .map(|(_, label, runs)| {
                        let s = Summary::of(
                            &runs.iter().map(|r| r.longest_idle_ms).collect::<Vec<_>>(),
                            eps,
                        );
                        Bar::median(label.to_string(), &s)
                    })
                    .collect(),
            });
            if !l.trials.claims.is_empty() {
                figures.push(l.trials.claims_figure());
            }
            claims_out.extend(l.trials.claims.iter().cloned());
        }
        figures.push(Figure::Table {
            title: "Seed 003, Linux CFS, 16 threads on a Ryzen 7 1700 (8 cores, 16 hardware threads): T = cores".into(),
            columns: vec![
                "lock".into(),
                "average run duration (latency runs)".into(),
                "four longest waits".into(),
                "average run duration (idle runs)".into(),
                "four longest idle times".into(),
            ],
            rows: SEED_CFS
                .iter()
                .map(|s| {
                    vec![
                        format!("{} (ours: {})", s.name, s.ours),
                        duration(s.wait_run_ms),
                        ms_list(&s.waits_ms),
                        duration(s.idle_run_ms),
                        ms_list(&s.idles_ms),
                    ]
                })
                .collect(),
        });

        let mut notes = vec![
            "Run duration: start barrier to the last thread's end. Wait: TSC from calling lock to holding it, the \
             longest per run. Idle: TSC from the timestamp taken just before an unlock (stored under the lock) to the \
             next acquisition by any thread, the longest per run; the first acquisition of a run is skipped. The \
             tables list the four runs with the longest such values, as the seed does."
                .to_string(),
            format!(
                "Every run is capped at {} ms: a thread that finds the cap passed (checked every 64 iterations) stops \
                 early, and the run counts as capped in the tables (its duration is then a lower bound). Only the \
                 terrible TasLock is expected to reach the cap.",
                cap.as_millis()
            ),
            format!(
                "Iterations: {SCALE} × the seed's {SEED_ITERATIONS} per thread (smoke: 256). With the seed's count a run \
                 of 8 threads on a 2-vCPU machine lasts about one 4 ms scheduler tick for every lock but the ticket \
                 lock, i.e. it measures how fast the threads get started; {SCALE}× makes a run last about as long as \
                 the seed's (~60 ms)."
            ),
            "Threads are not pinned: the kernel's placement and preemption are what this experiment measures.".into(),
            "\"Best spinlock\" in the throughput claim is SpinLock, the seed's improved spinlock (TTAS, 16 pauses, then \
             sched_yield); the tables show TtasLock and TicketLock beside it. The idle claim compares the longest idle \
             time of one Spindle run with that of one std run of the same trial."
                .into(),
            "The seed ran its latency and idle measurements in separate runs (100 and 1000 runs); we measure both in \
             each run and run far fewer runs, so the four longest values here come from fewer samples."
                .into(),
        ];
        if ctx.machine.virtualised {
            notes.push(
                "This machine is virtualised: the hypervisor can deschedule a vCPU at any moment, which shows up as \
                 long waits and idle times for every lock alike."
                    .into(),
            );
        }

        Ok(ExperimentResult {
            name: "locks",
            title: "Spinlocks vs mutexes under oversubscription",
            seed: "003",
            question: "When T threads hammer one lock, how long does a run take, how long can one thread wait, and how \
                       long can the lock sit free while a thread wants it — spinlocks, futex mutexes, std, parking_lot \
                       and Spindle's Mutex, at T = cores and T = 4 × cores?"
                .into(),
            unit: "ms per run".into(),
            baseline: Some("std"),
            parameters: vec![
                Param::new("threads", format!("{cores} (= cores) and {} (= 4 × cores), unpinned", 4 * cores)),
                Param::new(
                    "iterations per thread per run",
                    format!("{iterations} (the seed: {SEED_ITERATIONS}; see the notes)"),
                ),
                Param::new("per-run time cap", format!("{} ms", cap.as_millis())),
                Param::new(
                    "trials (runs per lock)",
                    format!(
                        "T = {}: {} to {} ({} s); T = {}: {} to {} ({} s)",
                        cores,
                        budgets[0].min_trials,
                        budgets[0].max_trials,
                        budgets[0].max_time.as_secs(),
                        4 * cores,
                        budgets[1].min_trials,
                        budgets[1].max_trials,
                        budgets[1].max_time.as_secs()
                    ),
                ),
                Param::claim_band(),
                Param::new("× std", "ratio to std::sync::Mutex's run duration in the same trial, same T"),
            ],
            budget: budgets[1],
            trials: trials_total,
            stop_reason: stop_reasons.join("; "),
            wall_s: wall,
            variants,
            claims: claims_out,
            reference: Some(Reference {
                source: "seed 003 (\"Measuring Mutexes, Spinlocks and how Bad the Linux Scheduler Really is\"), Linux CFS tables; \
                         the seed × column is the seed's run duration relative to std::mutex (latency runs)"
                    .into(),
                machine: "AMD Ryzen 7 1700, 8 cores / 16 hardware threads, 16 threads".into(),
            }),
            figures,
            notes,
        })
    }
}
