//! `contention`: the cost of incrementing a counter — plainly, with a fence, atomically, with
//! a lock — from one thread and from two, and what sharing a cache line costs (Martin
//! Thompson, "Single Writer Principle", 2011: 500 M increments on a 2.4 GHz Westmere).
//!
//! ns per increment = wall time of a run (first thread's start to last thread's end) / total
//! increments, so two threads splitting the work in parallel can cost *less* per increment
//! than one. Two-thread variants are pinned to two CPUs when there are two.
//!
//! One section, `inc`; its variants are declared once each, in three groups: the kernels on one
//! shared counter (a table), the mutexes, and single writers on counters of their own.

use std::sync::atomic::{fence, AtomicU64, Ordering::*};

use crate::kit::{run_together, CachePadded, Span};
use crate::references::SINGLE_WRITER;
use crate::runner::{Ctx, Experiment};
use crate::spec::{Claim, Info, Plan, Section, Variant};

pub struct Contention;

/// An increment loop over one counter.
type Kernel = fn(&AtomicU64, u64);

/// Two counters in one 64-byte cache line.
#[repr(C, align(64))]
struct OneLine {
    a: AtomicU64,
    b: AtomicU64,
}

// The kernels. `inline(never)` keeps each a separate loop the compiler cannot merge or hoist;
// atomics keep every increment a real memory operation.

/// Load and store, no read-modify-write: what a single writer needs.
#[inline(never)]
fn plain(c: &AtomicU64, n: u64) {
    for _ in 0..n {
        c.store(c.load(Relaxed).wrapping_add(1), Relaxed);
    }
}

/// The same, followed by a full fence (MFENCE): the cost of a "volatile" store.
#[inline(never)]
fn fenced(c: &AtomicU64, n: u64) {
    for _ in 0..n {
        c.store(c.load(Relaxed).wrapping_add(1), Relaxed);
        fence(SeqCst);
    }
}

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

/// Runs `body(thread, share)` on `threads` threads splitting `n` increments, and checks that
/// `count()` saw every one of them (a lost increment is a broken kernel, not a measurement).
fn split(
    threads: u64,
    pin: Option<&[usize]>,
    n: u64,
    count: impl Fn() -> u64,
    body: impl Fn(usize, u64) + Sync,
) -> Span {
    let share = (n / threads).max(1);
    let before = count();
    let span = run_together(threads as usize, pin, |i| body(i, share));
    let seen = count().wrapping_sub(before);
    assert_eq!(
        seen,
        share * threads,
        "increments were lost: the kernel or the harness is broken"
    );
    span
}

/// One counter, incremented by one or two threads with each kernel.
fn counter_variants<'a>(plan: &mut Plan<'a>, shared: &'a AtomicU64, pin: Option<&'a [usize]>) {
    let counter = move || shared.load(Relaxed);
    // (id, label, threads, the post's time in ms for 500 M increments (one plain thread:
    // 300 ms), kernel).
    let on_counter: [(&str, &str, u64, Option<f64>, Kernel); 6] = [
        (
            "plain",
            "one thread, plain increment",
            1,
            Some(300.0),
            plain,
        ),
        (
            "fence",
            "one thread, increment + full fence",
            1,
            Some(4700.0),
            fenced,
        ),
        (
            "xadd",
            "one thread, atomic add (lock add)",
            1,
            None,
            atomic_add,
        ),
        ("cas", "one thread, CAS loop", 1, Some(5700.0), cas),
        (
            "xadd-2t",
            "two threads, atomic add, one counter",
            2,
            None,
            atomic_add,
        ),
        (
            "cas-2t",
            "two threads, CAS loop, one counter",
            2,
            Some(18000.0),
            cas,
        ),
    ];
    for (id, label, threads, ms, kernel) in on_counter {
        plan.variant(
            Variant::per_op("inc", id, label, move |n| {
                split(threads, pin, n, counter, |_, k| kernel(shared, k))
            })
            .threads(threads as usize)
            .reference(ms.map(|t| t / 300.0)),
        );
    }
}

/// One counter behind a std and a parking_lot mutex, one and two threads.
fn mutex_variants<'a>(
    plan: &mut Plan<'a>,
    std_lock: &'a std::sync::Mutex<u64>,
    pl_lock: &'a parking_lot::Mutex<u64>,
    pin: Option<&'a [usize]>,
) {
    let std_count = move || *std_lock.lock().unwrap_or_else(|e| e.into_inner());
    let pl_count = move || *pl_lock.lock();
    for threads in [1, 2] {
        let (suffix, who) = if threads == 1 {
            ("", "one thread")
        } else {
            ("-2t", "two threads")
        };
        let reference = Some(if threads == 1 { 10_000.0 } else { 118_000.0 } / 300.0);
        plan.variant(
            Variant::per_op(
                "inc",
                format!("std-mutex{suffix}"),
                format!("{who}, std Mutex"),
                move |n| split(threads, pin, n, std_count, |_, k| std_mutex(std_lock, k)),
            )
            .threads(threads as usize)
            .reference(reference),
        );
        plan.variant(
            Variant::per_op(
                "inc",
                format!("pl-mutex{suffix}"),
                format!("{who}, parking_lot Mutex"),
                move |n| split(threads, pin, n, pl_count, |_, k| pl_mutex(pl_lock, k)),
            )
            .threads(threads as usize)
            .reference(reference),
        );
    }
}

