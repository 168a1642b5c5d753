//! `eventcount`: what an event count costs the writer, and how fast it wakes the reader
//! (Paul Khuong, "Preemption Is GC for Memory Reordering", 2019: multi-producer ~30 cycles and
//! single-producer ~8 cycles per increment with no waiter, ~700 more to wake sleepers, on a
//! Xeon E5-46xx with Concurrency Kit's ck_ec).
//!
//! - **signal**: ns per call with nobody waiting. Floors: a release store of a version the
//!   producer keeps in a register (one producer without blocking support: what a non-blocking
//!   ring such as rtrb does to publish its write index) and a bare `lock xadd` (many
//!   producers). A plain volatile increment of a word in memory is shown too, but it is no
//!   floor: cores that rename memory (Zen 2+, Golden Cove+) turn its store-to-load chain into
//!   register moves in some code layouts and not in others. Peers do the least a user must do
//!   to publish a version a sleeping reader would be woken for.
//! - **asleep / spinning**: ns from just before the signal (TSC) to the waiter running again,
//!   waiter and signaller on two CPUs. Asleep: the signal comes 300 µs after the waiter
//!   announced itself. Spinning: about 300 ns after, while a spin-then-sleep waiter still spins.
//!   A run's value is the median of its wakes; every wake is pooled for the p99.
//! - **handoff**: ns per ping-pong round trip between two pinned threads.
//!
//! Spindle's rivals here are its three event counts: `EventCount` (many producers),
//! `SpEventCount` (one producer; on x86-64 no fence, by TSO and the waiter's barrier) and
//! `TwoWordEventCount` (one producer, the seed's two words, a fence per signal: correct under
//! any memory model). On x86-64 the last two side by side show what TSO buys; on AArch64
//! both fence.
//!
//! [`RIVALS`] declares every floor and peer once: its id and, for the signal section and for
//! the wake and hand-off sections, its label there and how to build it (a signal loop over
//! [`Published`], a fresh [`Channel`]). The sections iterate it; a new peer is one entry, plus
//! its signal loop and its arm of `Channel` (the adapter to its API).

use std::hint::black_box;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::*};
use std::time::Duration;

use event_listener::{Event, Listener};
use spindle_sync::eventcount::{EventCount, SpEventCount, TwoWordEventCount};

use crate::kit::{median, run_together, spin_ticks, time, CachePadded, Span};
use crate::references::PREEMPTION_BARRIERS;
use crate::runner::{Ctx, Experiment};
use crate::spec::{Claim, Info, Metric, Plan, Sample, Section, Variant};
use crate::sys::rdtsc;

pub struct EventCounts;

// --- signal with no waiter; `inline(never)` keeps each a separate loop ---------------------

#[inline(never)]
fn plain_loop(c: &mut u64, n: u64) {
    let p: *mut u64 = c;
    for _ in 0..n {
        // SAFETY: `p` comes from a live `&mut u64`.
        unsafe { p.write_volatile(p.read_volatile().wrapping_add(1)) };
    }
}

/// One release store of a register-held version per iteration, in a loop of the same shape
/// as the compiled signal loops (written in asm so that the compiler cannot unroll it into a
/// run of stores, which would measure store throughput instead of a call). The loop starts on
/// a 64-byte boundary, so that where the linker places it cannot change what the floor costs
/// from one build to the next.
#[cfg(target_arch = "x86_64")]
#[inline(never)]
fn store_loop(c: &AtomicU64, n: u64) {
    if n == 0 {
        return;
    }
    let v = c.load(Relaxed);
    // SAFETY: `c` is a live, aligned u64 that only this thread touches during the loop; an
    // aligned `mov` is an atomic (release, on x86-TSO) store.
    unsafe {
        std::arch::asm!(
            ".p2align 6",
            "2:",
            "inc {v}",
            "mov qword ptr [{p}], {v}",
            "dec {n}",
            "jnz 2b",
            p = in(reg) c.as_ptr(),
            v = inout(reg) v => _,
            n = inout(reg) n => _,
            options(nostack),
        );
    }
}

