//! `contention`: the cost of contention (seed 004, "Single Writer Principle").
//!
//! The seed increments a 64-bit counter 500 million times in several ways on a 2.4 GHz Westmere
//! (2011) and reports the total time: one thread 300 ms; with a memory barrier 4,700 ms; with
//! CAS 5,700 ms; two threads CAS 18,000 ms; one thread with a lock 10,000 ms; two threads with a
//! lock 118,000 ms. We run the same kernels (plus lock-free atomic adds, parking_lot, and the
//! single-writer and false-sharing layouts) and report nanoseconds per increment — total wall
//! time divided by total increments, so two threads that share the work in parallel can cost
//! *less* per increment than one — and the ratio to one plain thread, next to the seed's ratios.
//!
//! Variants: every kernel below, one or two threads, pinned to distinct CPUs when two are
//! available. Parameters: increments per run (split evenly across threads). Trial: each variant
//! once, in random order. Claims: see `claims()`.

use std::sync::atomic::{fence, AtomicU64, Ordering::*};
use std::time::Duration;

use super::{Experiment, ExperimentInfo};
use crate::harness::{
    run_together, run_trials, Budget, Claim, Ctx, Measurement, Profile, Relation, Summary, Variant,
};
use crate::report::{Bar, ExperimentResult, Figure, PairedRow, Param, Reference, VariantResult};

pub struct Contention;

/// One counter per 128 bytes: no other data shares its cache line (or the adjacent-line
/// prefetcher's pair of lines).
#[repr(align(128))]
struct Padded<T>(T);

/// Two counters in one 64-byte cache line.
#[repr(C, align(64))]
struct OneLine {
    a: AtomicU64,
    b: AtomicU64,
}

/// The seed's table as ratios to one plain thread (500 M increments, 2.4 GHz Westmere).
const SEED_RATIOS: &[(&str, f64)] = &[
    ("plain", 1.0),
    ("fence", 4700.0 / 300.0),
    ("cas", 5700.0 / 300.0),
    ("cas-2t", 18000.0 / 300.0),
    ("std-mutex", 10000.0 / 300.0),
    ("std-mutex-2t", 118000.0 / 300.0),
    ("pl-mutex", 10000.0 / 300.0),
    ("pl-mutex-2t", 118000.0 / 300.0),
];

// The kernels. `inline(never)` keeps each a separate loop the compiler cannot merge or hoist;
// atomics keep every increment a real memory operation.

/// Load and store, no read-modify-write: what a single writer needs.
#[inline(never)]
fn plain(c: &AtomicU64, n: u64) {
    for _ in 0..n {
        c.store(c.load(Relaxed).wrapping_add(1), Relaxed);
    }
}

/// The same, followed by a full fence (MFENCE on x86-64): the cost of a "volatile" store.
#[inline(never)]
fn fenced(c: &AtomicU64, n: u64) {
    for _ in 0..n {
        c.store(c.load(Relaxed).wrapping_add(1), Relaxed);
        fence(SeqCst);
    }
}

/// A locked add.
#[inline(never)]
fn atomic_add(c: &AtomicU64, n: u64) {
    for _ in 0..n {
        c.fetch_add(1, Relaxed);
    }
}

/// A compare-and-swap loop, as optimistic concurrency control does it.
#[inline(never)]
fn cas(c: &AtomicU64, n: u64) {
    for _ in 0..n {
        let mut current = c.load(Relaxed);
        while let Err(seen) =
            c.compare_exchange_weak(current, current.wrapping_add(1), AcqRel, Relaxed)
        {
            current = seen;
        }
    }
}

#[inline(never)]
fn std_mutex(m: &std::sync::Mutex<u64>, n: u64) {
    for _ in 0..n {
        // A poisoned lock only means another benchmark thread panicked; keep counting.
        *m.lock().unwrap_or_else(|e| e.into_inner()) += 1;
    }
}

#[inline(never)]
fn pl_mutex(m: &parking_lot::Mutex<u64>, n: u64) {
    for _ in 0..n {
        *m.lock() += 1;
    }
}

