//! `eventcount`: what an event count costs the writer, and how fast it wakes the reader
//! (seed 000, lines 1–180: "MP ~30 cycles, SP ~8 cycles per increment with no waiter, waking
//! up sleepers adds another 700 cycles", on a 2018 Xeon E5-46xx, Linux 4.16).
//!
//! Three sections, all variants interleaved in one random order per trial:
//!
//! 1. **Signal with no waiter**, ns and TSC ticks per call, one thread: the floors — a plain
//!    volatile increment (what a single producer pays without any blocking support) and a bare
//!    `lock xadd` (what a multi-producer counter pays) — then [`SpEventCount`] and
//!    [`EventCount`], and the peers, each doing the least a user must do to *publish a new
//!    version* that a sleeping reader would be woken for: event-listener stores the version and
//!    calls `Event::notify(1)`; std and parking_lot lock their mutex, bump the version, unlock
//!    and `Condvar::notify_one()`.
//! 2. **Wake latency**, ns from just before the signal (TSC) to the waiter running again (TSC),
//!    waiter and signaller pinned to two CPUs; median of a batch per run. *Asleep*: the signaller
//!    waits 300 µs after the waiter announced itself, so every mechanism has gone to sleep (and
//!    the waiter's CPU may be idle). *Spinning*: the signaller signals about 300 ns after the
//!    announcement, while a spin-then-sleep waiter is still spinning. Floors: a raw futex
//!    wait/wake pair, and (spinning) a bare spin on a flag.
//! 3. **Hand-off**: ping-pong round trips between two pinned threads, each waiting for the
//!    other's next version; ns per round trip.
//!
//! Claims: see `claims()`.

use std::hint::black_box;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::*};
use std::time::Duration;

use event_listener::{Event, Listener};
use spindle_sync::eventcount::{EventCount, SpEventCount};

use super::{Experiment, ExperimentInfo};
use crate::harness::{
    per_op, run_together, run_trials, Budget, Claim, Ctx, Measurement, Profile, Relation, Summary,
    Variant,
};
use crate::report::{Bar, ExperimentResult, Figure, Param, Reference, VariantResult};
use crate::sys::rdtsc;

pub struct EventCountExperiment;

/// Keeps each shared word on its own cache lines.
#[repr(align(128))]
struct Padded<T>(T);

// ---------------------------------------------------------------------------------------------
// Section 1: signal with no waiter. `inline(never)` keeps each a separate loop.

#[inline(never)]
fn plain_loop(c: &mut u64, n: u64) {
    let p: *mut u64 = c;
    for _ in 0..n {
        // SAFETY: `p` comes from a live `&mut u64`.
        unsafe { p.write_volatile(p.read_volatile().wrapping_add(1)) };
    }
}

#[inline(never)]
fn xadd_loop(c: &AtomicU64, n: u64) {
    for _ in 0..n {
        // black_box keeps the returned value, so this is `lock xadd`, as in the event count.
        black_box(c.fetch_add(2, Release));
    }
}

/// The seed's other single-producer option: `xadd` without `lock`, flag tested in the old
/// value. Not what SpEventCount uses; here to show why (see its module documentation).
#[inline(never)]
fn plain_xadd_loop(c: &AtomicU64, n: u64) {
    let p = c.as_ptr();
    for _ in 0..n {
        let mut v = 1u64;
        // SAFETY: `p` points to a live, aligned u64 that only this thread touches.
        unsafe {
            std::arch::asm!("xadd qword ptr [{p}], {v}", p = in(reg) p, v = inout(reg) v, options(nostack));
        }
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
fn std_condvar_loop(m: &std::sync::Mutex<u64>, cv: &std::sync::Condvar, n: u64) {
    for _ in 0..n {
        *m.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        cv.notify_one();
    }
}

#[inline(never)]
fn pl_condvar_loop(m: &parking_lot::Mutex<u64>, cv: &parking_lot::Condvar, n: u64) {
    for _ in 0..n {
        *m.lock() += 1;
        cv.notify_one();
    }
}

// ---------------------------------------------------------------------------------------------
// Sections 2 and 3: one waiting mechanism, seen through the same two operations.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Mp,
    Sp,
    Listener,
    StdCondvar,
    PlCondvar,
    Futex,
    FutexTimed,
    Spin,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Mp => "EventCount",
            Kind::Sp => "SpEventCount",
            Kind::Listener => "event-listener",
            Kind::StdCondvar => "std Condvar + Mutex",
            Kind::PlCondvar => "parking_lot Condvar + Mutex",
            Kind::Futex => "raw futex wait/wake (floor)",
            Kind::FutexTimed => "raw futex wait with a 1 ms timeout/wake",
            Kind::Spin => "bare spin on a flag (floor)",
        }
    }
}