/// The same floor on AArch64: a release store there is `stlr` (a plain `str` is no release).
#[cfg(target_arch = "aarch64")]
#[inline(never)]
fn store_loop(c: &AtomicU64, n: u64) {
    if n == 0 {
        return;
    }
    let v = c.load(Relaxed);
    // SAFETY: `c` is a live, aligned u64 that only this thread touches during the loop; `stlr`
    // is an atomic release store.
    unsafe {
        std::arch::asm!(
            ".p2align 6",
            "2:",
            "add {v}, {v}, #1",
            "stlr {v}, [{p}]",
            "subs {n}, {n}, #1",
            "b.ne 2b",
            p = in(reg) c.as_ptr(),
            v = inout(reg) v => _,
            n = inout(reg) n => _,
            options(nostack),
        );
    }
}

/// Elsewhere: the compiler's release store (it may unroll the loop).
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
#[inline(never)]
fn store_loop(c: &AtomicU64, n: u64) {
    let mut v = c.load(Relaxed);
    for _ in 0..n {
        v += 1;
        c.store(v, Release);
    }
}

#[inline(never)]
fn xadd_loop(c: &AtomicU64, n: u64) {
    for _ in 0..n {
        // black_box keeps the returned value, so this is `lock xadd`, as in the event count.
        black_box(c.fetch_add(2, Release));
    }
}

/// The post's other single-producer option: `xadd` without `lock`, flag tested in the old value.
#[cfg(target_arch = "x86_64")]
#[inline(never)]
fn plain_xadd_loop(c: &AtomicU64, n: u64) {
    let p = c.as_ptr();
    for _ in 0..n {
        let mut v = 1u64;
        // SAFETY: `p` points to a live, aligned u64 that only this thread touches.
        unsafe {
            std::arch::asm!("xadd qword ptr [{p}], {v}", p = in(reg) p, v = inout(reg) v, options(nostack))
        };
        if (v as i64) < 0 {
            black_box(v);
        }
    }
}

/// Elsewhere there is no memory-operand `xadd`: the nearest form of the post's non-atomic
/// read-modify-write is a load, an add and a store of the word, the flag tested in the old
/// value (a floor only: on a weak memory model it is no event count at all).
#[cfg(not(target_arch = "x86_64"))]
#[inline(never)]
fn plain_xadd_loop(c: &AtomicU64, n: u64) {
    let p = c.as_ptr();
    for _ in 0..n {
        // SAFETY: `p` points to a live, aligned u64 that only this thread touches.
        let v = unsafe { p.read_volatile() };
        // SAFETY: as above.
        unsafe { p.write_volatile(v.wrapping_add(1)) };
        if (v as i64) < 0 {
            black_box(v);
        }
    }
}

#[inline(never)]
fn sp_loop(ec: &SpEventCount, n: u64) {
    let mut p = ec.producer().expect("the lab holds no other producer");
    for _ in 0..n {
        p.increment();
    }
}

#[inline(never)]
fn sp2_loop(ec: &TwoWordEventCount, n: u64) {
    let mut p = ec.producer().expect("the lab holds no other producer");
    for _ in 0..n {
        p.increment();
    }
}

#[inline(never)]
fn mp_loop(ec: &EventCount, n: u64) {
    for _ in 0..n {
        ec.increment();
    }
}

#[inline(never)]
fn listener_loop(version: &AtomicU64, event: &Event, n: u64) {
    for _ in 0..n {
        version.store(version.load(Relaxed) + 1, Release);
        event.notify(1);
    }
}

#[inline(never)]
fn std_loop(m: &std::sync::Mutex<u64>, cv: &std::sync::Condvar, n: u64) {
    for _ in 0..n {
        *m.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        cv.notify_one();
    }
}

#[inline(never)]
fn pl_loop(m: &parking_lot::Mutex<u64>, cv: &parking_lot::Condvar, n: u64) {
    for _ in 0..n {
        *m.lock() += 1;
        cv.notify_one();
    }
}

