//! Scheduler-aware synchronisation primitives for Linux/x86-64.
//!
//! - [`eventcount`]: [`EventCount`] (multi-producer) and [`SpEventCount`] (single producer,
//!   no atomic instruction on the signal path): block on lock-free data, free when nobody sleeps;
//!   [`TwoWordEventCount`], the single-producer count whose correctness rests on the C++ memory
//!   model alone (a fence per signal: what any weak memory model can run as is).
//! - [`spsc`]: a bounded single-producer single-consumer ring that blocks, on two
//!   `SpEventCount`s; [`mpmc`]: a bounded many-producer many-consumer channel.
//! - [`lock`]: spinlocks, a futex mutex and Spindle's own [`lock::Mutex`], all
//!   `lock_api` raw mutexes. Its module documentation says which lock to use when.
//! - [`fence`]: asymmetric fences — a compiler-only [`fence::light`] on the hot path, a
//!   process-wide [`fence::heavy`] (coalesced) on the cold one.
//! - [`prepaid`]: [`PrepaidBarrier`](prepaid::PrepaidBarrier), the same guarantee as `heavy()`
//!   without IPIs: wait until every CPU has taken an interrupt or context switch anyway.
//! - [`smr`]: epoch-based reclamation and hazard pointers whose readers execute no fence.
//! - [`rotary`]: [`RotarySet`], seed 001's SWMR rotary set: readers pull the head round-robin,
//!   lock-free in O(1), while one writer at a time inserts and removes under a lock they never
//!   take.
//! - [`percpu`]: per-CPU data on restartable sequences (rseq): a counter whose add is one
//!   plain store, per-CPU stacks of words; glibc's registration adopted, a fallback elsewhere.
//! - [`futex`]: wait on a 32-bit word with an absolute `CLOCK_MONOTONIC` deadline; wake.
//! - [`time`]: [`Deadline`], a point on that clock.
//!
//! Every protocol's module states its words, invariants, orderings, linearisation points and
//! why no wake-up is lost; loom models (`RUSTFLAGS="--cfg loom" cargo test -p spindle-sync
//! --release --lib`) and oversubscribed stress tests (`tests/`) check them.
//!
//! Measured figures are not kept here: the lab (`cargo run --release -- lab`) measures every
//! primitive on your machine beside what you would otherwise use, and `docs/results.md` has
//! the published runs, one per machine. Below is the advice those runs support on every
//! machine measured.
//!
//! # Which waiting primitive when
//!
//! - **A single thread publishes** (a ring's write index, a sequence number): [`SpEventCount`].
//!   Its signal is a plain store and a load, with no atomic instruction and no fence, so
//!   blocking support costs about nothing when nobody waits. The price is on the waiter's
//!   side: after announcing itself it watches the version for 2 µs, and for one second it
//!   sleeps in 4, 8, 16, … ms naps (see [`eventcount`] for why) — the producer still wakes
//!   it at once; the naps only bound a race the watch is there to catch. Not on an isolated
//!   `nohz_full` core.
//! - **A ring between two threads**: [`spsc`], built on two [`SpEventCount`]s: push and pop
//!   block when they must and execute no `lock`ed instruction when nobody waits.
//! - **A queue between many threads**: [`mpmc`], a bounded channel with one CAS per operation
//!   that blocks through [`EventCount`]s.
//! - **Several threads publish**: [`EventCount`]. Its signal is one `lock xadd`, cheaper than a
//!   mutex + condition variable notify or event-listener's notify, and it wakes a sleeper
//!   through one futex call.
//! - **The waiter is likely to be spinning when the signal comes** (request/response, a
//!   consumer that keeps up): either event count hands off in about the time of a cache-line
//!   round trip, because it spins briefly before it sleeps; condition variables and
//!   event-listener go through the kernel every time. (A new multi-producer event count's
//!   first waits yield after their first poll, until a few of those yields return at once:
//!   see `EventCount`'s spin.)
//! - **The wait condition is more than "the version changed"** (several variables, a
//!   predicate under a lock you need anyway): a `Condvar` with its mutex is simpler; use
//!   parking_lot's, whose notify is cheap when nobody waits.
//!
//! # Which barrier when
//!
//! The cold side of an asymmetric fence — a reclaimer before it scans, a writer before it
//! reads what hot threads published — needs every other thread to have executed a full
//! barrier.
//!
//! - **You need the barrier now** (a writer about to read what readers published, a lock
//!   hand-off): [`fence::heavy`], an expedited `membarrier` (IPIs): microseconds, but it
//!   interrupts every CPU that runs one of your threads — each IPI is a hiccup on a hot thread.
//! - **You can wait a few milliseconds and want the hot threads left alone** (memory
//!   reclamation, epoch advances, retiring a configuration):
//!   [`PrepaidBarrier`](prepaid::PrepaidBarrier) with its eBPF source (root or `CAP_BPF` +
//!   `CAP_PERFMON`). No IPI, no system call to check; free when the other CPUs are idle, and
//!   about one timer tick when they are busy. Give `wait` a deadline: past it, the wait pays
//!   for `heavy()` instead.
//! - **Not root**: the prepaid `/proc` source works for any user, at millisecond granularity,
//!   with a polling thread while someone waits.
//!   [`PrepaidBarrier::global`](prepaid::PrepaidBarrier::global) picks eBPF, then `/proc`, then
//!   plain `heavy()`, and says which ([`source`](prepaid::PrepaidBarrier::source)).
//! - **Never** `membarrier` global unless nothing else exists: it waits for an RCU grace
//!   period (milliseconds to tens of milliseconds), and makes every barrier a reclaimer nests
//!   wait for one.
//!
//! The [`smr`] module shows what this buys the readers: their protect is a load, a store and a
//! re-check, with no fence, where crossbeam-epoch, haphazard and seize fence on every read.

#![warn(missing_docs)]

// The README's examples are compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

mod channel;
pub mod eventcount;
pub mod fence;
pub mod futex;
mod futures;
mod list;
pub mod lock;
pub mod mpmc;
#[cfg(not(loom))]
pub mod percpu;
#[cfg(not(loom))]
pub mod prepaid;
#[allow(unused_imports, dead_code)]
mod primitives;
mod rendezvous;
pub mod rotary;
mod select;
pub mod smr;
pub mod spsc;
pub mod time;

pub use eventcount::{EventCount, SpEventCount, TwoWordEventCount};
pub use rotary::RotarySet;
pub use time::{Deadline, IntoDeadline};