/// A published version that one thread waits on and one thread advances.
enum Channel {
    Mp(EventCount),
    Sp(SpEventCount),
    Listener(AtomicU64, Event),
    StdCondvar(std::sync::Mutex<u64>, std::sync::Condvar),
    PlCondvar(parking_lot::Mutex<u64>, parking_lot::Condvar),
    /// The word, and whether each wait has a 1 ms timeout (as SpEventCount's first naps do).
    Futex(AtomicU32, bool),
    Spin(AtomicU64),
}

impl Channel {
    fn new(kind: Kind) -> Channel {
        match kind {
            Kind::Mp => Channel::Mp(EventCount::new()),
            Kind::Sp => Channel::Sp(SpEventCount::new()),
            Kind::Listener => Channel::Listener(AtomicU64::new(0), Event::new()),
            Kind::StdCondvar => {
                Channel::StdCondvar(std::sync::Mutex::new(0), std::sync::Condvar::new())
            }
            Kind::PlCondvar => {
                Channel::PlCondvar(parking_lot::Mutex::new(0), parking_lot::Condvar::new())
            }
            Kind::Futex => Channel::Futex(AtomicU32::new(0), false),
            Kind::FutexTimed => Channel::Futex(AtomicU32::new(0), true),
            Kind::Spin => Channel::Spin(AtomicU64::new(0)),
        }
    }