// --- waking: one mechanism seen through the same two operations ----------------------------

/// A published version that one thread waits on and one thread advances.
// An SpEventCount keeps its version on a cache line of its own, so it is the largest variant
// by design; boxing it would add an indirection to what is measured.
#[allow(clippy::large_enum_variant)]
enum Channel {
    Mp(EventCount),
    Sp(SpEventCount),
    Sp2(TwoWordEventCount),
    Listener(AtomicU64, Event),
    Std(std::sync::Mutex<u64>, std::sync::Condvar),
    Pl(parking_lot::Mutex<u64>, parking_lot::Condvar),
    /// The word, and whether each wait has a 1 ms timeout (a timed sleep, for comparison).
    Futex(AtomicU32, bool),
    Spin(AtomicU64),
}

/// Makes a fresh channel.
type Make = fn() -> Channel;

impl Channel {
    /// Blocks (each mechanism its own way) until the version is at least `target`.
    fn wait_for(&self, target: u64) {
        match self {
            Channel::Mp(ec) => loop {
                let v = ec.value();
                if v >= target {
                    return;
                }
                let _ = ec.wait(v, None);
            },
            Channel::Sp(ec) => loop {
                let v = ec.value();
                if v >= target {
                    return;
                }
                let _ = ec.wait(v, None);
            },
            Channel::Sp2(ec) => loop {
                let v = ec.value();
                if v >= target {
                    return;
                }
                let _ = ec.wait(v, None);
            },
            Channel::Listener(version, event) => {
                while version.load(Acquire) < target {
                    let listener = event.listen();
                    if version.load(Acquire) < target {
                        listener.wait();
                    }
                }
            }
            Channel::Std(m, cv) => {
                let mut g = m.lock().unwrap_or_else(|e| e.into_inner());
                while *g < target {
                    g = cv.wait(g).unwrap_or_else(|e| e.into_inner());
                }
            }
            Channel::Pl(m, cv) => {
                let mut g = m.lock();
                while *g < target {
                    cv.wait(&mut g);
                }
            }
            Channel::Futex(word, timed) => loop {
                let v = word.load(Acquire);
                if u64::from(v) >= target {
                    return;
                }
                let deadline =
                    timed.then(|| spindle_sync::Deadline::after(Duration::from_millis(1)));
                spindle_sync::futex::wait(word, v, deadline);
            },
            Channel::Spin(word) => {
                while word.load(Acquire) < target {
                    std::hint::spin_loop();
                }
            }
        }
    }

    /// The signalling side (one thread): publishes versions 1, 2, 3, … in turn.
    fn signaller(&self) -> Box<dyn FnMut(u64) + '_> {
        match self {
            Channel::Mp(ec) => Box::new(move |_| {
                ec.increment();
            }),
            Channel::Sp(ec) => {
                let mut p = ec.producer().expect("one signaller per channel");
                Box::new(move |_| {
                    p.increment();
                })
            }
            Channel::Sp2(ec) => {
                let mut p = ec.producer().expect("one signaller per channel");
                Box::new(move |_| {
                    p.increment();
                })
            }
            Channel::Listener(version, event) => Box::new(move |v| {
                version.store(v, Release);
                event.notify(1);
            }),
            Channel::Std(m, cv) => Box::new(move |v| {
                *m.lock().unwrap_or_else(|e| e.into_inner()) = v;
                cv.notify_one();
            }),
            Channel::Pl(m, cv) => Box::new(move |v| {
                *m.lock() = v;
                cv.notify_one();
            }),
            Channel::Futex(word, _) => Box::new(move |v| {
                word.store(v as u32, Release);
                spindle_sync::futex::wake(word, 1);
            }),
            Channel::Spin(word) => Box::new(move |v| word.store(v, Release)),
        }
    }
}

