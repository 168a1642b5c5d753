//! Scheduler-aware synchronisation primitives for Linux/x86-64.
//!
//! - [`eventcount`]: [`EventCount`] (multi-producer) and [`SpEventCount`] (single producer,
//!   no atomic instruction on the signal path): block on lock-free data, free when nobody sleeps.
//! - [`lock`]: spinlocks, a futex mutex and Spindle's recommended [`lock::Mutex`], all
//!   `lock_api` raw mutexes. Its module documentation says which lock to use when.
//! - [`fence`]: asymmetric fences — a compiler-only [`fence::light`] on the hot path, a
//!   process-wide [`fence::heavy`] (coalesced) on the cold one.
//! - [`prepaid`]: [`PrepaidBarrier`](prepaid::PrepaidBarrier), the same guarantee as `heavy()`
//!   without IPIs: wait until every CPU has taken an interrupt or context switch anyway.
//! - [`smr`]: epoch-based reclamation and hazard pointers whose readers execute no fence.
//! - [`futex`]: wait on a 32-bit word with an absolute `CLOCK_MONOTONIC` deadline; wake.
//! - [`time`]: [`Deadline`], a point on that clock.
//!
//! Every protocol's module states its words, invariants, orderings, linearisation points and
//! why no wake-up is lost; loom models (`RUSTFLAGS="--cfg loom" cargo test -p spindle-sync
//! --release --lib`) and oversubscribed stress tests (`tests/`) check them.
//!
//! # Which waiting primitive when
//!
//! Figures from one run of `spindle lab` (quick profile, 2026-11-21) on a 2-vCPU KVM guest
//! (AMD EPYC, Zen 5, Linux 6.18, HZ 250, TSC 2.6 GHz), medians over 22–145 interleaved trials.
//! Run `cargo run --release -- lab eventcount` for your machine's.
//!
//! | publish a new version, nobody waiting | ns per signal |
//! |---|---:|
//! | plain volatile increment (no blocking support at all) | 0.26 |
//! | [`SpEventCount`] producer | 0.32 |
//! | `xadd` without `lock` (the seed's single-producer option; not used) | 2.12 |
//! | bare `lock xadd` | 5.30 |
//! | [`EventCount`] | 5.30 |
//! | parking_lot: lock, bump, unlock, `Condvar::notify_one` | 10.6 |
//! | event-listener: store, `Event::notify(1)` | 20.2 |
//! | std: lock, bump, unlock, `Condvar::notify_one` (always a `futex` call) | 187 |
//!
//! | waking the waiter (two pinned CPUs) | asleep | still spinning | ping-pong round trip |
//! |---|---:|---:|---:|
//! | [`EventCount`] | 25.1 µs | 89 ns | 112 ns |
//! | [`SpEventCount`] | 30.2 µs | 79 ns | 120 ns |
//! | raw futex wait/wake | 25.5 µs | 13.5 µs | 39.4 µs |
//! | std / parking_lot Condvar + Mutex, event-listener | 25.1–25.3 µs | 13.4–13.8 µs | 39.2–39.8 µs |
//! | bare spin on a flag | – | 60 ns | 102 ns |
//!
//! - **A single thread publishes** (a ring's write index, a sequence number): [`SpEventCount`].
//!   Its signal cost 1.2 × a plain increment when nobody waits (the lab's claim "≤ 1.25 ×"
//!   held), so blocking support is nearly free. The price is on the waiter's side: for one
//!   second after it announces itself it sleeps in 1, 2, 4, … ms naps (see [`eventcount`] for
//!   why), and a timed futex sleep wakes slower on this VM (1.3 × the untimed floor: the claim
//!   "within 1.1 × the futex floor" is *violated* for `SpEventCount`; a raw futex with a 1 ms
//!   timeout measured the same 1.3 ×). Not on an isolated `nohz_full` core.
//! - **Several threads publish**: [`EventCount`]. Its signal is one `lock xadd` (1.00 × the
//!   bare instruction), 2 × cheaper than parking_lot's lock + notify and 3.8 × cheaper than
//!   event-listener's notify; it wakes a sleeper as fast as a raw futex (claim held, median
//!   ratio 1.00).
//! - **The waiter is likely to be spinning when the signal comes** (request/response, a
//!   consumer that keeps up): either event count hands off in about 0.1 µs, because it spins
//!   briefly before it sleeps; every condition variable and event-listener go through the
//!   kernel and take 13–40 µs here.
//! - **The wait condition is more than "the version changed"** (several variables, a
//!   predicate under a lock you need anyway): a `Condvar` with its mutex is simpler; use
//!   parking_lot's, whose notify is cheap when nobody waits.

