//! `smr`: what safe memory reclamation costs a reader, and what a read-mostly workload gets
//! out of it (seed 000, lines 180–300: readers that publish and re-check with no fence, the
//! writer paying with a process-wide or prepaid barrier).
//!
//! Two sections, all variants interleaved in one random order per trial:
//!
//! 1. **Read-side cost**, ns and TSC ticks per operation, one thread, a tight loop
//!    (`inline(never)`): what a reader does to obtain one pointer it may dereference and let go
//!    of it. Floor: a plain load of a shared pointer and a store of it to a slot (what a
//!    fence-free publication costs at the least). Ours: epoch pin + load + unpin (through a
//!    registered handle, and through the thread-local [`epoch::pin`]); hazard `protect` +
//!    `reset`. Peers: crossbeam-epoch pin + load + drop (handle, and thread-local); haphazard
//!    `protect_ptr` + `reset_protection`; seize `enter` + `protect` + drop.
//! 2. **Read-mostly workload**: `R` readers (cores + 1) protect a random node of a shared array
//!    of 64, read it and let go, while one writer replaces random nodes and retires the old
//!    ones, for a fixed time per variant and trial. Value: reader operations per second (all
//!    readers). Also recorded: the writer's replacements per second, and the peak of
//!    unreclaimed garbage (nodes allocated minus nodes dropped minus the 64 linked, sampled by
//!    the writer every 64 replacements; the same drop counter for every variant).
//!
//! Claims: see `claims()`.

use std::cell::RefCell;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicPtr, AtomicU64, Ordering::*};
use std::time::{Duration, Instant};

use seize::Guard as _;
use spindle_sync::prepaid::PrepaidBarrier;
use spindle_sync::smr::{epoch, hazard, Barrier};

use super::{Experiment, ExperimentInfo};
use crate::harness::{
    per_op, run_together, run_trials, Budget, Claim, Ctx, Measurement, Profile, Relation, Summary,
    Variant,
};
use crate::report::{Bar, ExperimentResult, Figure, Param, VariantResult};

pub struct Smr;

/// Keeps each shared word on its own cache lines.
#[repr(align(128))]
struct Padded<T>(T);

// ---------------------------------------------------------------------------------------------
// Section 1: read-side cost. `inline(never)` keeps each a separate loop.

#[inline(never)]
fn plain_loop(src: &AtomicPtr<u64>, slot: &AtomicPtr<u64>, n: u64) {
    for _ in 0..n {
        let p = src.load(Acquire);
        slot.store(p, Release);
        black_box(p);
    }
}

#[inline(never)]
fn epoch_loop(h: &epoch::LocalHandle, src: &AtomicPtr<u64>, n: u64) {
    for _ in 0..n {
        let g = h.pin();
        black_box(src.load(Acquire));
        drop(g);
    }
}

#[inline(never)]
fn epoch_tls_loop(src: &AtomicPtr<u64>, n: u64) {
    for _ in 0..n {
        let g = epoch::pin();
        black_box(src.load(Acquire));
        drop(g);
    }
}

#[inline(never)]
fn hazard_loop(hp: &mut hazard::HazardPointer<'_>, src: &AtomicPtr<u64>, n: u64) {
    for _ in 0..n {
        black_box(hp.protect(src));
        hp.reset();
    }
}

#[inline(never)]
fn crossbeam_loop(h: &crossbeam_epoch::LocalHandle, src: &AtomicPtr<u64>, n: u64) {
    for _ in 0..n {
        let g = h.pin();
        black_box(src.load(Acquire));
        drop(g);
    }
}

#[inline(never)]
fn crossbeam_tls_loop(src: &AtomicPtr<u64>, n: u64) {
    for _ in 0..n {
        let g = crossbeam_epoch::pin();
        black_box(src.load(Acquire));
        drop(g);
    }
}

