//! Prepaid barriers on real threads: every source this machine offers completes its tickets,
//! and a store-buffering stress test under oversubscription finds no forbidden outcome.
//!
//! No test asserts a duration: deadlines are generous, and how many waits were forced (the
//! deadline passed) is printed, not judged. Run with `--nocapture` to see the counts.

use std::sync::atomic::{compiler_fence, fence, AtomicBool, AtomicU64, Ordering::*};
use std::thread;
use std::time::{Duration, Instant};

use spindle_sync::prepaid::{Completion, PrepaidBarrier, Source, SourceErrorKind};
use spindle_sync::Deadline;

mod common;

/// The kernel release as (major, minor), if readable.
fn kernel_version() -> Option<(u32, u32)> {
    let r = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    let mut it = r.trim().split(['.', '-']);
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

/// The barrier for `source`, or `None` (after printing "skipped: why") when this machine
/// cannot offer it for a reason that is not a bug of ours.
fn barrier(source: Source) -> Option<PrepaidBarrier> {
    match PrepaidBarrier::with_source(source) {
        Ok(b) => {
            assert_eq!(b.source(), source);
            Some(b)
        }
        Err(e) => {
            let old_kernel = kernel_version().is_some_and(|v| v < (5, 12));
            let environmental = match e.kind() {
                SourceErrorKind::NotPermitted
                | SourceErrorKind::NotSupported
                | SourceErrorKind::MissingTracepoint
                | SourceErrorKind::Unreadable => true,
                // The programs need BPF atomics (5.12); a rejection on a newer kernel is ours.
                SourceErrorKind::Rejected => old_kernel,
                SourceErrorKind::Other => false,
            };
            assert!(environmental, "{source:?} failed to load: {e}");
            assert_eq!(e.failed_source(), source);
            println!("skipped {}: {e}", source.name());
            None
        }
    }
}

/// Take `n` tickets, wait for each; every wait must leave its ticket complete. Returns
/// (prepaid, forced).
fn complete_tickets(b: &PrepaidBarrier, n: usize, deadline: Duration) -> (usize, usize) {
    let (mut prepaid, mut forced) = (0, 0);
    let mut last = b.ticket();
    for _ in 0..n {
        let t = b.ticket();
        assert!(t >= last, "tickets go backwards");
        last = t;
        match b.wait(t, Deadline::after(deadline)) {
            Completion::Prepaid => prepaid += 1,
            Completion::Forced => forced += 1,
        }
        assert!(
            b.is_complete(t),
            "{:?}: wait returned, ticket incomplete",
            b.source()
        );
        assert!(b.is_complete(last));
    }
    (prepaid, forced)
}

#[test]
fn ebpf_tickets_complete() {
    let Some(b) = barrier(Source::Ebpf) else {
        return;
    };
    println!("{}", b.describe());
    let started = Instant::now();
    let (prepaid, forced) = complete_tickets(&b, 50, Duration::from_secs(5));
    println!(
        "ebpf: {prepaid} prepaid, {forced} forced, {:?} per wait",
        started.elapsed() / 50
    );
    // The eBPF source must actually work: with a 5 s deadline per wait, a wait completes by
    // itself unless no CPU stamps the map at all.
    assert!(prepaid > 0, "no eBPF wait completed before its deadline");
    assert_eq!(b.stats().0 + b.stats().1, 50);
}

#[test]
fn ebpf_is_complete_becomes_true_without_a_wait() {
    let Some(b) = barrier(Source::Ebpf) else {
        return;
    };
    let t = b.ticket();
    let give_up = Instant::now() + Duration::from_secs(10);
    let mut checks = 0u64;
    while !b.is_complete(t) {
        assert!(Instant::now() < give_up, "ticket never completed by itself");
        checks += 1;
        // Sleeping is a context switch on this CPU; other CPUs stamp on their own.
        thread::sleep(Duration::from_micros(200));
    }
    println!("ebpf: complete after {checks} sleeps of 200 µs");
    // Nothing forced it.
    assert_eq!((b.stats().0, b.stats().1), (0, 0));
    // And no background poll ran, unless some possible CPU is not online: an incomplete
    // check then starts the poller to re-read the online mask (`note_interest`).
    let list = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
    };
    let possible = list("/sys/devices/system/cpu/possible");
    let online = list("/sys/devices/system/cpu/online");
    if possible.is_some() && possible == online {
        assert_eq!(b.stats().2, 0, "a background poll ran");
    } else {
        println!(
            "not checking that no poll ran: possible CPUs {possible:?} vs online {online:?} \
             ({} polls)",
            b.stats().2
        );
    }
}

