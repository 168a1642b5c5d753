//! `affinity`: two threads passing messages through a single-writer queue, pinned to one core,
//! pinned to two cores, or left to the scheduler (Martin Thompson, "Processor Affinity - Part
//! 1", 2011: unpinned throughput "follows a step function of unpredictable performance", pinned
//! gives "consistent throughput … and always the greatest").
//!
//! A run lasts the profile's target time; the consumer counts messages per twentieth of it,
//! giving the rate over time (the report draws the last run's) and its spread (coefficient of
//! variation of the per-interval rates). Both sides spin 64 times, then yield, when the queue
//! is full or empty, so that two threads sharing one core make progress at all.
//!
//! # The queue's protocol
//!
//! Lamport's single-producer single-consumer ring: `tail` (written only by the producer) and
//! `head` (written only by the consumer) count messages ever pushed and popped, on separate
//! cache lines; slot `i % N` holds message `i`. Invariant: `0 ≤ tail − head ≤ N`.
//! - push: if `tail − head == N` (head re-read with `Acquire` only when the cached copy says
//!   full), wait; store the message into its slot, then `tail.store(tail + 1, Release)`.
//! - pop: if `head == tail` (tail re-read with `Acquire` when the cached copy says empty),
//!   wait; load the slot, then `head.store(head + 1, Release)`.
//!
//! The `Release` on `tail` orders the slot write before the consumer's `Acquire` read of
//! `tail` and hence its slot read; the `Release` on `head` orders the consumer's slot read
//! before the producer's reuse of the slot. The linearisation points are the two stores. One
//! producer thread and one consumer thread by construction (`exchange` below); every run
//! checks that messages arrive exactly in order, and fails the experiment otherwise.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::time::Duration;

use crate::kit::CachePadded;
use crate::references::AFFINITY;
use crate::runner::{Ctx, Experiment};
use crate::spec::{Claim, Info, Metric, Plan, Sample, Section, Variant};
use crate::sys::{pin_current_thread, rdtsc};

pub struct Affinity;

const SLOTS: usize = 1024;
const INTERVALS: usize = 20;

struct Ring {
    slots: Box<[AtomicU64]>,
    head: CachePadded<AtomicU64>,
    tail: CachePadded<AtomicU64>,
}

/// Spin a little, then let the other thread have the CPU.
fn snooze(spins: &mut u32) {
    *spins += 1;
    if *spins < 64 {
        std::hint::spin_loop();
    } else {
        *spins = 0;
        std::thread::yield_now();
    }
}

/// Producer and consumer on `cpus` (or unpinned) for `run`; messages per interval.
fn exchange(cpus: Option<[usize; 2]>, run: Duration, ticks_per_ns: f64) -> Vec<f64> {
    let ring = Ring {
        slots: (0..SLOTS).map(|_| AtomicU64::new(0)).collect(),
        head: CachePadded(AtomicU64::new(0)),
        tail: CachePadded(AtomicU64::new(0)),
    };
    let stop = AtomicBool::new(false);
    let interval = (run.as_nanos() as f64 * ticks_per_ns / INTERVALS as f64) as u64;
    std::thread::scope(|s| {
        s.spawn(|| {
            if let Some([a, _]) = cpus {
                pin_current_thread(a);
            }
            let (mut tail, mut head, mut spins) = (0u64, 0u64, 0u32);
            while !stop.load(Relaxed) {
                if tail - head == SLOTS as u64 {
                    head = ring.head.load(Acquire);
                    if tail - head == SLOTS as u64 {
                        snooze(&mut spins);
                        continue;
                    }
                }
                ring.slots[tail as usize % SLOTS].store(tail, Relaxed);
                tail += 1;
                ring.tail.store(tail, Release);
            }
        });
        let consumer = s.spawn(|| {
            if let Some([_, b]) = cpus {
                pin_current_thread(b);
            }
            let mut counts = vec![0u64; INTERVALS];
            let (mut head, mut tail, mut spins) = (0u64, 0u64, 0u32);
            let start = rdtsc();
            loop {
                let slot = (rdtsc() - start) / interval.max(1);
                if slot as usize >= INTERVALS {
                    break;
                }
                for _ in 0..256 {
                    if head == tail {
                        tail = ring.tail.load(Acquire);
                        if head == tail {
                            snooze(&mut spins);
                            break;
                        }
                    }
                    let m = ring.slots[head as usize % SLOTS].load(Relaxed);
                    assert_eq!(
                        m, head,
                        "the queue delivered message {m} where {head} was due"
                    );
                    head += 1;
                    ring.head.store(head, Release);
                    counts[slot as usize] += 1;
                }
            }
            stop.store(true, Relaxed);
            counts
        });
        let secs = run.as_secs_f64() / INTERVALS as f64;
        consumer
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
            .into_iter()
            .map(|c| c as f64 / secs)
            .collect()
    })
}