#[inline(never)]
fn haphazard_loop(hp: &mut haphazard::HazardPointer<'static>, src: &AtomicPtr<u64>, n: u64) {
    for _ in 0..n {
        black_box(hp.protect_ptr(src).map(|(p, _)| p));
        hp.reset_protection();
    }
}

#[inline(never)]
fn seize_loop(c: &seize::Collector, src: &AtomicPtr<u64>, n: u64) {
    for _ in 0..n {
        let g = c.enter();
        black_box(g.protect(src, Acquire));
        drop(g);
    }
}

// ---------------------------------------------------------------------------------------------
// Section 2: read-mostly workload.

const NODES: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scheme {
    EpochHeavy,
    EpochPrepaid,
    Hazard,
    Crossbeam,
    Haphazard,
    Seize,
}

const SCHEMES: [Scheme; 6] = [
    Scheme::EpochHeavy,
    Scheme::EpochPrepaid,
    Scheme::Hazard,
    Scheme::Crossbeam,
    Scheme::Haphazard,
    Scheme::Seize,
];

impl Scheme {
    fn short(self) -> &'static str {
        match self {
            Scheme::EpochHeavy => "epoch-heavy",
            Scheme::EpochPrepaid => "epoch-prepaid",
            Scheme::Hazard => "hazard",
            Scheme::Crossbeam => "crossbeam",
            Scheme::Haphazard => "haphazard",
            Scheme::Seize => "seize",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Scheme::EpochHeavy => "Spindle epoch, advances pay fence::heavy()",
            Scheme::EpochPrepaid => "Spindle epoch, advances wait for prepaid tickets",
            Scheme::Hazard => "Spindle hazard pointers (fence::heavy() per reclaim)",
            Scheme::Crossbeam => "crossbeam-epoch",
            Scheme::Haphazard => "haphazard",
            Scheme::Seize => "seize",
        }
    }

    fn index(self) -> usize {
        SCHEMES.iter().position(|&s| s == self).unwrap_or(0)
    }
}

/// Live nodes per scheme (allocated minus dropped), across runs: peers may free a run's
/// garbage after it ended, so the counters must outlive every run.
static ALIVE: [AtomicI64; 6] = [const { AtomicI64::new(0) }; 6];

struct Node {
    value: u64,
    check: u64,
    alive: &'static AtomicI64,
}

impl Node {
    fn boxed(scheme: Scheme, value: u64) -> *mut Node {
        let alive = &ALIVE[scheme.index()];
        alive.fetch_add(1, Relaxed);
        Box::into_raw(Box::new(Node {
            value,
            check: !value,
            alive,
        }))
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.alive.fetch_sub(1, Relaxed);
    }
}

/// Read a protected node (both words, so the load is not optimised away).
#[inline(always)]
fn read(p: *mut Node) -> u64 {
    if p.is_null() {
        return 0;
    }
    // SAFETY: the caller protects `p` with the scheme under test.
    unsafe { (*p).value ^ (*p).check }
}

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// What one run of section 2 measured besides reader throughput.
#[derive(Clone, Copy, Debug, Default)]
struct Extra {
    writes_per_s: f64,
    peak_garbage: f64,
}

/// Per-scheme state that lives across a run's threads.
enum Reclaimer {
    Epoch(epoch::Collector),
    Hazard(Box<hazard::Domain>),
    Crossbeam(crossbeam_epoch::Collector),
    Haphazard,
    Seize(Box<seize::Collector>),
}