/// Inside a time namespace that shifts `CLOCK_MONOTONIC` (`unshare --time --monotonic=-5`),
/// eBPF stamps and tickets are on different clocks: the eBPF source must be refused there,
/// and `global()` must fall back. The test re-runs itself under `unshare`; skipped where eBPF
/// does not load anyway or `unshare --time` is unavailable (not root, old kernel or tool).
#[test]
fn ebpf_is_refused_in_a_time_namespace() {
    const CHILD: &str = "SPINDLE_PREPAID_TIMENS_CHILD";
    if std::env::var_os(CHILD).is_some() {
        let offsets = std::fs::read_to_string("/proc/self/timens_offsets").unwrap_or_default();
        println!("child: timens_offsets {offsets:?}");
        let e = PrepaidBarrier::with_source(Source::Ebpf)
            .expect_err("eBPF loaded inside a time namespace with a monotonic offset");
        assert_eq!(e.kind(), SourceErrorKind::NotSupported, "{e}");
        assert!(e.to_string().contains("time namespace"), "{e}");
        let g = PrepaidBarrier::global();
        assert_ne!(g.source(), Source::Ebpf);
        complete_tickets(g, 5, Duration::from_secs(5));
        println!("refused in the time namespace: {e}; global: {}", g.source());
        return;
    }
    if barrier(Source::Ebpf).is_none() {
        return;
    }
    let unshare = |args: &[&str]| {
        std::process::Command::new("unshare")
            .args(["--time", "--monotonic=-5"])
            .args(args)
            .env(CHILD, "1")
            .output()
    };
    match unshare(&["true"]) {
        Ok(o) if o.status.success() => {}
        other => {
            println!("skipped: `unshare --time --monotonic=-5` unavailable: {other:?}");
            return;
        }
    }
    let exe = std::env::current_exe().expect("test binary path");
    let out = unshare(&[
        exe.to_str().expect("UTF-8 path"),
        "ebpf_is_refused_in_a_time_namespace",
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ])
    .expect("run the test under unshare");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    println!("{text}");
    assert!(out.status.success(), "the child failed");
    assert!(
        text.contains("refused in the time namespace"),
        "the child did not run the check"
    );
}

#[test]
fn proc_tickets_complete() {
    let Some(b) = barrier(Source::Proc) else {
        return;
    };
    let started = Instant::now();
    let (prepaid, forced) = complete_tickets(&b, 30, Duration::from_secs(5));
    println!(
        "proc: {prepaid} prepaid, {forced} forced, {:?} per wait, {} polls",
        started.elapsed() / 30,
        b.stats().2
    );
    assert!(prepaid > 0, "no /proc wait completed before its deadline");
}

#[test]
fn heavy_waits_are_forced_and_complete() {
    let b = barrier(Source::Heavy).expect("the heavy source always exists");
    let (prepaid, forced) = complete_tickets(&b, 20, Duration::from_secs(5));
    assert_eq!(forced + prepaid, 20);
    assert!(forced > 0);
    // A forced barrier covers every ticket taken before it.
    let t = b.ticket();
    assert_eq!(
        b.wait(t, Deadline::after(Duration::from_secs(1))),
        Completion::Forced
    );
    assert!(b.is_complete(t));
    // ... and no ticket taken after it: the forced horizon is the clock read before the
    // barrier minus one, and a later ticket is at least that clock read.
    assert!(!b.is_complete(b.ticket()));
}

/// Once `is_complete(t)` returned true it stays true, on any thread and CPU, and every
/// earlier ticket is complete too (the eBPF checker's own-CPU rule and idle flags are what
/// could otherwise flip it back).
#[test]
fn completion_is_permanent_and_covers_earlier_tickets() {
    for s in [Source::Ebpf, Source::Proc, Source::Heavy] {
        let Some(b) = barrier(s) else { continue };
        let earlier = b.ticket();
        let t = b.ticket();
        let _ = b.wait(t, Deadline::after(Duration::from_secs(5)));
        assert!(b.is_complete(t));
        assert!(b.is_complete(earlier), "{}: an earlier ticket", s.name());
        thread::scope(|sc| {
            for _ in 0..3 {
                sc.spawn(|| {
                    for k in 0..200 {
                        assert!(b.is_complete(t), "{}: completion was lost", s.name());
                        if k % 20 == 0 {
                            thread::sleep(Duration::from_micros(100)); // maybe migrate
                        }
                    }
                });
            }
        });
    }
}

