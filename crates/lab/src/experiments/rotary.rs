//! `rotary`: seed 001's SWMR rotary set (`spindle_sync::RotarySet`) against what a program
//! would otherwise use to hand items out round-robin to reader threads: a
//! `Mutex<VecDeque>` (pop the front, push it back) and an `RwLock<Vec>` with an atomic cursor
//! (std's locks). The seed built it for decoder threads that must never wait because a
//! writer was preempted inside a mutex.
//!
//! - **dispatch**: one reader per CPU pulls for the trial's time while one writer removes an
//!   item and inserts it again, without pause (a busy writer): nanoseconds per pull, all
//!   readers together (trial time × readers / pulls).
//! - **stall**: the same readers time every pull (`Instant`, a few tens of ns of its own)
//!   while the writer makes one update a third of the way in; in the *stalled* variants it
//!   stops for [`PAUSE`] in the middle of the update (the peers: holding the lock their
//!   readers need; the rotary set: under its writer lock, after unlinking the item and before
//!   the head's tag step, through `remove_pausing`), in the *calm* ones it does not. Metrics:
//!   the readers' p99.9 and longest pull. The rotary set's update is two critical sections
//!   (remove, then insert, the remove walking the ring and its reclaims paying heavy
//!   barriers); the peers' is one.
//!   This section runs one reader fewer than there are CPUs (at least one), so that the
//!   writer has a CPU of its own. With one reader per CPU, the writer's wake-ups (to start
//!   its update, and after its pause) took a reader's CPU, and some trials of every
//!   contestant, calm ones included, had a reader off its CPU for up to a scheduler tick: the
//!   longest pull then timed the scheduler, not the set, and the claims on it stayed
//!   undecided.
//!
//! Items are `u64` ids, [`ITEMS`] of them.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::*};
use std::sync::{Barrier, Mutex, RwLock};
use std::time::{Duration, Instant};

use spindle_sync::RotarySet;

use crate::results::Profile;
use crate::runner::{Ctx, Experiment};
use crate::spec::{Claim, Info, Metric, Plan, Sample, Section, Variant};

pub struct Rotary;

const ITEMS: u64 = 16;
/// How long the stalled writer stops inside its critical section.
const PAUSE: Duration = Duration::from_millis(10);

#[derive(Clone, Copy, PartialEq)]
enum Who {
    Rotary,
    Mutex,
    RwLock,
}

const WHO: [Who; 3] = [Who::Rotary, Who::Mutex, Who::RwLock];

impl Who {
    fn id(self) -> &'static str {
        match self {
            Who::Rotary => "rotary",
            Who::Mutex => "mutex",
            Who::RwLock => "rwlock",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Who::Rotary => "spindle RotarySet pull_head",
            Who::Mutex => "Mutex<VecDeque>: pop front, push back",
            Who::RwLock => "RwLock<Vec> read lock + atomic cursor",
        }
    }
}

/// One contestant's set of ids.
enum Set {
    Rotary(Box<RotarySet<u64>>),
    Mutex(Mutex<VecDeque<u64>>),
    RwLock(RwLock<Vec<u64>>, AtomicUsize),
}

impl Set {
    fn new(who: Who) -> Set {
        let ids = 0..ITEMS;
        match who {
            Who::Rotary => {
                let s = Box::new(RotarySet::new());
                ids.for_each(|i| s.insert(i));
                Set::Rotary(s)
            }
            Who::Mutex => Set::Mutex(Mutex::new(ids.collect())),
            Who::RwLock => Set::RwLock(RwLock::new(ids.collect()), AtomicUsize::new(0)),
        }
    }

    /// Removes `id` and inserts it again, stopping for `pause` inside the critical section.
    fn update(&self, id: u64, pause: Option<Duration>) {
        let stop = || {
            if let Some(p) = pause {
                std::thread::sleep(p);
            }
        };
        match self {
            Set::Rotary(s) => {
                s.remove_pausing(|&x| x == id, stop);
                s.insert(id);
            }
            Set::Mutex(m) => {
                let mut q = m.lock().unwrap_or_else(|e| e.into_inner());
                stop();
                q.retain(|&x| x != id);
                q.push_back(id);
            }
            Set::RwLock(l, _) => {
                let mut v = l.write().unwrap_or_else(|e| e.into_inner());
                stop();
                v.retain(|&x| x != id);
                v.push(id);
            }
        }
    }
}