fn workload(scheme: Scheme, readers: usize, run_for: Duration) -> (Measurement, Extra) {
    let slots: Vec<AtomicPtr<Node>> = (0..NODES as u64)
        .map(|i| AtomicPtr::new(Node::boxed(scheme, i)))
        .collect();
    let reclaimer = match scheme {
        Scheme::EpochHeavy => Reclaimer::Epoch(epoch::Collector::with_barrier(Barrier::Heavy)),
        Scheme::EpochPrepaid => Reclaimer::Epoch(epoch::Collector::with_barrier(Barrier::Prepaid)),
        Scheme::Hazard => Reclaimer::Hazard(Box::new(hazard::Domain::new())),
        Scheme::Crossbeam => Reclaimer::Crossbeam(crossbeam_epoch::Collector::new()),
        Scheme::Haphazard => Reclaimer::Haphazard,
        Scheme::Seize => Reclaimer::Seize(Box::new(seize::Collector::new())),
    };
    let alive = &ALIVE[scheme.index()];
    let stop = AtomicBool::new(false);
    let reads = AtomicU64::new(0);
    let writes = AtomicU64::new(0);
    let peak = AtomicI64::new(0);
    let write_time = AtomicU64::new(0);
    let (slots, reclaimer, stop, reads, writes, peak, write_time) = (
        &slots,
        &reclaimer,
        &stop,
        &reads,
        &writes,
        &peak,
        &write_time,
    );
    let t = run_together(readers + 1, None, |i| {
        let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ (i as u64 + 1);
        if i == 0 {
            let w = WriterHandle::new(reclaimer);
            let start = Instant::now();
            let mut n = 0u64;
            while start.elapsed() < run_for {
                for _ in 0..64 {
                    let fresh = Node::boxed(scheme, n);
                    let old = slots[xorshift(&mut x) as usize % NODES].swap(fresh, AcqRel);
                    retire(reclaimer, &w, old);
                    n += 1;
                }
                peak.fetch_max(alive.load(Relaxed) - NODES as i64, Relaxed);
            }
            write_time.store(start.elapsed().as_nanos() as u64, Relaxed);
            writes.store(n, Relaxed);
            stop.store(true, Release);
        } else {
            let (sum, ops) = reader_loop(reclaimer, slots, stop, &mut x);
            black_box(sum);
            reads.fetch_add(ops, Relaxed);
        }
    });
    // Unlink and retire the last nodes, then let each scheme free what it can.
    {
        let w = WriterHandle::new(reclaimer);
        for s in slots.iter() {
            retire(reclaimer, &w, s.swap(std::ptr::null_mut(), AcqRel));
        }
    }
    drain(reclaimer);
    let secs = t.elapsed.as_secs_f64().max(1e-9);
    let wsecs = (write_time.load(Relaxed) as f64 / 1e9).max(1e-9);
    (
        Measurement {
            value: reads.load(Relaxed) as f64 / secs / 1e6,
            ticks: None,
        },
        Extra {
            writes_per_s: writes.load(Relaxed) as f64 / wsecs,
            peak_garbage: peak.load(Relaxed).max(0) as f64,
        },
    )
}

/// The reader side of section 2: one protection per operation, until `stop`.
fn reader_loop(
    r: &Reclaimer,
    slots: &[AtomicPtr<Node>],
    stop: &AtomicBool,
    x: &mut u64,
) -> (u64, u64) {
    let mut sum = 0u64;
    let mut ops = 0u64;
    let pick = |x: &mut u64| &slots[xorshift(x) as usize % NODES];
    match r {
        Reclaimer::Epoch(c) => {
            let h = c.register();
            while !stop.load(Relaxed) {
                for _ in 0..256 {
                    let g = h.pin();
                    sum += read(pick(x).load(Acquire));
                    drop(g);
                }
                ops += 256;
            }
        }
        Reclaimer::Hazard(d) => {
            let mut hp = hazard::HazardPointer::new_in(d);
            while !stop.load(Relaxed) {
                for _ in 0..256 {
                    sum += read(hp.protect(pick(x)));
                    hp.reset();
                }
                ops += 256;
            }
        }
        Reclaimer::Crossbeam(c) => {
            let h = c.register();
            while !stop.load(Relaxed) {
                for _ in 0..256 {
                    let g = h.pin();
                    sum += read(pick(x).load(Acquire));
                    drop(g);
                }
                ops += 256;
            }
        }
        Reclaimer::Haphazard => {
            let mut hp = haphazard::HazardPointer::new();
            while !stop.load(Relaxed) {
                for _ in 0..256 {
                    let p = hp
                        .protect_ptr(pick(x))
                        .map_or(std::ptr::null_mut(), |(p, _)| p.as_ptr());
                    sum += read(p);
                    hp.reset_protection();
                }
                ops += 256;
            }
        }
        Reclaimer::Seize(c) => {
            while !stop.load(Relaxed) {
                for _ in 0..256 {
                    let g = c.enter();
                    sum += read(g.protect(pick(x), Acquire));
                    drop(g);
                }
                ops += 256;
            }
        }
    }
    (sum, ops)
}