#[test]
fn global_picks_a_working_source() {
    let g = PrepaidBarrier::global();
    assert!(std::ptr::eq(g, PrepaidBarrier::global()));
    println!("global: {} ({})", g.source().name(), g.describe());
    complete_tickets(g, 10, Duration::from_secs(5));
    // On a machine where eBPF loads, global() must have picked it.
    if g.source() != Source::Ebpf {
        assert!(PrepaidBarrier::with_source(Source::Ebpf).is_err());
    }
}

#[test]
fn a_passed_deadline_forces_and_completes() {
    for s in [Source::Ebpf, Source::Proc] {
        let Some(b) = barrier(s) else { continue };
        for _ in 0..20 {
            let t = b.ticket();
            // A deadline in the past: either the ticket is already complete or heavy() runs.
            let _ = b.wait(t, Deadline::from_nanos(0));
            assert!(b.is_complete(t));
        }
    }
}

#[test]
fn many_concurrent_waiters_all_complete() {
    for s in [Source::Ebpf, Source::Proc] {
        let Some(b) = barrier(s) else { continue };
        let forced = AtomicU64::new(0);
        thread::scope(|sc| {
            for _ in 0..6 {
                sc.spawn(|| {
                    for k in 0..40 {
                        let t = b.ticket();
                        // Mostly generous deadlines, some very short ones: forced barriers
                        // publish too, and wake the other waiters.
                        let d = if k % 8 == 0 { 100 } else { 5_000_000 };
                        if b.wait(t, Deadline::after(Duration::from_micros(d)))
                            == Completion::Forced
                        {
                            forced.fetch_add(1, Relaxed);
                        }
                        assert!(b.is_complete(t));
                        if k % 10 == 0 {
                            thread::sleep(Duration::from_millis(2)); // let waiters drop to 0
                        }
                    }
                });
            }
        });
        println!(
            "{}: 240 concurrent waits, {} forced",
            s.name(),
            forced.load(Relaxed)
        );
    }
}

/// Per-pair shared words, each on its own cache line.
#[repr(align(128))]
#[derive(Default)]
struct Padded(AtomicU64);

#[derive(Default)]
struct Pair {
    arrive: Padded,
    x: Padded,
    y: Padded,
    h_saw: Padded,
    stop: AtomicBool,
}

