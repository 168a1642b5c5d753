//! `fences`: what a process-wide ("heavy") barrier costs the thread that needs it (Paul
//! Khuong, "Preemption Is GC for Memory Reordering", 2019: membarrier's RCU flavour 25–50 ms,
//! expedited IPIs ~0.04 ms, interrupt-driven "prepaid" barriers 0–4 ms under load, a
//! geometric-mean 23.8 × faster than unexpedited membarrier).
//!
//! Each barrier is measured on the idle machine and with one nice-19 busy thread of this
//! process per CPU (so IPI barriers have someone to interrupt): mprotect IPIs, expedited and
//! global membarrier, and prepaid waits per source (eBPF, /proc; a wait reaching its 200 ms
//! deadline forces a heavy barrier, counted). Coalescing: K threads call `fence::heavy()` at
//! once; latency of one call, and barriers issued per call. A run is a batch; its value is the
//! batch's median, and every latency is pooled for the p99.
//!
//! Before each global membarrier and prepaid wait the thread spins a random 0–5 ms, so waits
//! start at a random phase of the timer tick and of RCU's grace periods, as a reclaimer's
//! would (back to back, each would start just after the event that ended the previous one).
//!
//! The rivals are the barrier methods and prepaid sources that work on this machine
//! ([`available`] tries each once; the others get a note): each takes part in the idle and
//! the loaded section. The coalescing section compares `heavy()` with itself at K callers.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::*};
use std::time::Duration;

use spindle_sync::fence::{self, Method};
use spindle_sync::prepaid::{Completion, PrepaidBarrier, Source};
use spindle_sync::Deadline;

use crate::kit::{median, run_together, spin_ticks, XorShift};
use crate::references::PREEMPTION_BARRIERS;
use crate::runner::{Ctx, Experiment};
use crate::spec::{Claim, Info, Metric, Plan, Sample, Section, Variant};
use crate::sys::rdtsc;

pub struct Fences;

/// One nice-19 busy thread of this process per CPU while `f` runs; `f` starts once all spin.
fn under_load<R>(cpus: &[usize], f: impl FnOnce() -> R) -> R {
    let (stop, started) = (AtomicBool::new(false), AtomicUsize::new(0));
    std::thread::scope(|s| {
        for &cpu in cpus {
            let (stop, started) = (&stop, &started);
            s.spawn(move || {
                crate::sys::pin_current_thread(cpu);
                let _ = rustix::process::nice(19); // per thread on Linux
                started.fetch_add(1, AcqRel);
                let mut i = 0u64;
                while !stop.load(Relaxed) {
                    i = std::hint::black_box(i.wrapping_add(1));
                }
            });
        }
        while started.load(Acquire) < cpus.len() {
            std::thread::yield_now();
        }
        let r = f();
        stop.store(true, Relaxed);
        r
    })
}

/// What one batch does.
#[derive(Clone, Copy)]
enum Op<'a> {
    Barrier(Method),
    /// K concurrent callers of the coalescing `heavy()`, or of one barrier each.
    Callers {
        k: usize,
        coalesced: bool,
    },
    Prepaid(&'a PrepaidBarrier),
}