//!
//! # Which barrier when
//!
//! The cold side of an asymmetric fence — a reclaimer before it scans, a writer before it
//! reads what hot threads published — needs every other thread to have executed a full
//! barrier. Latency of one such barrier from `spindle lab` (quick profile, 2026-11-21, same
//! 2-vCPU VM; 87–5 800 barriers per row). *Idle*: the process's other threads sleep.
//! *Under load*: a busy thread of the process, at nice 19, on each CPU.
//!
//! | barrier | idle: median / p99 | under load: median / p99 |
//! |---|---:|---:|
//! | [`fence::heavy`] = `membarrier` expedited (IPIs) | 0.4 µs / 14.4 µs | 12.8 µs / 31.7 µs |
//! | mprotect IPI trick ([`fence::Method::Mprotect`]) | 2.1 µs / 4.4 µs | 31.0 µs / 69.0 µs |
//! | `membarrier` global (RCU grace period) | 11.1 ms / 34.9 ms | 10.6 ms / 17.8 ms |
//! | [`PrepaidBarrier`](prepaid::PrepaidBarrier), eBPF source | 0.4 µs / 50.3 µs | 2.85 ms / 4.26 ms |
//! | [`PrepaidBarrier`](prepaid::PrepaidBarrier), `/proc` source | 2.59 ms / 8.24 ms | 3.49 ms / 6.10 ms |
//!
//! - **You need the barrier now** (a writer about to read what readers published, a lock
//!   hand-off): [`fence::heavy`]. Tens of µs at worst, but it interrupts every CPU that runs
//!   one of your threads — each IPI is a hiccup on a hot thread.
//! - **You can wait a few ms and want the hot threads left alone** (memory reclamation, epoch
//!   advances, retiring a configuration): [`PrepaidBarrier`](prepaid::PrepaidBarrier) with
//!   its eBPF source (root or `CAP_BPF` + `CAP_PERFMON`). No IPI, no system call to check;
//!   free when the other CPUs are idle, and about one timer tick when they are busy (HZ 250:
//!   median 2.85 ms, p99 4.26 ms above; the slowest of 145 waits took 5.2 ms). Give `wait` a deadline: past it, the wait pays for `heavy()` instead. The lab's
//!   claim "≤ 1/10 of global membarrier under load" (the seed's result, on a HZ 1000
//!   kernel) is **violated** here (median ratio 0.22): the tick, 4 ms, is more than a third of
//!   this VM's RCU grace period.
//! - **Not root**: the prepaid `/proc` source works for any user, at ms granularity, with a
//!   polling thread (1 ms) while someone waits. [`PrepaidBarrier::global`](prepaid::PrepaidBarrier::global)
//!   picks eBPF, then `/proc`, then plain `heavy()`, and says which
//!   ([`source`](prepaid::PrepaidBarrier::source)).
//! - **Never** `membarrier` global unless nothing else exists: 11 ms a call here, and it makes
//!   every barrier a reclaimer nests wait for a grace period.
//!
//! The [`smr`] module shows what this buys the readers: 0.4–1.0 ns per protected read, against
//! 6.5–7.0 ns for crossbeam-epoch, haphazard and seize, whose readers fence.

#![warn(missing_docs)]

pub mod eventcount;
pub mod fence;
pub mod futex;
pub mod lock;
#[cfg(not(loom))]
pub mod prepaid;
#[allow(unused_imports, dead_code)]
mod primitives;
pub mod smr;
pub mod time;

pub use eventcount::{EventCount, SpEventCount};
pub use time::Deadline;