/// A reader's handle: the rotary set's reader, or the peer itself.
enum Pull<'a> {
    Rotary(spindle_sync::rotary::Reader<'a, u64>),
    Mutex(&'a Mutex<VecDeque<u64>>),
    RwLock(&'a RwLock<Vec<u64>>, &'a AtomicUsize),
}

impl Pull<'_> {
    fn of(set: &Set) -> Pull<'_> {
        match set {
            Set::Rotary(s) => Pull::Rotary(s.reader()),
            Set::Mutex(m) => Pull::Mutex(m),
            Set::RwLock(l, c) => Pull::RwLock(l, c),
        }
    }

    /// The next id, round-robin.
    #[inline]
    fn pull(&mut self) -> Option<u64> {
        match self {
            Pull::Rotary(r) => r.pull_head().copied(),
            Pull::Mutex(m) => {
                let mut q = m.lock().unwrap_or_else(|e| e.into_inner());
                let x = q.pop_front()?;
                q.push_back(x);
                Some(x)
            }
            Pull::RwLock(l, c) => {
                let v = l.read().unwrap_or_else(|e| e.into_inner());
                (!v.is_empty()).then(|| v[c.fetch_add(1, Relaxed) % v.len()])
            }
        }
    }
}

/// `readers` threads pull from `set` for `span` while one writer updates it: busily
/// (`stall == None`: ns per pull), or once a third of the way in, stopping for the given
/// pause or not (`Some(pause)`: the readers' p99.9 and longest pull).
fn trial(set: &Set, readers: usize, span: Duration, stall: Option<Option<Duration>>) -> Sample {
    let (stop, start) = (AtomicBool::new(false), Barrier::new(readers + 1));
    let timed = stall.is_some();
    let runs: Vec<(u64, Vec<u32>)> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..readers)
            .map(|_| {
                let (stop, start) = (&stop, &start);
                s.spawn(move || {
                    let mut p = Pull::of(set);
                    let (mut n, mut lat) = (0u64, Vec::new());
                    start.wait();
                    while !stop.load(Relaxed) {
                        if timed {
                            let t = Instant::now();
                            std::hint::black_box(p.pull());
                            lat.push(t.elapsed().as_nanos().min(u32::MAX as u128) as u32);
                        } else {
                            std::hint::black_box(p.pull());
                        }
                        n += 1;
                    }
                    (n, lat)
                })
            })
            .collect();
        start.wait();
        let t0 = Instant::now();
        match stall {
            None => {
                let mut id = 0;
                while t0.elapsed() < span {
                    set.update(id % ITEMS, None);
                    id += 1;
                }
            }
            Some(pause) => {
                std::thread::sleep(span / 3);
                set.update(1, pause);
                std::thread::sleep((span * 2 / 3).saturating_sub(t0.elapsed()));
            }
        }
        stop.store(true, Relaxed);
        hs.into_iter()
            .map(|h| h.join().expect("a reader panicked"))
            .collect()
    });
    if !timed {
        let pulls: u64 = runs.iter().map(|r| r.0).sum();
        let ns = span.as_nanos() as f64 * readers as f64 / pulls.max(1) as f64;
        return Sample::new().with("ns", ns);
    }
    let mut lat: Vec<u32> = runs.into_iter().flat_map(|r| r.1).collect();
    let max = lat.iter().copied().max().unwrap_or(0);
    let k = ((lat.len().saturating_sub(1)) as f64 * 0.999).round() as usize;
    let p999 = if lat.is_empty() {
        f64::NAN
    } else {
        f64::from(*lat.select_nth_unstable(k).1)
    };
    Sample::new().with("p999", p999).with("max", f64::from(max))
}