/// `wakes` wake-ups of a fresh channel; every latency in ns.
fn wake_latencies(
    make: fn() -> Channel,
    asleep: bool,
    wakes: u64,
    pin: Option<&[usize]>,
    ticks_per_ns: f64,
) -> Vec<f64> {
    let ch = make();
    let announced = CachePadded(AtomicU64::new(0));
    let signalled_at = CachePadded(AtomicU64::new(0));
    let latencies = std::sync::Mutex::new(Vec::new());
    run_together(2, pin, |i| {
        if i == 0 {
            let mut signal = ch.signaller();
            for v in 1..=wakes {
                while announced.load(Acquire) < v {
                    std::hint::spin_loop();
                }
                if asleep {
                    std::thread::sleep(Duration::from_micros(300));
                } else {
                    spin_ticks((300.0 * ticks_per_ns) as u64);
                }
                signalled_at.store(rdtsc(), Relaxed);
                signal(v);
            }
        } else {
            let mut mine = Vec::with_capacity(wakes as usize);
            for v in 1..=wakes {
                announced.store(v, Release);
                ch.wait_for(v);
                let t1 = rdtsc();
                // Every signal is a release that the wait acquired: the stamp before it is visible.
                mine.push(t1.saturating_sub(signalled_at.load(Relaxed)) as f64 / ticks_per_ns);
            }
            *latencies.lock().unwrap_or_else(|e| e.into_inner()) = mine;
        }
    });
    latencies.into_inner().unwrap_or_else(|e| e.into_inner())
}

/// `round_trips` ping-pongs between two fresh channels.
fn hand_off(make: fn() -> Channel, round_trips: u64, pin: Option<&[usize]>) -> Span {
    let (ping, pong) = (make(), make());
    run_together(2, pin, |i| {
        let (mine, theirs) = if i == 0 {
            (&ping, &pong)
        } else {
            (&pong, &ping)
        };
        let mut signal = mine.signaller();
        for v in 1..=round_trips {
            if i == 0 {
                signal(v);
                theirs.wait_for(v);
            } else {
                theirs.wait_for(v);
                signal(v);
            }
        }
    })
}

// --- the rivals --------------------------------------------------------------------------

/// What the signal loops publish through, each on cache lines of its own (made once per visit).
#[derive(Default)]
struct Published {
    store: CachePadded<AtomicU64>,
    xadd: CachePadded<AtomicU64>,
    plain_xadd: CachePadded<AtomicU64>,
    sp: CachePadded<SpEventCount>,
    sp2: CachePadded<TwoWordEventCount>,
    mp: CachePadded<EventCount>,
    listener: CachePadded<(AtomicU64, Event)>,
    std_cv: CachePadded<(std::sync::Mutex<u64>, std::sync::Condvar)>,
    pl_cv: CachePadded<(parking_lot::Mutex<u64>, parking_lot::Condvar)>,
}

/// A signal section's run: `n` signals, timed.
type SignalRun<'a> = Box<dyn FnMut(u64) -> Span + 'a>;

/// Builds a rival's signal run over what it publishes through.
type BuildSignal = for<'a> fn(&'a Published) -> SignalRun<'a>;

/// The sections a channel takes part in when the table does not say otherwise.
const WAKE_SECTIONS: &[&str] = &["asleep", "spinning", "handoff"];

/// Its part in the wake and hand-off sections.
struct Wake {
    label: &'static str,
    make: Make,
    sections: &'static [&'static str],
    /// A bare spin needs a CPU of its own on each side: left out when the lab has one.
    needs_two_cpus: bool,
}

/// A floor or a peer: one entry of [`RIVALS`].
struct Rival {
    /// Variant ids are `<section>-<id>`.
    id: &'static str,
    /// The signal section: label, and how to build its loop.
    signal: Option<(&'static str, BuildSignal)>,
    /// The asleep, spinning and hand-off sections.
    wake: Option<Wake>,
}

impl Rival {
    const fn new(id: &'static str) -> Rival {
        Rival {
            id,
            signal: None,
            wake: None,
        }
    }

    /// Takes part in the signal section.
    const fn signal(mut self, label: &'static str, build: BuildSignal) -> Rival {
        self.signal = Some((label, build));
        self
    }