    /// Block (each mechanism its own way) until the version is at least `target`.
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
            Channel::Listener(version, event) => loop {
                if version.load(Acquire) >= target {
                    return;
                }
                let listener = event.listen();
                if version.load(Acquire) >= target {
                    return;
                }
                listener.wait();
            },
            Channel::StdCondvar(m, cv) => {
                let mut g = m.lock().unwrap_or_else(|e| e.into_inner());
                while *g < target {
                    g = cv.wait(g).unwrap_or_else(|e| e.into_inner());
                }
            }
            Channel::PlCondvar(m, cv) => {
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
            Channel::Listener(version, event) => Box::new(move |v| {
                version.store(v, Release);
                event.notify(1);
            }),
            Channel::StdCondvar(m, cv) => Box::new(move |v| {
                *m.lock().unwrap_or_else(|e| e.into_inner()) = v;
                cv.notify_one();
            }),
            Channel::PlCondvar(m, cv) => Box::new(move |v| {
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

/// Busy-wait for about `ticks` TSC ticks.
fn spin_ticks(ticks: u64) {
    let start = rdtsc();
    while rdtsc().wrapping_sub(start) < ticks {
        std::hint::spin_loop();
    }
}

/// Wake latency: `samples` wakes; returns the median in ns (and ticks).
fn wake_latency(
    kind: Kind,
    asleep: bool,
    samples: u64,
    cpus: Option<&[usize]>,
    ticks_per_ns: f64,
) -> Measurement {
    let ch = Channel::new(kind);
    let announced = Padded(AtomicU64::new(0));
    let signalled_at = Padded(AtomicU64::new(0));
    let latencies = std::sync::Mutex::new(Vec::with_capacity(samples as usize));
    run_together(2, cpus, |i| {
        if i == 0 {
            let mut signal = ch.signaller();
            for v in 1..=samples {
                while announced.0.load(Acquire) < v {
                    std::hint::spin_loop();
                }
                if asleep {
                    std::thread::sleep(Duration::from_micros(300));
                } else {
                    spin_ticks((300.0 * ticks_per_ns) as u64);
                }
                signalled_at.0.store(rdtsc(), Relaxed);
                signal(v);
            }
        } else {
            let mut mine = Vec::with_capacity(samples as usize);
            for v in 1..=samples {
                announced.0.store(v, Release);
                ch.wait_for(v);
                let t1 = rdtsc();
                // Every mechanism's signal is a release that the wait acquired, so the
                // timestamp stored before it is visible.
                mine.push(t1.saturating_sub(signalled_at.0.load(Relaxed)) as f64);
            }
            *latencies.lock().unwrap() = mine;
        }
    });
    let mut l = latencies.into_inner().unwrap();
    l.sort_by(f64::total_cmp);
    let median_ticks = l[l.len() / 2];
    Measurement {
        value: median_ticks / ticks_per_ns,
        ticks: Some(median_ticks),
    }
}

/// Hand-off: `round_trips` ping-pongs; ns (and ticks) per round trip.
fn hand_off(kind: Kind, round_trips: u64, cpus: Option<&[usize]>) -> Measurement {
    let ping = Channel::new(kind);
    let pong = Channel::new(kind);
    let t = run_together(2, cpus, |i| {
        if i == 0 {
            let mut signal = ping.signaller();
            for v in 1..=round_trips {
                signal(v);
                pong.wait_for(v);
            }
        } else {
            let mut signal = pong.signaller();
            for v in 1..=round_trips {
                ping.wait_for(v);
                signal(v);
            }
        }
    });
    Measurement {
        value: t.elapsed.as_nanos() as f64 / round_trips as f64,
        ticks: Some(t.ticks as f64 / round_trips as f64),
    }
}

/// Which section a variant belongs to, by id prefix.
fn section(id: &str) -> (&'static str, &'static str) {
    if id.starts_with("signal-") {
        ("Signal with no waiter", "ns per signal")
    } else if id.starts_with("asleep-") {
        (
            "Wake latency, waiter asleep",
            "ns from signal to waiter running (median)",
        )
    } else if id.starts_with("spinning-") {
        (
            "Wake latency, waiter still spinning",
            "ns from signal to waiter running (median)",
        )
    } else {
        ("Hand-off", "ns per round trip")
    }
}

/// The seed's cycle counts (2018 Xeon), for orientation only.
const SEED_NOTE: &str = "Seed 000 (Concurrency Kit's ck_ec on a Xeon E5-46xx, Linux 4.16): about 30 cycles for a \
    multi-producer increment with no waiter, about 8 for the single-producer one, and about 700 more cycles to \
    wake sleepers.";

fn claims() -> Vec<Claim> {
    vec![
        Claim::ratio(
            "sp-signal",
            "SpEventCount's signal with no waiter costs at most 1.25 × a plain volatile increment",
            "signal-sp",
            "signal-plain",
            Relation::AtMost(1.25),
        ),
        Claim::ratio(
            "mp-signal",
            "EventCount's signal with no waiter costs at most 1.1 × a bare lock xadd",
            "signal-mp",
            "signal-xadd",
            Relation::AtMost(1.1),
        ),
        Claim::ratio(
            "vs-event-listener",
            "EventCount publishes a version faster than event-listener (store + notify)",
            "signal-mp",
            "signal-listener",
            Relation::AtMost(1.0),
        ),
        Claim::ratio(
            "vs-std-condvar",
            "EventCount publishes a version faster than std Mutex + Condvar::notify_one",
            "signal-mp",
            "signal-std",
            Relation::AtMost(1.0),
        ),
        Claim::ratio(
            "vs-pl-condvar",
            "EventCount publishes a version faster than parking_lot Mutex + Condvar::notify_one",
            "signal-mp",
            "signal-pl",
            Relation::AtMost(1.0),
        ),
        Claim::ratio(
            "wake-mp",
            "EventCount wakes a sleeping waiter within 1.1 × the raw futex floor",
            "asleep-mp",
            "asleep-futex",
            Relation::AtMost(1.1),
        ),
        Claim::ratio(
            "wake-sp",
            "SpEventCount wakes a sleeping waiter within 1.1 × the raw futex floor",
            "asleep-sp",
            "asleep-futex",
            Relation::AtMost(1.1),
        ),
    ]
}

impl Experiment for EventCountExperiment {
    fn info(&self) -> ExperimentInfo {
        ExperimentInfo {
            name: "eventcount",
            title: "Event counts: signal cost, wake latency, hand-off",
            seed: "000",
            summary: "event counts vs plain/atomic floors, event-listener, std and parking_lot condvars, raw futex",
        }
    }

    fn run(&self, ctx: &mut Ctx) -> Result<ExperimentResult, String> {
        let (signals, wakes, round_trips, budget) = match ctx.profile {
            Profile::Smoke => (
                1u64 << 10,
                3,
                20,
                Budget {
                    min_trials: 3,
                    max_trials: 4,
                    max_time: Duration::from_secs(20),
                },
            ),
            Profile::Quick => (
                1u64 << 18,
                15,
                400,
                Budget {
                    min_trials: 12,
                    max_trials: 150,
                    max_time: Duration::from_secs(45),
                },
            ),
            Profile::Full => (
                1u64 << 20,
                31,
                2000,
                Budget {
                    min_trials: 30,
                    max_trials: 300,
                    max_time: Duration::from_secs(400),
                },
            ),
        };
        let cpus: Vec<usize> = ctx.machine.cpus_allowed.iter().take(2).copied().collect();
        let pinned = cpus.len() >= 2;
        let pin = pinned.then_some(cpus.as_slice());
        let ticks_per_ns = ctx.machine.tsc_ghz;

        // Section 1's shared state, each on its own lines.
        let plain_counter = std::cell::RefCell::new(Padded(0u64));
        let xadd_counter = Padded(AtomicU64::new(0));
        let plain_xadd_counter = Padded(AtomicU64::new(0));
        let sp = Padded(SpEventCount::new());
        let mp = Padded(EventCount::new());
        let listener = Padded((AtomicU64::new(0), Event::new()));
        let std_cv = Padded((std::sync::Mutex::new(0u64), std::sync::Condvar::new()));
        let pl_cv = Padded((parking_lot::Mutex::new(0u64), parking_lot::Condvar::new()));
        let (plain_counter, xadd_counter, plain_xadd_counter) =
            (&plain_counter, &xadd_counter, &plain_xadd_counter);
        let (sp, mp, listener, std_cv, pl_cv) = (&sp, &mp, &listener, &std_cv, &pl_cv);

        let mut variants: Vec<Variant> = vec![
            Variant {
                id: "signal-plain",
                label: "plain volatile increment (floor for one producer)".into(),
                threads: 1,
                run: Box::new(move || {
                    let mut c = plain_counter.borrow_mut();
                    per_op(signals, || plain_loop(&mut c.0, signals))
                }),
            },
            Variant {
                id: "signal-xadd",
                label: "bare lock xadd (floor for many producers)".into(),
                threads: 1,
                run: Box::new(move || per_op(signals, || xadd_loop(&xadd_counter.0, signals))),
            },
            Variant {
                id: "signal-plain-xadd",
                label: "xadd without lock + flag test (the seed's other option)".into(),
                threads: 1,
                run: Box::new(move || {
                    per_op(signals, || plain_xadd_loop(&plain_xadd_counter.0, signals))
                }),
            },
            Variant {
                id: "signal-sp",
                label: "SpEventCount producer increment".into(),
                threads: 1,
                run: Box::new(move || per_op(signals, || sp_loop(&sp.0, signals))),
            },
            Variant {
                id: "signal-mp",
                label: "EventCount increment".into(),
                threads: 1,
                run: Box::new(move || per_op(signals, || mp_loop(&mp.0, signals))),
            },
            Variant {
                id: "signal-listener",
                label: "event-listener: store version + Event::notify(1)".into(),
                threads: 1,
                run: Box::new(move || {
                    per_op(signals, || {
                        listener_loop(&listener.0 .0, &listener.0 .1, signals)
                    })
                }),
            },
            Variant {
                id: "signal-std",
                label: "std: lock, bump, unlock + Condvar::notify_one".into(),
                threads: 1,
                run: Box::new(move || {
                    per_op(signals, || {
                        std_condvar_loop(&std_cv.0 .0, &std_cv.0 .1, signals)
                    })
                }),
            },
            Variant {
                id: "signal-pl",
                label: "parking_lot: lock, bump, unlock + Condvar::notify_one".into(),
                threads: 1,
                run: Box::new(move || {
                    per_op(signals, || {
                        pl_condvar_loop(&pl_cv.0 .0, &pl_cv.0 .1, signals)
                    })
                }),
            },
        ];

        let wake_kinds = [
            ("mp", Kind::Mp),
            ("sp", Kind::Sp),
            ("listener", Kind::Listener),
            ("std", Kind::StdCondvar),
            ("pl", Kind::PlCondvar),
            ("futex", Kind::Futex),
        ];
        for (asleep, prefix) in [(true, "asleep"), (false, "spinning")] {
            let mut kinds: Vec<(&str, Kind)> = wake_kinds.to_vec();
            // A bare spin needs its own CPU on each side.
            if !asleep && pinned {
                kinds.push(("spin", Kind::Spin));
            }
            if asleep {
                kinds.push(("futex-timed", Kind::FutexTimed));
            }
            for (short, kind) in kinds {
                let id: &'static str = Box::leak(format!("{prefix}-{short}").into_boxed_str());
                variants.push(Variant {
                    id,
                    label: format!("{prefix}: {}", kind.label()),
                    threads: 2,
                    run: Box::new(move || wake_latency(kind, asleep, wakes, pin, ticks_per_ns)),
                });
            }
        }
        let mut handoff_kinds = wake_kinds.to_vec();
        if pinned {
            handoff_kinds.push(("spin", Kind::Spin));
        }
        for (short, kind) in handoff_kinds {
            let id: &'static str = Box::leak(format!("handoff-{short}").into_boxed_str());
            variants.push(Variant {
                id,
                label: format!("hand-off: {}", kind.label()),
                threads: 2,
                run: Box::new(move || hand_off(kind, round_trips, pin)),
            });
        }

        let claims = claims();
        let trials = run_trials(ctx, &mut variants, &claims, budget);
        drop(variants);

        let eps = ctx.eps;
        let results: Vec<VariantResult> = (0..trials.ids.len())
            .map(|i| {
                let id = trials.ids[i];
                let baseline = match section(id).0 {
                    "Signal with no waiter" => "signal-xadd",
                    "Hand-off" => "handoff-futex",
                    "Wake latency, waiter asleep" => "asleep-futex",
                    _ => "spinning-futex",
                };
                VariantResult {
                    id,
                    label: trials.labels[i].clone(),
                    threads: trials.threads[i],
                    unit: section(id).1.into(),
                    value: Summary::of(&trials.values[i], eps),
                    ticks: Some(Summary::of(&trials.ticks[i], eps)),
                    ratio_to_baseline: Some(Summary::of(&trials.ratios(id, baseline), eps)),
                    reference_ratio: None,
                }
            })
            .collect();

        let mut figures = Vec::new();
        for title in [
            "Signal with no waiter",
            "Wake latency, waiter asleep",
            "Wake latency, waiter still spinning",
            "Hand-off",
        ] {
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
                    .map(|v| Bar::median(v.label.clone(), &v.value))
                    .collect(),
            });
        }
        figures.push(trials.claims_figure());

        let mut notes = vec![
            "Each variant's unit depends on its section (see the unit column); '× baseline' compares it with the \
             section's floor: bare lock xadd for signals, the raw futex for wake-ups and hand-offs."
                .to_string(),
            "The peers' signal is the least a user must do to publish a new version that a sleeping reader would be \
             woken for; std's Condvar::notify_one makes a futex system call even with no waiter."
                .to_string(),
            SEED_NOTE.to_string(),
        ];
        if !pinned {
            notes.push(
                "Fewer than two CPUs are available: waiter and signaller time-share one CPU, so wake latencies \
                 include scheduling."
                    .into(),
            );
        }
        if ctx.machine.virtualised {
            notes.push(
                "On a virtual machine an idle vCPU is descheduled by the hypervisor, so waking a waiter whose vCPU \
                 is idle includes the hypervisor's wake-up; the 'asleep' figures do not separate the two."
                    .into(),
            );
        }

        Ok(ExperimentResult {
            name: "eventcount",
            title: "Event counts: signal cost, wake latency, hand-off",
            seed: "000",
            question: "What does publishing a new version cost when nobody waits, how quickly does a waiter run \
                       again after a signal — asleep, or still spinning — and how fast can two threads hand \
                       versions back and forth, with Spindle's event counts and with what users would otherwise use?"
                .into(),
            unit: "ns (per signal, per wake, per round trip: see each row)".into(),
            baseline: None,
            parameters: vec![
                Param::new("signals per run (section 1)", signals),
                Param::new("wakes per run (median reported)", wakes),
                Param::new("round trips per run", round_trips),
                Param::new(
                    "threads pinned",
                    if pinned { format!("yes, signaller on CPU {}, waiter on CPU {}", cpus[0], cpus[1]) } else { "no".into() },
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
            reference: Some(Reference {
                source: "seed 000, event counts (Concurrency Kit ck_ec)".into(),
                machine: "Intel Xeon E5-46xx, Linux 4.16 (cycle counts, for orientation)".into(),
            }),
            figures,
            notes,
        })
    }
}