/// One batch of `n` operations: the sample (median latency in ns, all latencies pooled,
/// forced prepaid waits, barriers per heavy() call).
fn batch(op: Op, n: u64, ticks_per_ns: f64) -> Sample {
    let mut rng = XorShift::new(rdtsc());
    let gap = |rng: &mut XorShift| spin_ticks((rng.below(5_000_000) as f64 * ticks_per_ns) as u64);
    let ns = |t0: u64, t1: u64| t1.wrapping_sub(t0) as f64 / ticks_per_ns;
    let mut lat = Vec::with_capacity(n as usize);
    let mut sample = Sample::new();
    let started = std::time::Instant::now();
    match op {
        Op::Barrier(m) => {
            for _ in 0..n {
                if m == Method::MembarrierGlobal {
                    gap(&mut rng);
                }
                let t0 = rdtsc();
                let ok = fence::barrier(m).is_ok();
                let t1 = rdtsc();
                if ok {
                    lat.push(ns(t0, t1));
                }
            }
        }
        Op::Callers { k, coalesced } => {
            let per_thread = n.div_ceil(k as u64);
            let all = std::sync::Mutex::new(Vec::new());
            let (issued0, calls0) = fence::heavy_counts();
            run_together(k, None, |_| {
                let mut mine = Vec::with_capacity(per_thread as usize);
                for _ in 0..per_thread {
                    let t0 = rdtsc();
                    if coalesced {
                        fence::heavy();
                    } else {
                        let _ = fence::barrier(fence::heavy_method());
                    }
                    mine.push(ns(t0, rdtsc()));
                }
                all.lock().unwrap_or_else(|p| p.into_inner()).extend(mine);
            });
            let (issued1, calls1) = fence::heavy_counts();
            let per_call = if coalesced {
                (issued1 - issued0) as f64 / (calls1 - calls0).max(1) as f64
            } else {
                1.0
            };
            sample = sample.with("per_call", per_call);
            lat = all.into_inner().unwrap_or_else(|p| p.into_inner());
        }
        Op::Prepaid(b) => {
            let mut forced = 0;
            for _ in 0..n {
                gap(&mut rng);
                let t0 = rdtsc();
                let c = b.wait(b.ticket(), Deadline::after(Duration::from_millis(200)));
                lat.push(ns(t0, rdtsc()));
                forced += u64::from(c == Completion::Forced);
            }
            sample = sample.with("forced", forced as f64);
        }
    }
    let m = median(&mut lat.clone());
    // Calibration sizes batches by the operations alone, not by starting the load threads.
    sample
        .took(started.elapsed())
        .with("latency", m)
        .pool("latency", lat)
}

/// A variant whose run is one batch of `op`, under load or not.
#[allow(clippy::too_many_arguments)]
fn batch_variant<'a>(
    section: &'static str,
    id: String,
    label: String,
    op: Op<'a>,
    max: u64,
    loaded: bool,
    cpus: &'a [usize],
    ticks_per_ns: f64,
) -> Variant<'a> {
    let run = move |n| {
        if loaded {
            under_load(cpus, || batch(op, n, ticks_per_ns))
        } else {
            batch(op, n, ticks_per_ns)
        }
    };
    Variant::calibrated(section, id, label, run).max_work(max)
}