fn sample(rates: Vec<f64>, run: Duration) -> Sample {
    let mean = rates.iter().sum::<f64>() / rates.len() as f64;
    let sd = (rates.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / rates.len() as f64).sqrt();
    let slowest = rates.iter().copied().fold(f64::INFINITY, f64::min);
    let step = run.as_secs_f64() / INTERVALS as f64;
    Sample::new()
        .with("msgs", mean)
        .with("cv", if mean > 0.0 { sd / mean } else { f64::NAN })
        .with("slowest", slowest)
        .series("msgs", step, rates)
}

impl Experiment for Affinity {
    fn info(&self) -> Info {
        Info {
            name: "affinity",
            title: "Processor affinity: message passing pinned and unpinned",
            summary: "two threads exchange messages through a single-writer queue: one core, two pinned cores, unpinned",
            question: "How many messages per second do two threads pass through a single-writer queue when pinned to one \
                       core, pinned to two cores, or left to the scheduler — and how steady is that rate over time?",
            references: &[AFFINITY],
            quick_seconds: 14,
        }
    }

    fn run(&self, ctx: &mut Ctx) -> Result<(), String> {
        let run = ctx.run_target(3).max(Duration::from_millis(20));
        let ticks_per_ns = ctx.machine.tsc_ghz;
        let pair = ctx.cpu_pair();
        let first = ctx.cpus()[0];
        let mut plan = Plan::new();
        plan.param(
            "run",
            format!(
                "{} ms, rates counted over {INTERVALS} intervals of {:.1} ms",
                run.as_millis(),
                run.as_secs_f64() * 1e3 / INTERVALS as f64
            ),
        );
        plan.param(
            "queue",
            format!("{SLOTS} slots of 8 bytes; spin 64 times, then yield, when full or empty"),
        );
        plan.section(
            Section::new("exchange", "Messages through a single-writer queue")
                .baseline("unpinned")
                .metric(Metric::rate("msgs", "messages"))
                .metric(Metric::count(
                    "cv",
                    "spread over time (coefficient of variation)",
                ))
                .metric(Metric::rate("slowest", "slowest interval")),
        );
        plan.variant(
            Variant::fixed(
                "exchange",
                "one-core",
                format!("both threads pinned to CPU {first}"),
                move || sample(exchange(Some([first, first]), run, ticks_per_ns), run),
            )
            .threads(2),
        );
        if let Some([a, b]) = pair {
            plan.variant(
                Variant::fixed(
                    "exchange",
                    "two-cores",
                    format!("pinned to CPUs {a} and {b}"),
                    move || sample(exchange(Some([a, b]), run, ticks_per_ns), run),
                )
                .threads(2),
            );
        }
        plan.variant(
            Variant::fixed(
                "exchange",
                "unpinned",
                "unpinned (the scheduler places them)",
                move || sample(exchange(None, run, ticks_per_ns), run),
            )
            .threads(2),
        );

        if pair.is_some() {
            plan.claim(Claim::reproduction("pinned-faster", "Two threads pinned to two cores pass at least as many messages as unpinned ones", AFFINITY, "pinned: always the greatest throughput")
                .ratio("two-cores", "unpinned").at_least(1.0));
            plan.claim(
                Claim::reproduction(
                    "pinned-steadier",
                    "Pinned to two cores, the rate over time varies no more than unpinned",
                    AFFINITY,
                    "pinned: consistent; unpinned: a step function",
                )
                .ratio("two-cores", "unpinned")
                .metric("cv")
                .at_most(1.0),
            );
        } else {
            plan.note("One CPU only: no two-core variant and no claim.");
        }
        plan.note("The post exchanged IP multicast messages through a dummy network interface (the kernel in between); here the queue is shared memory, so the figures measure the scheduler and the cache, not the network stack.");
        ctx.measure(plan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The queue delivers every message in order, pinned or not, oversubscribed by running the
    /// exchange from several threads at once (each run asserts the order of every message).
    #[test]
    fn messages_arrive_in_order() {
        let cpus = crate::sys::allowed_cpus();
        let ghz = crate::sys::calibrate_tsc(Duration::from_millis(5));
        let pairs = std::thread::available_parallelism().map_or(2, |n| n.get());
        std::thread::scope(|s| {
            for i in 0..pairs {
                let cpus = &cpus;
                s.spawn(move || {
                    let pin = (i % 2 == 0).then(|| [cpus[0], cpus[cpus.len() - 1]]);
                    let rates = exchange(pin, Duration::from_millis(40), ghz);
                    assert_eq!(rates.len(), INTERVALS);
                    assert!(rates.iter().sum::<f64>() > 0.0, "no message got through");
                });
            }
        });
    }
}