/// What a writer thread keeps for the run: a registered handle where the scheme has one.
enum WriterHandle {
    Epoch(epoch::LocalHandle),
    Crossbeam(crossbeam_epoch::LocalHandle),
    None,
}

impl WriterHandle {
    fn new(r: &Reclaimer) -> WriterHandle {
        match r {
            Reclaimer::Epoch(c) => WriterHandle::Epoch(c.register()),
            Reclaimer::Crossbeam(c) => WriterHandle::Crossbeam(c.register()),
            _ => WriterHandle::None,
        }
    }
}

unsafe fn seize_drop(p: *mut Node, _: &seize::Collector) {
    // SAFETY: `p` came from `Box::into_raw` and seize calls this once, when unprotected.
    drop(unsafe { Box::from_raw(p) });
}

/// Retire an unlinked node (null is ignored).
fn retire(r: &Reclaimer, w: &WriterHandle, old: *mut Node) {
    if old.is_null() {
        return;
    }
    // SAFETY (every arm): `old` came from `Box::into_raw`, was just unlinked by a swap, and is
    // retired exactly once.
    match (r, w) {
        (Reclaimer::Epoch(_), WriterHandle::Epoch(h)) => unsafe { h.pin().defer_destroy(old) },
        (Reclaimer::Hazard(d), _) => unsafe { d.retire(old) },
        (Reclaimer::Crossbeam(_), WriterHandle::Crossbeam(h)) => {
            let addr = old as usize;
            unsafe {
                h.pin()
                    .defer_unchecked(move || drop(Box::from_raw(addr as *mut Node)))
            };
        }
        (Reclaimer::Haphazard, _) => unsafe {
            haphazard::Domain::global().retire_ptr::<Node, Box<Node>>(old);
        },
        (Reclaimer::Seize(c), _) => unsafe { c.retire(old, seize_drop) },
        // A handle of the wrong kind cannot be built (`WriterHandle::new`); leak rather than
        // free unsafely.
        _ => {}
    }
}