/// The barrier methods and prepaid sources that work here, and why the others do not.
struct Available {
    methods: Vec<(&'static str, Method)>,
    sources: Vec<(&'static str, PrepaidBarrier)>,
    notes: Vec<String>,
}

/// Tries every method and prepaid source once.
fn available() -> Available {
    let mut notes = Vec::new();
    let mut methods = Vec::new();
    for (id, m) in [
        ("mprotect", Method::Mprotect),
        ("expedited", Method::MembarrierExpedited),
        ("global", Method::MembarrierGlobal),
    ] {
        match fence::barrier(m) {
            Ok(()) => methods.push((id, m)),
            Err(e) => notes.push(format!("{id} skipped: {e}.")),
        }
    }
    let mut sources = Vec::new();
    for (id, s) in [
        ("prepaid-ebpf", Source::Ebpf),
        ("prepaid-proc", Source::Proc),
    ] {
        match PrepaidBarrier::with_source(s) {
            Ok(b) => sources.push((id, b)),
            Err(e) => notes.push(format!("{id} skipped: {e}.")),
        }
    }
    Available {
        methods,
        sources,
        notes,
    }
}

/// Barrier latency, idle and under load: every method and prepaid source that works here.
fn barrier_sections<'a>(
    plan: &mut Plan<'a>,
    here: &'a Available,
    cpus: &'a [usize],
    ticks_per_ns: f64,
) {
    let (methods, sources) = (&here.methods, &here.sources);
    for (section, title, loaded) in [
        ("idle", "Barrier latency, idle machine", false),
        ("loaded", "Barrier latency, under load", true),
    ] {
        let mut s = Section::new(section, title)
            .metric(Metric::time("latency", "median latency of a batch"))
            .metric(Metric::count("forced", "prepaid waits forced"));
        if methods.iter().any(|m| m.0 == "expedited") {
            s = s.baseline(format!("expedited-{section}"));
        }
        plan.section(s);
        for &(id, m) in methods {
            let max = if m == Method::MembarrierGlobal {
                20
            } else {
                100_000
            };
            plan.variant(batch_variant(
                section,
                format!("{id}-{section}"),
                m.name().into(),
                Op::Barrier(m),
                max,
                loaded,
                cpus,
                ticks_per_ns,
            ));
        }
        for (id, b) in sources {
            plan.variant(batch_variant(
                section,
                format!("{id}-{section}"),
                format!("prepaid via {}", b.source().name()),
                Op::Prepaid(b),
                50,
                loaded,
                cpus,
                ticks_per_ns,
            ));
        }
    }
}

/// K threads calling heavy() at once, under load, `calls` calls per batch.
fn coalescing_section<'a>(plan: &mut Plan<'a>, calls: u64, cpus: &'a [usize], ticks_per_ns: f64) {
    plan.section(
        Section::new(
            "coalescing",
            "Coalescing: K threads calling heavy() at once, under load",
        )
        .baseline("coalesced-1")
        .metric(Metric::time("latency", "median latency of one call"))
        .metric(Metric::ratio("per_call", "barriers issued per call")),
    );
    plan.param("calls per coalescing batch", calls);
    for (k, coalesced) in [(1, true), (2, true), (4, true), (8, true), (8, false)] {
        let (id, label) = if coalesced {
            (
                format!("coalesced-{k}"),
                format!(
                    "heavy() with {k} concurrent caller{}",
                    if k > 1 { "s" } else { "" }
                ),
            )
        } else {
            (
                format!("uncoalesced-{k}"),
                format!("{k} concurrent callers, one barrier each"),
            )
        };
        let op = Op::Callers { k, coalesced };
        plan.variant(
            Variant::calibrated("coalescing", id, label, move |n| {
                under_load(cpus, || batch(op, n, ticks_per_ns))
            })
            .threads(k)
            .work(calls),
        );
    }
}

