//! Scheduler-aware synchronisation primitives for Linux/x86-64.
//!
//! - [`eventcount`]: [`EventCount`] (multi-producer) and [`SpEventCount`] (single producer,
//!   no atomic instruction on the signal path): block on lock-free data, free when nobody sleeps.
//! - [`lock`]: spinlocks, a futex mutex and Spindle's recommended [`lock::Mutex`], all
//!   `lock_api` raw mutexes. Its module documentation says which lock to use when.
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