    /// Takes part in the wake and hand-off sections through fresh channels made by `make`.
    const fn wake(mut self, label: &'static str, make: Make) -> Rival {
        self.wake = Some(Wake {
            label,
            make,
            sections: WAKE_SECTIONS,
            needs_two_cpus: false,
        });
        self
    }

    /// Takes part in these of the wake and hand-off sections only (after [`Rival::wake`]).
    const fn only(mut self, sections: &'static [&'static str]) -> Rival {
        if let Some(w) = &mut self.wake {
            w.sections = sections;
        }
        self
    }

    /// Left out of the wake and hand-off sections when the lab has one CPU.
    const fn needs_two_cpus(mut self) -> Rival {
        if let Some(w) = &mut self.wake {
            w.needs_two_cpus = true;
        }
        self
    }

    /// Its label and channel in wake or hand-off section `section`, if it takes part.
    fn in_wake(&self, section: &str, two_cpus: bool) -> Option<(&'static str, Make)> {
        let w = self.wake.as_ref()?;
        (w.sections.contains(&section) && (two_cpus || !w.needs_two_cpus))
            .then_some((w.label, w.make))
    }
}

/// Every floor and peer, in the order of the report's rows. Adding a peer is an entry here,
/// with its signal loop above and its arm of [`Channel`].
const RIVALS: &[Rival] = &[
    Rival::new("store").signal(
        "release store of a register-held version (floor for one producer)",
        |p| Box::new(move |n| time(|| store_loop(&p.store, n))),
    ),
    Rival::new("plain").signal(
        "plain volatile increment in memory (unstable: memory renaming)",
        |_| {
            let mut plain = CachePadded(0u64);
            Box::new(move |n| time(|| plain_loop(&mut plain, n)))
        },
    ),
    Rival::new("xadd").signal("bare lock xadd (floor for many producers)", |p| {
        Box::new(move |n| time(|| xadd_loop(&p.xadd, n)))
    }),
    Rival::new("plain-xadd").signal(
        "xadd without lock + flag test (the post's other option)",
        |p| Box::new(move |n| time(|| plain_xadd_loop(&p.plain_xadd, n))),
    ),
    Rival::new("mp")
        .signal("EventCount increment", |p| {
            Box::new(move |n| time(|| mp_loop(&p.mp, n)))
        })
        .wake("EventCount", || Channel::Mp(EventCount::new())),
    Rival::new("sp")
        .signal("SpEventCount producer increment", |p| {
            Box::new(move |n| time(|| sp_loop(&p.sp, n)))
        })
        .wake("SpEventCount", || Channel::Sp(SpEventCount::new())),
    // The seed's two-word single-producer count: correct by the memory model alone (a fence
    // per signal), what any target runs as is; on x86-64 the comparison that shows what TSO
    // and the waiter's barrier save SpEventCount.
    Rival::new("sp2")
        .signal(
            "TwoWordEventCount producer increment (two words, a full fence)",
            |p| Box::new(move |n| time(|| sp2_loop(&p.sp2, n))),
        )
        .wake("TwoWordEventCount", || {
            Channel::Sp2(TwoWordEventCount::new())
        }),
    Rival::new("listener")
        .signal("event-listener: store version + Event::notify(1)", |p| {
            Box::new(move |n| time(|| listener_loop(&p.listener.0 .0, &p.listener.0 .1, n)))
        })
        .wake("event-listener", || {
            Channel::Listener(AtomicU64::new(0), Event::new())
        }),
    Rival::new("std")
        .signal("std: lock, bump, unlock + Condvar::notify_one", |p| {
            Box::new(move |n| time(|| std_loop(&p.std_cv.0 .0, &p.std_cv.0 .1, n)))
        })
        .wake("std Condvar + Mutex", || {
            Channel::Std(Default::default(), Default::default())
        }),
    Rival::new("pl")
        .signal(
            "parking_lot: lock, bump, unlock + Condvar::notify_one",
            |p| Box::new(move |n| time(|| pl_loop(&p.pl_cv.0 .0, &p.pl_cv.0 .1, n))),
        )
        .wake("parking_lot Condvar + Mutex", || {
            Channel::Pl(Default::default(), Default::default())
        }),
    Rival::new("futex").wake("raw futex wait/wake (floor)", || {
        Channel::Futex(AtomicU32::new(0), false)
    }),
    // The timed futex matters only asleep.
    Rival::new("futex-timed")
        .wake("raw futex wait with a 1 ms timeout", || {
            Channel::Futex(AtomicU32::new(0), true)
        })
        .only(&["asleep"]),
    Rival::new("spin")
        .wake("bare spin on a flag (floor)", || {
            Channel::Spin(AtomicU64::new(0))
        })
        .only(&["spinning", "handoff"])
        .needs_two_cpus(),
];