/// Coalescing must not slow callers down, and where callers can meet (three or more CPUs
/// running them) it must save barriers and time; prepaid vs RCU (the post's). `cpus`: how many
/// CPUs the lab has.
fn claims(plan: &mut Plan<'_>, here: &Available, best: Source, cpus: usize) {
    let (methods, sources) = (&here.methods, &here.sources);
    plan.claim(
        Claim::guarantee(
            "coalesced-8",
            "With 8 concurrent callers, one heavy() call costs at most 2 × a lone caller's",
        )
        .ratio("coalesced-8", "coalesced-1")
        .at_most(2.0),
    );
    if cpus >= 4 {
        plan.claim(
            Claim::guarantee(
                "coalescing-saves-time",
                "With 8 concurrent callers, a coalesced heavy() call takes at most half as long as one barrier per caller",
            )
            .ratio("coalesced-8", "uncoalesced-8")
            .at_most(0.5),
        );
        plan.claim(
            Claim::guarantee(
                "coalescing-saves-barriers",
                "With 8 concurrent callers, heavy() issues at most half a barrier per call",
            )
            .ratio("coalesced-8", "uncoalesced-8")
            .metric("per_call")
            .at_most(0.5),
        );
    } else {
        plan.note("Fewer than 4 CPUs: the coalescing guarantees beyond 'not slower' are not tested (callers share a barrier only when two or more arrive during the same one, which is rare with few CPUs running callers).");
    }
    let best_id = sources
        .iter()
        .find(|(_, b)| b.source() == best)
        .or(sources.first())
        .map(|(id, _)| format!("{id}-loaded"));
    match best_id {
        Some(best_id) if methods.iter().any(|m| m.0 == "global") => {
            plan.claim(Claim::reproduction("prepaid-vs-global", format!("Under load, a prepaid barrier ({best_id}) takes at most 1/10 of membarrier(GLOBAL)'s time"), PREEMPTION_BARRIERS, "geometric mean 23.8 × faster (0.042 ×), 10 × faster in 98 % of observations")
                .ratio(best_id, "global-loaded").at_most(0.1));
        }
        _ => {
            plan.note("Claim prepaid-vs-global not tested: no prepaid source or no membarrier(GLOBAL) here.");
        }
    }
    plan.note(format!("A caller that arrives while a barrier is in flight cannot use that one (it may have started before the caller's writes): callers share a barrier only when two or more arrive during the same one, which gets likelier with more CPUs running callers ({cpus} here; 'barriers issued per call' shows how often it happened)."));
    plan.note("A prepaid barrier completes when every CPU has taken an interrupt or context switch after the ticket, or is idle; the waiting thread's own CPU completes as soon as the waiter sleeps.");
    plan.note("The post (4-way E5-46xx, Linux 4.16): expedited membarrier worst case 0.041 ms idle, 0.076 ms under load; mprotect 0.046 / 0.047 ms; unexpedited membarrier 25–50 ms; barrierd 0–4 ms under load.");
}

impl Experiment for Fences {
    fn info(&self) -> Info {
        Info {
            name: "fences",
            title: "Heavy barriers: membarrier, mprotect IPIs, coalescing, prepaid barriers",
            summary: "latency of process-wide barriers, idle and under load: IPIs, RCU membarrier, coalesced heavy(), prepaid (eBPF, /proc)",
            question: "How long does the cold side of an asymmetric fence wait for a process-wide barrier — by IPI (mprotect, \
                       expedited membarrier), by RCU (global membarrier), or by waiting for interrupts that happen anyway \
                       (prepaid) — on an idle machine and under load, and what does coalescing concurrent callers save?",
            references: &[PREEMPTION_BARRIERS],
            quick_seconds: 24,
        }
    }

    fn run(&self, ctx: &mut Ctx) -> Result<(), String> {
        // Parameters: which methods and prepaid sources work here (say why the others do not).
        let cpus = ctx.cpus().to_vec();
        let cpus = &cpus[..];
        let ticks_per_ns = ctx.machine.tsc_ghz;
        let here = available();
        let mut plan = Plan::new();
        for n in &here.notes {
            plan.note(n.as_str());
        }
        let best = PrepaidBarrier::global().source();
        plan.param("heavy() uses", fence::heavy_method().name());
        plan.param("PrepaidBarrier::global() source", best.name());
        plan.param("load", format!("{} busy thread(s) of this process at nice 19, one pinned to each CPU, started per batch", cpus.len()));
        plan.param("prepaid deadline", "200 ms, then heavy() is forced");
        // Loaded batches start a thread per CPU, and a global membarrier takes tens of ms at
        // least: half-length batches let enough trials fit on 16 cores as on 2.
        plan.shorter_runs(2);

        barrier_sections(&mut plan, &here, cpus, ticks_per_ns);
        // Calls per batch, fixed (not calibrated: with K threads a short batch is dominated by
        // their scheduling, which would make calibration pick a handful of calls): enough for
        // the run target at ~10 µs a call.
        let calls = (ctx.run_target(30).as_nanos() as u64 / 10_000).clamp(16, 20_000);
        coalescing_section(&mut plan, calls, cpus, ticks_per_ns);
        claims(&mut plan, &here, best, cpus.len());
        ctx.measure(plan)
    }
}