/// After a run: free what each scheme will free (bounded effort; no thread is reading).
fn drain(r: &Reclaimer) {
    match r {
        Reclaimer::Epoch(c) => {
            for _ in 0..200 {
                if c.pending() == 0 {
                    break;
                }
                c.collect();
                if c.pending() > 0 {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
        }
        Reclaimer::Hazard(d) => {
            d.reclaim();
        }
        Reclaimer::Crossbeam(c) => {
            let h = c.register();
            for _ in 0..8 {
                h.pin().flush();
            }
        }
        Reclaimer::Haphazard => {
            haphazard::Domain::global().eager_reclaim();
        }
        Reclaimer::Seize(_) => {}
    }
}

/// Which section a variant belongs to, by id prefix.
fn section(id: &str) -> (&'static str, &'static str) {
    if id.starts_with("read-") {
        ("Read-side cost", "ns per protect + release")
    } else {
        ("Read-mostly workload", "reader Mops/s (all readers)")
    }
}

fn claims() -> Vec<Claim> {
    vec![
        Claim::ratio(
            "epoch-read-side",
            "Spindle's epoch pin + load + unpin costs at most 1.5 × a plain load + store pair",
            "read-epoch",
            "read-plain",
            Relation::AtMost(1.5),
        ),
        Claim::ratio(
            "hazard-read-side",
            "Spindle's hazard protect + reset costs at most 1.5 × a plain load + store pair",
            "read-hazard",
            "read-plain",
            Relation::AtMost(1.5),
        ),
        Claim::ratio(
            "epoch-vs-crossbeam",
            "Spindle's epoch pin is at least 5 × cheaper than crossbeam-epoch's (ratio ≤ 0.2)",
            "read-epoch",
            "read-crossbeam",
            Relation::AtMost(0.2),
        ),
    ]
}

impl Experiment for Smr {
    fn info(&self) -> ExperimentInfo {
        ExperimentInfo {
            name: "smr",
            title: "Safe memory reclamation: read-side cost and a read-mostly workload",
            seed: "000",
            summary: "epoch and hazard pointers with fence-free readers vs crossbeam-epoch, haphazard, seize",
        }
    }

    fn run(&self, ctx: &mut Ctx) -> Result<ExperimentResult, String> {
        let (reads, run_for, budget) = match ctx.profile {
            Profile::Smoke => (
                1u64 << 12,
                Duration::from_millis(10),
                Budget {
                    min_trials: 3,
                    max_trials: 4,
                    max_time: Duration::from_secs(20),
                },
            ),
            Profile::Quick => (
                1u64 << 20,
                Duration::from_millis(100),
                Budget {
                    min_trials: 12,
                    max_trials: 60,
                    max_time: Duration::from_secs(30),
                },
            ),
            Profile::Full => (
                1u64 << 22,
                Duration::from_millis(200),
                Budget {
                    min_trials: 30,
                    max_trials: 300,
                    max_time: Duration::from_secs(300),
                },
            ),
        };
        let readers = ctx.machine.cpus_allowed.len().max(1) + 1;
        let prepaid_source = PrepaidBarrier::global().source().name();

        // Section 1's shared state, each on its own lines.
        let target = Box::into_raw(Box::new(42u64));
        let src = Padded(AtomicPtr::new(target));
        let slot = Padded(AtomicPtr::new(std::ptr::null_mut()));
        let ours = epoch::Collector::new();
        let ours_handle = ours.register();
        let domain = hazard::Domain::new();
        let ours_hp = RefCell::new(hazard::HazardPointer::new_in(&domain));
        let cb = crossbeam_epoch::Collector::new();
        let cb_handle = cb.register();
        let hh_hp = RefCell::new(haphazard::HazardPointer::new());
        let sz = seize::Collector::new();
        let extras: Vec<RefCell<Vec<Extra>>> =
            SCHEMES.iter().map(|_| RefCell::new(Vec::new())).collect();
        let (src, slot, ours_handle, ours_hp, cb_handle, hh_hp, sz, extras) = (
            &src.0,
            &slot.0,
            &ours_handle,
            &ours_hp,
            &cb_handle,
            &hh_hp,
            &sz,
            &extras,
        );

        let mut variants: Vec<Variant> = vec![
            Variant {
                id: "read-plain",
                label: "plain load of the shared pointer + store to a slot (floor)".into(),
                threads: 1,
                run: Box::new(move || per_op(reads, || plain_loop(src, slot, reads))),
            },
            Variant {
                id: "read-epoch",
                label: "Spindle epoch: handle.pin(), load, unpin".into(),
                threads: 1,
                run: Box::new(move || per_op(reads, || epoch_loop(ours_handle, src, reads))),
            },
            Variant {
                id: "read-epoch-tls",
                label: "Spindle epoch: epoch::pin() (thread-local handle), load, unpin".into(),
                threads: 1,
                run: Box::new(move || per_op(reads, || epoch_tls_loop(src, reads))),
            },
            Variant {
                id: "read-hazard",
                label: "Spindle hazard: protect + reset".into(),
                threads: 1,
                run: Box::new(move || {
                    let mut hp = ours_hp.borrow_mut();
                    per_op(reads, || hazard_loop(&mut hp, src, reads))
                }),
            },
            Variant {
                id: "read-crossbeam",
                label: "crossbeam-epoch: handle.pin(), load, drop".into(),
                threads: 1,
                run: Box::new(move || per_op(reads, || crossbeam_loop(cb_handle, src, reads))),
            },
            Variant {
                id: "read-crossbeam-tls",
                label: "crossbeam-epoch: crossbeam_epoch::pin(), load, drop".into(),
                threads: 1,
                run: Box::new(move || per_op(reads, || crossbeam_tls_loop(src, reads))),
            },
            Variant {
                id: "read-haphazard",
                label: "haphazard: protect_ptr + reset_protection".into(),
                threads: 1,
                run: Box::new(move || {
                    let mut hp = hh_hp.borrow_mut();
                    per_op(reads, || haphazard_loop(&mut hp, src, reads))
                }),
            },
            Variant {
                id: "read-seize",
                label: "seize: enter(), protect, drop".into(),
                threads: 1,
                run: Box::new(move || per_op(reads, || seize_loop(sz, src, reads))),
            },
        ];
        for scheme in SCHEMES {
            let id: &'static str =
                Box::leak(format!("workload-{}", scheme.short()).into_boxed_str());
            variants.push(Variant {
                id,
                label: format!("{readers} readers + 1 writer: {}", scheme.label()),
                threads: readers + 1,
                run: Box::new(move || {
                    let (m, extra) = workload(scheme, readers, run_for);
                    extras[scheme.index()].borrow_mut().push(extra);
                    m
                }),
            });
        }

        let claims = claims();
        let trials = run_trials(ctx, &mut variants, &claims, budget);
        drop(variants);

        let eps = ctx.eps;
        let results: Vec<VariantResult> = (0..trials.ids.len())
            .map(|i| {
                let id = trials.ids[i];
                let baseline = if section(id).0 == "Read-side cost" {
                    "read-plain"
                } else {
                    "workload-crossbeam"
                };
                VariantResult {
                    id,
                    label: trials.labels[i].clone(),
                    threads: trials.threads[i],
                    unit: section(id).1.into(),
                    value: Summary::of(&trials.values[i], eps),
                    ticks: (!trials.ticks[i].is_empty())
                        .then(|| Summary::of(&trials.ticks[i], eps)),
                    ratio_to_baseline: Some(Summary::of(&trials.ratios(id, baseline), eps)),
                    reference_ratio: None,
                }
            })
            .collect();

        let mut figures = Vec::new();
        for title in ["Read-side cost", "Read-mostly workload"] {
            let unit = results
                .iter()
                .find(|v| section(v.id).0 == title)
                .map(|v| v.unit.clone())
                .unwrap_or_default();
            figures.push(Figure::Bars {
                title: format!("{title} (median over trials, with its confidence interval)"),
                axis: format!("{unit} (log scale)"),
                log: true,
                bars: results
                    .iter()
                    .filter(|v| section(v.id).0 == title)
                    .map(|v| {
                        // Workload labels start with "R readers + 1 writer: ", which the
                        // table says once; the bars keep the scheme.
                        let label = v.label.split_once(" writer: ").map_or(&*v.label, |l| l.1);
                        Bar::median(label, &v.value)
                    })
                    .collect(),
            });
        }
        let median = |mut v: Vec<f64>| -> f64 {
            if v.is_empty() {
                return f64::NAN;
            }
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let rows = SCHEMES
            .iter()
            .map(|&s| {
                let runs = extras[s.index()].borrow();
                let reader = results
                    .iter()
                    .find(|v| v.id.ends_with(s.short()) && v.id.starts_with("workload-"))
                    .map_or(f64::NAN, |v| v.value.median);
                vec![
                    s.label().to_string(),
                    format!("{reader:.1}"),
                    format!(
                        "{:.0}",
                        median(runs.iter().map(|e| e.writes_per_s).collect()) / 1e3
                    ),
                    format!(
                        "{:.0}",
                        median(runs.iter().map(|e| e.peak_garbage).collect())
                    ),
                    format!(
                        "{:.0}",
                        runs.iter().map(|e| e.peak_garbage).fold(0.0, f64::max)
                    ),
                    runs.len().to_string(),
                ]
            })
            .collect();
        figures.push(Figure::Table {
            title: format!(
                "Read-mostly workload, {readers} readers + 1 writer, {} ms per run: medians over runs",
                run_for.as_millis()
            ),
            columns: vec![
                "scheme".into(),
                "reader Mops/s".into(),
                "writer k replacements/s".into(),
                "peak garbage (nodes, median)".into(),
                "peak garbage (nodes, max)".into(),
                "runs".into(),
            ],
            rows,
        });
        figures.push(trials.claims_figure());

        let mut notes = vec![
            "Section 1 variants are ns per operation, one thread; '× baseline' compares them with the plain load + \
             store pair. Section 2 variants are reader Mops/s; '× baseline' compares them with crossbeam-epoch."
                .to_string(),
            format!(
                "Prepaid barrier source active in this process: {prepaid_source} (the 'epoch-prepaid' workload \
                 waits for its tickets without blocking, and issues fence::heavy() once a ticket is 10 ms old)."
            ),
            "Peak garbage counts nodes allocated and not yet dropped, minus the 64 linked ones, with the same drop \
             counter for every scheme, sampled by the writer every 64 replacements. Epoch schemes cannot free anything \
             retired after the epoch of a reader that is preempted while pinned, so on an oversubscribed machine their \
             garbage follows the scheduler's time slices; hazard pointers bound it by the number of slots."
                .to_string(),
            "haphazard's protect issues a SeqCst fence (mfence) on every call; crossbeam-epoch's pin a SeqCst \
             fence or locked instruction; Spindle's readers only a compiler fence, the writer paying with \
             membarrier/prepaid barriers (seed 000)."
                .to_string(),
        ];
        if ctx.machine.cpus_allowed.len() < 2 {
            notes.push(
                "Fewer than two CPUs are available: readers and the writer time-share one CPU."
                    .into(),
            );
        }

        let (advances, fallbacks) = ours.advance_counts();
        Ok(ExperimentResult {
            name: "smr",
            title: "Safe memory reclamation: read-side cost and a read-mostly workload",
            seed: "000",
            question: "What does a reader pay to protect a pointer with Spindle's fence-free epochs and hazard \
                       pointers, compared with a plain load and store and with crossbeam-epoch, haphazard and \
                       seize; and under a read-mostly workload, how fast do readers and the writer go and how much \
                       garbage piles up?"
                .into(),
            unit: "ns per operation (section 1), reader Mops/s (section 2)".into(),
            baseline: None,
            parameters: vec![
                Param::new("protections per run (section 1)", reads),
                Param::new("readers (section 2)", format!("{readers} (allowed CPUs + 1), plus 1 writer")),
                Param::new("run time per variant (section 2)", format!("{} ms", run_for.as_millis())),
                Param::new("shared nodes (section 2)", NODES),
                Param::new("prepaid barrier source", prepaid_source),
                Param::new(
                    "default collector (section 1)",
                    format!("{} policy; {advances} advances, {fallbacks} heavy fallbacks", ours.barrier().name()),
                ),
                Param::trials(&budget),
                Param::claim_band(),
            ],
            budget,
            trials: trials.count(),
            stop_reason: trials.stop_reason.clone(),
            wall_s: trials.wall.as_secs_f64(),
            variants: results,
            claims: trials.claims,
            reference: None,
            figures,
            notes,
        })
    }
}