fn claims() -> Vec<Claim> {
    vec![
        Claim::ratio(
            "fence-cost",
            "A full fence per increment costs at least 5× a plain increment (seed: 15.7×)",
            "fence",
            "plain",
            Relation::AtLeast(5.0),
        ),
        Claim::ratio(
            "cas-contended",
            "Two threads CAS-ing one counter pay at least 3× more per increment than one thread alone (seed: 3.2×)",
            "cas-2t",
            "cas",
            Relation::AtLeast(3.0),
        ),
        Claim::ratio(
            "lock-contended",
            "Two threads on one std Mutex pay at least 2× more per increment than one thread (seed: 11.8×)",
            "std-mutex-2t",
            "std-mutex",
            Relation::AtLeast(2.0),
        ),
        Claim::ratio(
            "single-writer",
            "Two single writers on padded counters cost at most 1.2× one plain writer per increment",
            "padded-2t",
            "plain",
            Relation::AtMost(1.2),
        ),
        Claim::ratio(
            "false-sharing",
            "Two writers sharing one cache line cost at least 2× padded single writers",
            "shared-line-2t",
            "padded-2t",
            Relation::AtLeast(2.0),
        ),
    ]
}

impl Experiment for Contention {
    fn info(&self) -> ExperimentInfo {
        ExperimentInfo {
            name: "contention",
            title: "The cost of contention",
            seed: "004",
            summary: "increment a counter: plain, fenced, atomic, CAS, locks; one and two threads; single writer vs false sharing",
        }
    }