/// Both threads of a pair arrive; wait until `target` arrivals in all.
fn rendezvous(p: &Pair, target: u64) {
    p.arrive.0.fetch_add(1, AcqRel);
    let mut spins = 0u32;
    while p.arrive.0.load(Acquire) < target {
        spins += 1;
        if spins < 2000 {
            std::hint::spin_loop();
        } else {
            thread::yield_now(); // oversubscribed: the other side may not be running
        }
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct Litmus {
    rounds: u64,
    forbidden: u64,
    prepaid: u64,
    forced: u64,
}

/// Store buffering between a hot thread `H` (`X = r; compiler fence; r1 = Y`) and a cold
/// thread `C` (`Y = r; t = ticket(); wait(t); rx = X`), started together each round. The
/// barrier forbids `r1 < r && rx < r`: if `H`'s barrier point came after its load of `Y`, its
/// store of `X` was visible before `C` read `X`; if it came before, `H`'s load saw `Y = r`.
/// With `barrier = None`, `C` only runs a `SeqCst` fence, and the outcome is allowed by
/// x86-TSO (the sensitivity check of the harness).
fn store_buffering(
    barrier: Option<&PrepaidBarrier>,
    pairs: usize,
    noise: usize,
    run_for: Duration,
) -> Litmus {
    let all_stop = AtomicBool::new(false);
    let ps: Vec<Pair> = (0..pairs).map(|_| Pair::default()).collect();
    let results: Vec<Litmus> = thread::scope(|sc| {
        for _ in 0..noise {
            sc.spawn(|| {
                let mut v = 1u64;
                while !all_stop.load(Relaxed) {
                    for _ in 0..20_000 {
                        v = v.wrapping_mul(6364136223846793005).wrapping_add(1);
                    }
                    std::hint::black_box(v);
                    thread::yield_now();
                }
            });
        }
        let mut cs = Vec::new();
        for p in &ps {
            // H: the hot side.
            sc.spawn(move || {
                for r in 1.. {
                    rendezvous(p, 4 * r - 2);
                    if p.stop.load(Acquire) {
                        return;
                    }
                    p.x.0.store(r, Relaxed);
                    compiler_fence(SeqCst);
                    let r1 = p.y.0.load(Relaxed);
                    p.h_saw.0.store(r1, Relaxed);
                    rendezvous(p, 4 * r);
                }
            });
            // C: the cold side, which drives the rounds.
            cs.push(sc.spawn(move || {
                let end = Instant::now() + run_for;
                let mut l = Litmus::default();
                for r in 1.. {
                    if Instant::now() >= end {
                        p.stop.store(true, Release);
                    }
                    rendezvous(p, 4 * r - 2);
                    if p.stop.load(Acquire) {
                        return l;
                    }
                    p.y.0.store(r, Relaxed);
                    match barrier {
                        Some(b) => {
                            let t = b.ticket();
                            match b.wait(t, Deadline::after(Duration::from_millis(50))) {
                                Completion::Prepaid => l.prepaid += 1,
                                Completion::Forced => l.forced += 1,
                            }
                        }
                        None => fence(SeqCst),
                    }
                    let rx = p.x.0.load(Relaxed);
                    rendezvous(p, 4 * r);
                    let r1 = p.h_saw.0.load(Relaxed);
                    l.rounds += 1;
                    if r1 < r && rx < r {
                        l.forbidden += 1;
                    }
                }
                unreachable!()
            }));
        }
        let out = cs.into_iter().map(|h| h.join().unwrap()).collect();
        all_stop.store(true, Relaxed);
        out
    });
    results.into_iter().fold(Litmus::default(), |a, l| Litmus {
        rounds: a.rounds + l.rounds,
        forbidden: a.forbidden + l.forbidden,
        prepaid: a.prepaid + l.prepaid,
        forced: a.forced + l.forced,
    })
}

/// One pair per CPU plus one noise thread per CPU: 3 threads per CPU.
fn stress(source: Source) {
    let Some(b) = barrier(source) else {
        return;
    };
    let n = common::per_cpu(1, 2);
    let l = store_buffering(Some(&b), n, n, Duration::from_secs(4));
    println!("{} store buffering: {l:?}", source.name());
    assert!(l.rounds > 0);
    assert_eq!(l.prepaid + l.forced, l.rounds);
    assert_eq!(
        l.forbidden,
        0,
        "{}: {} forbidden outcomes",
        source.name(),
        l.forbidden
    );
}

#[test]
fn store_buffering_ebpf() {
    stress(Source::Ebpf);
}

#[test]
fn store_buffering_proc() {
    stress(Source::Proc);
}

#[test]
fn store_buffering_heavy() {
    stress(Source::Heavy);
}

/// The harness can see the outcome the barrier forbids: without a barrier on H's CPU (C
/// fences only itself) store buffering shows up. Printed, not asserted: how often depends on
/// scheduling.
#[test]
fn store_buffering_harness_sensitivity() {
    let l = store_buffering(None, 2, 0, Duration::from_millis(1500));
    println!("no barrier (C: SeqCst fence only): {l:?}");
    assert!(l.rounds > 0);
}

/// Polling `is_complete` alone (no `wait`) completes tickets on every source that can: for
/// `/proc` the check itself keeps the background thread polling for a while.
#[test]
fn polling_is_complete_alone_makes_progress() {
    for s in [Source::Ebpf, Source::Proc] {
        let Some(b) = barrier(s) else { continue };
        for _ in 0..3 {
            let t = b.ticket();
            let give_up = Instant::now() + Duration::from_secs(10);
            while !b.is_complete(t) {
                assert!(Instant::now() < give_up, "{}: never completed", s.name());
                thread::sleep(Duration::from_millis(1));
            }
        }
        let (prepaid, forced, polls) = b.stats();
        assert_eq!((prepaid, forced), (0, 0), "no wait ran");
        println!(
            "{}: 3 tickets complete by polling, {polls} background polls",
            s.name()
        );
    }
}
