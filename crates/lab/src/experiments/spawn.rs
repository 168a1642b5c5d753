//! `spawn`: the cost of creating a thread, pinned and unpinned (Daniel Micay, "The future of
//! M:N threading", rust-dev, 2013: 100 000 threads in about 0.9 s pinned to a core, about 2 s
//! unpinned with pthreads, because "on a multi-core system, there's a high chance of the new
//! thread being spawned on a different CPU").
//!
//! A spawning thread creates N threads that do nothing, either joining each before creating
//! the next, or detached as the post's C program does (at most 1 000 in flight, and the run
//! ends when every one has exited). Pinned: the spawning thread is pinned to one CPU, and its
//! children inherit that affinity. N is calibrated to the profile's run time (the full profile
//! uses the post's 100 000).

use std::sync::atomic::{AtomicU64, Ordering::*};

use crate::kit::{time, Span};
use crate::references::SPAWN;
use crate::results::Profile;
use crate::runner::{Ctx, Experiment};
use crate::spec::{Claim, Info, Plan, Section, Variant};
use crate::sys::pin_current_thread;

pub struct Spawn;

const IN_FLIGHT: u64 = 1000;

/// Creates `n` threads from a fresh spawning thread (pinned to `cpu` when given).
fn spawn_many(n: u64, cpu: Option<usize>, detached: bool) -> Span {
    std::thread::scope(|s| {
        s.spawn(|| {
            if let Some(c) = cpu {
                pin_current_thread(c);
            }
            let done = std::sync::Arc::new(AtomicU64::new(0));
            time(|| {
                for i in 0..n {
                    if detached {
                        while i - done.load(Acquire) >= IN_FLIGHT {
                            std::thread::yield_now();
                        }
                        let done = done.clone();
                        drop(std::thread::spawn(move || {
                            done.fetch_add(1, Release);
                        }));
                    } else {
                        std::thread::spawn(|| {})
                            .join()
                            .unwrap_or_else(|p| std::panic::resume_unwind(p));
                    }
                }
                while detached && done.load(Acquire) < n {
                    std::thread::yield_now();
                }
            })
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

impl Experiment for Spawn {
    fn info(&self) -> Info {
        Info {
            name: "spawn",
            title: "Thread creation, pinned and unpinned",
            summary: "create N threads (joined one by one, or detached): spawner pinned to one CPU vs unpinned",
            question: "What does creating (and joining) an OS thread cost, and how much more when the new thread may land \
                       on another CPU than when the spawner is pinned to one?",
            references: &[SPAWN],
            quick_seconds: 12,
        }
    }

    fn run(&self, ctx: &mut Ctx) -> Result<(), String> {
        let cpu = ctx.cpus()[0];
        let full = ctx.profile == Profile::Full;
        let mut plan = Plan::new();
        plan.param(
            "threads per run",
            if full {
                "100 000 (the post's)".to_string()
            } else {
                "calibrated to the run time (the full profile uses 100 000)".into()
            },
        );
        plan.param(
            "pinned",
            format!("the spawning thread (and so its children) on CPU {cpu}"),
        );
        plan.section(
            Section::per_op("spawn", "Create a thread and let it finish", "thread")
                .baseline("detached-pinned"),
        );
        for (id, label, pin, detached, reference) in [
            (
                "detached-pinned",
                "detached, spawner pinned to one CPU",
                Some(cpu),
                true,
                Some(1.0),
            ),
            (
                "detached-unpinned",
                "detached, unpinned",
                None,
                true,
                Some(2.0 / 0.9),
            ),
            (
                "join-pinned",
                "spawn + join one at a time, pinned",
                Some(cpu),
                false,
                None,
            ),
            (
                "join-unpinned",
                "spawn + join one at a time, unpinned",
                None,
                false,
                None,
            ),
        ] {
            let mut v = Variant::per_op("spawn", id, label, move |n| spawn_many(n, pin, detached))
                .max_work(100_000);
            if full {
                v = v.work(100_000);
            }
            plan.variant(v.reference(reference));
        }
        plan.claim(
            Claim::reproduction("unpinned-slower", "Creating detached threads unpinned costs at least 1.2 × as much as pinned to one CPU", SPAWN, "about 2 s vs 0.9 s for 100 000 pthreads (2.2 ×)")
                .ratio("detached-unpinned", "detached-pinned")
                .at_least(1.2),
        );
        plan.note("The post also timed Rust's 2013 M:N tasks (0.9 s pinned, 1.1 s unpinned); Rust has had only OS threads since 2014, so the pthread figures are the comparable ones.");
        if ctx.cores() == 1 {
            plan.note("One CPU only: pinned and unpinned are the same placement here.");
        }
        ctx.measure(plan)
    }
}