// --- sections ----------------------------------------------------------------------------

/// Publishing a version with nobody waiting: every rival with a signal loop.
fn signal_section<'a>(plan: &mut Plan<'a>, published: &'a Published) {
    plan.section(
        Section::per_op("signal", "Publish a new version, nobody waiting", "signal")
            .baseline("signal-xadd"),
    );
    for r in RIVALS {
        if let Some((label, build)) = r.signal {
            plan.variant(Variant::per_op(
                "signal",
                format!("signal-{}", r.id),
                label,
                build(published),
            ));
        }
    }
}

/// Wake latency of a waiter asleep and of one still spinning, waiter and signaller on `pin`.
fn wake_sections<'a>(plan: &mut Plan<'a>, pin: Option<&'a [usize]>, ticks_per_ns: f64) {
    for (section, title, asleep) in [
        ("asleep", "Wake a waiter that is asleep", true),
        ("spinning", "Wake a waiter that is still spinning", false),
    ] {
        plan.section(
            Section::new(section, title)
                .baseline(format!("{section}-futex"))
                .metric(Metric::time(
                    "latency",
                    "signal to waiter running, median of a run",
                )),
        );
        for r in RIVALS {
            let Some((label, make)) = r.in_wake(section, pin.is_some()) else {
                continue;
            };
            plan.variant(
                Variant::calibrated(section, format!("{section}-{}", r.id), label, move |n| {
                    let mut l = wake_latencies(make, asleep, n, pin, ticks_per_ns);
                    let m = median(&mut l);
                    Sample::new().with("latency", m).pool("latency", l)
                })
                .threads(2)
                .max_work(100_000),
            );
        }
    }
}

/// Versions handed back and forth between two threads on `pin`.
fn handoff_section<'a>(plan: &mut Plan<'a>, pin: Option<&'a [usize]>) {
    plan.section(
        Section::per_op(
            "handoff",
            "Hand versions back and forth (ping-pong)",
            "round trip",
        )
        .baseline("handoff-futex"),
    );
    for r in RIVALS {
        let Some((label, make)) = r.in_wake("handoff", pin.is_some()) else {
            continue;
        };
        plan.variant(
            Variant::per_op("handoff", format!("handoff-{}", r.id), label, move |n| {
                hand_off(make, n, pin)
            })
            .threads(2),
        );
    }
}