impl Experiment for Rotary {
    fn info(&self) -> Info {
        Info {
            name: "rotary",
            title: "Rotary set: round-robin pulls with a busy writer, and with a writer stalled inside its update",
            summary: "spindle RotarySet vs Mutex<VecDeque> and RwLock<Vec>: ns per pull with a busy writer; readers' p99.9 and longest pull while the writer stops 10 ms inside its critical section",
            question: "What does a round-robin pull cost each reader while a writer keeps changing the set, and do the \
                       readers wait when the writer stops in the middle of an update?",
            references: &[],
            quick_seconds: 12,
        }
    }

    fn run(&self, ctx: &mut Ctx) -> Result<(), String> {
        let readers = ctx.cores().max(1);
        // The stall section leaves the writer a CPU of its own (see the module's header).
        let stall_readers = readers.saturating_sub(1).max(1);
        let span = Duration::from_millis(match ctx.profile {
            Profile::Full => 200,
            _ => 30,
        });
        let sets: Vec<(Who, Set)> = WHO.iter().map(|&w| (w, Set::new(w))).collect();
        let mut plan = Plan::new();
        plan.param("readers", readers);
        plan.param("readers (stall)", stall_readers);
        plan.param("items", ITEMS);
        plan.param("pause", format!("{} ms", PAUSE.as_millis()));
        plan.section(
            Section::new(
                "dispatch",
                "Round-robin pulls while one writer removes and inserts without pause",
            )
            .baseline("dispatch-mutex")
            .metric(Metric::time("ns", "ns per pull (all readers together)")),
        );
        plan.section(
            Section::new("stall", format!("Readers' pulls while the writer makes one update, stopping {} ms inside it or not", PAUSE.as_millis()))
                .baseline("stall-mutex-calm")
                .metric(Metric::time("p999", "pull latency, p99.9"))
                .metric(Metric::time("max", "longest pull")),
        );
        for (who, set) in &sets {
            plan.variant(
                Variant::fixed(
                    "dispatch",
                    format!("dispatch-{}", who.id()),
                    who.label(),
                    move || trial(set, readers, span, None),
                )
                .threads(readers + 1),
            );
            for (state, pause) in [("calm", None), ("stalled", Some(PAUSE))] {
                plan.variant(
                    Variant::fixed(
                        "stall",
                        format!("stall-{}-{state}", who.id()),
                        format!("{}, writer {state}", who.label()),
                        move || trial(set, stall_readers, span, Some(pause)),
                    )
                    .threads(stall_readers + 1),
                );
            }
        }
        claims(&mut plan);
        ctx.measure(plan)
    }
}

fn claims(plan: &mut Plan<'_>) {
    plan.claim(
        Claim::guarantee(
            "rotary-stall-p999",
            "The rotary set's readers' p99.9 pull latency does not move (at most 1.25 ×) when the writer stops 10 ms inside an update",
        )
        .ratio("stall-rotary-stalled", "stall-rotary-calm")
        .metric("p999")
        .at_most(1.25),
    );
    for peer in [Who::Mutex, Who::RwLock] {
        plan.claim(
            Claim::guarantee(
                Box::leak(format!("rotary-stall-max-vs-{}", peer.id()).into_boxed_str()),
                format!(
                    "While the writer stops 10 ms inside an update, the rotary set's longest pull is at most a tenth of {}'s",
                    peer.label()
                ),
            )
            .ratio("stall-rotary-stalled", format!("stall-{}-stalled", peer.id()))
            .metric("max")
            .at_most(0.1),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_contestant_pulls_each_item_in_turn_and_survives_its_writer() {
        for who in WHO {
            let set = Set::new(who);
            let mut p = Pull::of(&set);
            let mut seen: Vec<u64> = (0..ITEMS).map(|_| p.pull().unwrap()).collect();
            seen.sort_unstable();
            assert_eq!(seen, (0..ITEMS).collect::<Vec<_>>(), "{}", who.id());
            let s = trial(&set, 2, Duration::from_millis(5), None);
            assert!(s.value("ns").unwrap() > 0.0);
            let s = trial(
                &set,
                2,
                Duration::from_millis(6),
                Some(Some(Duration::from_millis(1))),
            );
            assert!(s.value("max").unwrap() > 0.0);
        }
    }
}