/// Two single writers, on counters of their own: padded apart, or in one cache line.
fn own_counter_variants<'a>(
    plan: &mut Plan<'a>,
    own: &'a [CachePadded<AtomicU64>; 2],
    line: &'a OneLine,
    pin: Option<&'a [usize]>,
) {
    let own_sum = move || own[0].load(Relaxed) + own[1].load(Relaxed);
    let line_sum = move || line.a.load(Relaxed) + line.b.load(Relaxed);
    plan.variant(
        Variant::per_op(
            "inc",
            "padded-2t",
            "two threads, own padded counters",
            move |n| split(2, pin, n, own_sum, |i, k| plain(&own[i], k)),
        )
        .threads(2),
    );
    plan.variant(
        Variant::per_op(
            "inc",
            "shared-line-2t",
            "two threads, own counters, one cache line",
            move |n| split(2, pin, n, line_sum, |i, k| plain([&line.a, &line.b][i], k)),
        )
        .threads(2),
    );
}

/// The post's figures, as ratios within a trial.
fn claims(plan: &mut Plan<'_>) {
    let repro = |id, statement: &str, figure: &str| {
        Claim::reproduction(id, statement, SINGLE_WRITER, figure)
    };
    plan.claim(
        repro(
            "fence-cost",
            "A full fence per increment costs at least 5 × a plain increment",
            "15.7 × (4 700 ms vs 300 ms)",
        )
        .ratio("fence", "plain")
        .at_least(5.0),
    );
    plan.claim(
        repro(
            "cas-contended",
            "Two threads CAS-ing one counter pay at least 3 × more per increment than one thread",
            "3.2 × (18 000 ms vs 5 700 ms)",
        )
        .ratio("cas-2t", "cas")
        .at_least(3.0),
    );
    plan.claim(
        repro(
            "lock-contended",
            "Two threads on one std Mutex pay at least 2 × more per increment than one thread",
            "11.8 × (118 000 ms vs 10 000 ms)",
        )
        .ratio("std-mutex-2t", "std-mutex")
        .at_least(2.0),
    );
    plan.claim(repro("single-writer", "Two single writers on padded counters cost at most 1.2 × one plain writer per increment", "the single writer principle: no contention, no extra cost").ratio("padded-2t", "plain").at_most(1.2));
    plan.claim(
        repro(
            "false-sharing",
            "Two writers sharing one cache line cost at least 2 × padded single writers",
            "contention on a shared line costs as much as on shared data",
        )
        .ratio("shared-line-2t", "padded-2t")
        .at_least(2.0),
    );
    plan.note("The post's Java 'lock' is compared with both std and parking_lot mutexes; its 'memory barrier' with a store followed by a full fence.");
}

impl Experiment for Contention {
    fn info(&self) -> Info {
        Info {
            name: "contention",
            title: "The cost of contention",
            summary: "increment a counter: plain, fenced, atomic, CAS, locks; one and two threads; single writer vs false sharing",
            question: "What does it cost to increment a shared counter — plainly, with a fence, atomically, with a lock — \
                       from one thread and from two, and what does sharing a cache line cost?",
            references: &[SINGLE_WRITER],
            quick_seconds: 16,
        }
    }

    fn run(&self, ctx: &mut Ctx) -> Result<(), String> {
        // Parameters.
        let pair = ctx.cpu_pair();
        let pin = pair.as_ref().map(|p| &p[..]);

        // State, each on its own cache lines.
        let shared = CachePadded(AtomicU64::new(0));
        let own = [
            CachePadded(AtomicU64::new(0)),
            CachePadded(AtomicU64::new(0)),
        ];
        let line = OneLine {
            a: AtomicU64::new(0),
            b: AtomicU64::new(0),
        };
        let std_lock = CachePadded(std::sync::Mutex::new(0u64));
        let pl_lock = CachePadded(parking_lot::Mutex::new(0u64));

        let mut plan = Plan::new();
        plan.param(
            "threads pinned",
            match pair {
                Some([a, b]) => format!("yes: two-thread variants on CPUs {a} and {b}"),
                None => "no (one CPU): the two-thread variants time-share it".into(),
            },
        );
        plan.section(
            Section::per_op("inc", "Incrementing a 64-bit counter", "increment").baseline("plain"),
        );
        counter_variants(&mut plan, &shared, pin);
        mutex_variants(&mut plan, &std_lock, &pl_lock, pin);
        own_counter_variants(&mut plan, &own, &line, pin);
        claims(&mut plan);
        if ctx.machine.virtualised {
            plan.note("On a virtual machine, where the hypervisor places the two vCPUs can change from run to run, and with it every two-thread figure: the fingerprint's cache-line round trip says how far apart they were.");
        }
        ctx.measure(plan)
    }
}