/// What Spindle promises, and the post's single- vs multi-producer figure.
fn claims(plan: &mut Plan<'_>) {
    let g = Claim::guarantee;
    // SpEventCount's signal is a store and a load only where TSO and the waiter's barrier
    // close the window (x86-64); elsewhere it fences, like the two-word count.
    if cfg!(target_arch = "x86_64") {
        plan.claim(
            g(
                "sp-signal",
                "SpEventCount's signal with no waiter costs at most 1.25 × a release store of the version",
            )
            .ratio("signal-sp", "signal-store")
            .at_most(1.25),
        );
        plan.claim(
            g(
                "sp-vs-two-word",
                "On x86-64, SpEventCount's signal (no fence: TSO and the waiter's barrier) costs at most half the two-word count's fenced one",
            )
            .ratio("signal-sp", "signal-sp2")
            .at_most(0.5),
        );
    } else {
        plan.note("Off x86-64 SpEventCount's signal is a store, a full fence and a load (dmb ish on AArch64): x86-TSO and the waiter's barrier are what let it drop the fence there, so its x86 claims ('sp-signal', 'sp-vs-two-word') are not made here; TwoWordEventCount pays the same fence.");
    }
    plan.claim(
        g(
            "wake-two-word",
            "TwoWordEventCount wakes a sleeping waiter within 1.1 × the raw futex floor",
        )
        .ratio("asleep-sp2", "asleep-futex")
        .at_most(1.1),
    );
    plan.claim(
        g(
            "mp-signal",
            "EventCount's signal with no waiter costs at most 1.1 × a bare lock xadd",
        )
        .ratio("signal-mp", "signal-xadd")
        .at_most(1.1),
    );
    plan.claim(
        g(
            "vs-event-listener",
            "EventCount publishes a version faster than event-listener (store + notify)",
        )
        .ratio("signal-mp", "signal-listener")
        .at_most(1.0),
    );
    plan.claim(
        g(
            "vs-std-condvar",
            "EventCount publishes a version faster than std Mutex + Condvar::notify_one",
        )
        .ratio("signal-mp", "signal-std")
        .at_most(1.0),
    );
    plan.claim(
        g(
            "vs-pl-condvar",
            "EventCount publishes a version faster than parking_lot Mutex + Condvar::notify_one",
        )
        .ratio("signal-mp", "signal-pl")
        .at_most(1.0),
    );
    plan.claim(
        g(
            "wake-mp",
            "EventCount wakes a sleeping waiter within 1.1 × the raw futex floor",
        )
        .ratio("asleep-mp", "asleep-futex")
        .at_most(1.1),
    );
    plan.claim(
        g(
            "wake-sp",
            "SpEventCount wakes a sleeping waiter within 1.1 × the raw futex floor",
        )
        .ratio("asleep-sp", "asleep-futex")
        .at_most(1.1),
    );
    plan.claim(
        Claim::reproduction(
            "sp-vs-mp",
            "The single-producer signal costs at most half the multi-producer one",
            PREEMPTION_BARRIERS,
            "about 8 vs 30 cycles (0.27 ×) with ck_ec",
        )
        .ratio("signal-sp", "signal-mp")
        .at_most(0.5),
    );
    plan.note("The peers' signal is the least a user must do to publish a version that a sleeping reader would be woken for; std's Condvar::notify_one makes a futex system call even with no waiter.");
}

impl Experiment for EventCounts {
    fn info(&self) -> Info {
        Info {
            name: "eventcount",
            title: "Event counts: signal cost, wake latency, hand-off",
            summary: "event counts vs plain/atomic floors, event-listener, std and parking_lot condvars, raw futex",
            question: "What does publishing a new version cost when nobody waits, how quickly does a waiter run again after a \
                       signal — asleep or still spinning — and how fast can two threads hand versions back and forth, with \
                       Spindle's event counts and with what users would otherwise use?",
            references: &[PREEMPTION_BARRIERS],
            quick_seconds: 24,
        }
    }

    fn run(&self, ctx: &mut Ctx) -> Result<(), String> {
        let pair = ctx.cpu_pair();
        let pin = pair.as_ref().map(|p| &p[..]);
        let published = Published::default();
        let mut plan = Plan::new();
        plan.param("threads pinned", match pair {
            Some([a, b]) => format!("signaller on CPU {a}, waiter on CPU {b}"),
            None => "no (one CPU): waiter and signaller time-share it, so wake latencies include scheduling".into(),
        });
        signal_section(&mut plan, &published);
        wake_sections(&mut plan, pin, ctx.machine.tsc_ghz);
        handoff_section(&mut plan, pin);
        claims(&mut plan);
        if ctx.machine.virtualised {
            plan.note("On a virtual machine an idle vCPU is descheduled by the hypervisor, so waking a waiter whose vCPU is idle includes the hypervisor's wake-up; the 'asleep' figures do not separate the two.");
        }
        ctx.measure(plan)
    }
}