    fn run(&self, ctx: &mut Ctx) -> Result<ExperimentResult, String> {
        let (increments, budget) = match ctx.profile {
            Profile::Smoke => (
                1u64 << 12,
                Budget {
                    min_trials: 3,
                    max_trials: 5,
                    max_time: Duration::from_secs(20),
                },
            ),
            Profile::Quick => (
                1u64 << 22,
                Budget {
                    min_trials: 12,
                    max_trials: 60,
                    max_time: Duration::from_secs(50),
                },
            ),
            Profile::Full => (
                1u64 << 24,
                Budget {
                    min_trials: 30,
                    max_trials: 300,
                    max_time: Duration::from_secs(600),
                },
            ),
        };
        let cpus: Vec<usize> = ctx.machine.cpus_allowed.iter().take(2).copied().collect();
        let pinned = cpus.len() >= 2;
        let pin = pinned.then_some(cpus.as_slice());

        let shared = Padded(AtomicU64::new(0));
        let own = [Padded(AtomicU64::new(0)), Padded(AtomicU64::new(0))];
        let line = OneLine {
            a: AtomicU64::new(0),
            b: AtomicU64::new(0),
        };
        let std_lock = Padded(std::sync::Mutex::new(0u64));
        let pl_lock = Padded(parking_lot::Mutex::new(0u64));
        // The variants' closures capture these by shared reference.
        let (shared, own, line, std_lock, pl_lock) = (&shared, &own, &line, &std_lock, &pl_lock);
        let lost = std::cell::Cell::new(Vec::<&'static str>::new());

        // Runs `body` on `threads` threads (each does its share of the increments), checks that
        // no increment was lost, and returns ns and TSC ticks per increment.
        let measure = |id: &'static str,
                       threads: u64,
                       read: &dyn Fn() -> u64,
                       reset: &dyn Fn(),
                       body: &(dyn Fn(usize, u64) + Sync)| {
            reset();
            let per_thread = increments / threads;
            let t = run_together(threads as usize, pin, |i| body(i, per_thread));
            if read() != per_thread * threads {
                let mut l = lost.take();
                l.push(id);
                lost.set(l);
            }
            Measurement {
                value: t.elapsed.as_nanos() as f64 / increments as f64,
                ticks: Some(t.ticks as f64 / increments as f64),
            }
        };
        let counter = || shared.0.load(Relaxed);
        let reset_counter = || shared.0.store(0, Relaxed);
        let own_sum = || own[0].0.load(Relaxed) + own[1].0.load(Relaxed);
        let reset_own = || own.iter().for_each(|c| c.0.store(0, Relaxed));
        let line_sum = || line.a.load(Relaxed) + line.b.load(Relaxed);
        let reset_line = || {
            line.a.store(0, Relaxed);
            line.b.store(0, Relaxed)
        };
        let std_read = || *std_lock.0.lock().unwrap_or_else(|e| e.into_inner());
        let std_reset = || *std_lock.0.lock().unwrap_or_else(|e| e.into_inner()) = 0;
        let pl_read = || *pl_lock.0.lock();
        let pl_reset = || *pl_lock.0.lock() = 0;

        let m = &measure;
        let mut variants: Vec<Variant> = vec![
            Variant {
                id: "plain",
                label: "one thread, plain increment".into(),
                threads: 1,
                run: Box::new(move || {
                    m("plain", 1, &counter, &reset_counter, &|_, n| {
                        plain(&shared.0, n)
                    })
                }),
            },
            Variant {
                id: "fence",
                label: "one thread, increment + full fence".into(),
                threads: 1,
                run: Box::new(move || {
                    m("fence", 1, &counter, &reset_counter, &|_, n| {
                        fenced(&shared.0, n)
                    })
                }),
            },
            Variant {
                id: "xadd",
                label: "one thread, atomic add (lock add)".into(),
                threads: 1,
                run: Box::new(move || {
                    m("xadd", 1, &counter, &reset_counter, &|_, n| {
                        atomic_add(&shared.0, n)
                    })
                }),
            },
            Variant {
                id: "cas",
                label: "one thread, CAS loop".into(),
                threads: 1,
                run: Box::new(move || {
                    m("cas", 1, &counter, &reset_counter, &|_, n| {
                        cas(&shared.0, n)
                    })
                }),
            },
            Variant {
                id: "xadd-2t",
                label: "two threads, atomic add, one counter".into(),
                threads: 2,
                run: Box::new(move || {
                    m("xadd-2t", 2, &counter, &reset_counter, &|_, n| {
                        atomic_add(&shared.0, n)
                    })
                }),
            },
            Variant {
                id: "cas-2t",
                label: "two threads, CAS loop, one counter".into(),
                threads: 2,
                run: Box::new(move || {
                    m("cas-2t", 2, &counter, &reset_counter, &|_, n| {
                        cas(&shared.0, n)
                    })
                }),
            },
            Variant {
                id: "std-mutex",
                label: "one thread, std Mutex".into(),
                threads: 1,
                run: Box::new(move || {
                    m("std-mutex", 1, &std_read, &std_reset, &|_, n| {
                        std_mutex(&std_lock.0, n)
                    })
                }),
            },
            Variant {
                id: "std-mutex-2t",
                label: "two threads, std Mutex".into(),
                threads: 2,
                run: Box::new(move || {
                    m("std-mutex-2t", 2, &std_read, &std_reset, &|_, n| {
                        std_mutex(&std_lock.0, n)
                    })
                }),
            },
            Variant {
                id: "pl-mutex",
                label: "one thread, parking_lot Mutex".into(),
                threads: 1,
                run: Box::new(move || {
                    m("pl-mutex", 1, &pl_read, &pl_reset, &|_, n| {
                        pl_mutex(&pl_lock.0, n)
                    })
                }),
            },
            Variant {
                id: "pl-mutex-2t",
                label: "two threads, parking_lot Mutex".into(),
                threads: 2,
                run: Box::new(move || {
                    m("pl-mutex-2t", 2, &pl_read, &pl_reset, &|_, n| {
                        pl_mutex(&pl_lock.0, n)
                    })
                }),
            },
            Variant {
                id: "padded-2t",
                label: "two threads, own padded counters".into(),
                threads: 2,
                run: Box::new(move || {
                    m("padded-2t", 2, &own_sum, &reset_own, &|i, n| {
                        plain(&own[i].0, n)
                    })
                }),
            },
            Variant {
                id: "shared-line-2t",
                label: "two threads, own counters, one cache line".into(),
                threads: 2,
                run: Box::new(move || {
                    m("shared-line-2t", 2, &line_sum, &reset_line, &|i, n| {
                        plain(if i == 0 { &line.a } else { &line.b }, n)
                    })
                }),
            },
        ];
        let claims = claims();
        let trials = run_trials(ctx, &mut variants, &claims, budget);
        drop(variants);
        let lost = lost.take();
        if !lost.is_empty() {
            return Err(format!(
                "increments were lost in {lost:?}: a kernel or the harness is broken"
            ));
        }

        let eps = ctx.eps;
        let baseline = "plain";
        let results: Vec<VariantResult> = (0..trials.ids.len())
            .map(|i| {
                let id = trials.ids[i];
                VariantResult {
                    id,
                    label: trials.labels[i].clone(),
                    threads: trials.threads[i],
                    unit: "ns per increment".into(),
                    value: Summary::of(&trials.values[i], eps),
                    ticks: Some(Summary::of(&trials.ticks[i], eps)),
                    ratio_to_baseline: Some(Summary::of(&trials.ratios(id, baseline), eps)),
                    reference_ratio: SEED_RATIOS.iter().find(|(k, _)| *k == id).map(|(_, r)| *r),
                }
            })
            .collect();

        let figures = vec![
            Figure::Bars {
                title: "Cost per increment on this machine (median, with its confidence interval)"
                    .into(),
                axis: "ns per increment (log scale)".into(),
                log: true,
                bars: results
                    .iter()
                    .map(|v| Bar::median(v.label.clone(), &v.value))
                    .collect(),
            },
            Figure::Paired {
                title: "Ratio to one plain thread: this machine vs the seed (2011)".into(),
                axis: "× one thread, plain increment (log scale)".into(),
                log: true,
                series: [
                    "this machine (median of per-trial ratios)".into(),
                    "seed 004 (2.4 GHz Westmere)".into(),
                ],
                rows: results
                    .iter()
                    .map(|v| PairedRow {
                        label: v.label.clone(),
                        values: [v.ratio_to_baseline.map(|r| r.median), v.reference_ratio],
                    })
                    .collect(),
            },
            trials.claims_figure(),
        ];

        let mut notes = vec![
            "ns per increment = wall time of the run (first thread's start to last thread's end) / total increments; \
             two threads splitting the work in parallel can therefore cost less per increment than one."
                .to_string(),
            "The seed's Java 'lock' is compared with both std and parking_lot mutexes; its 'memory barrier' with a \
             store followed by a full fence."
                .to_string(),
        ];
        if !pinned {
            notes.push(
                "Fewer than two CPUs are available: the two-thread variants time-share one CPU."
                    .into(),
            );
        }
        if ctx.machine.virtualised {
            notes.push(
                "This machine is virtualised: where the hypervisor runs the two vCPUs can change from run to run, \
                 and with it every two-thread figure. The fingerprint's cache-line round trip says how far apart \
                 the CPUs were when this run started."
                    .into(),
            );
        }

        Ok(ExperimentResult {
            name: "contention",
            title: "The cost of contention",
            seed: "004",
            question: "What does it cost to increment a shared counter — plainly, with a fence, atomically, with a \
                       lock — from one thread and from two, and what does sharing a cache line cost?"
                .into(),
            unit: "ns per increment".into(),
            baseline: Some(baseline),
            parameters: vec![
                Param::new("increments per run", increments),
                Param::new("threads pinned", if pinned { format!("yes, to CPUs {cpus:?}") } else { "no".into() }),
                Param::trials(&budget),
                Param::claim_band(),
            ],
            budget,
            trials: trials.count(),
            stop_reason: trials.stop_reason.clone(),
            wall_s: trials.wall.as_secs_f64(),
            variants: results,
            claims: trials.claims,
            reference: Some(Reference {
                source: "seed 004, \"Single Writer Principle\" (Mechanical Sympathy, 2011): 500 M increments".into(),
                machine: "2.4 GHz Intel Westmere, Java".into(),
            }),
            figures,
            notes,
        })
    }
}
