//! Scheduler-aware synchronisation primitives for Linux/x86-64.
//!
//! - [`eventcount`]: [`EventCount`] (multi-producer) and [`SpEventCount`] (single producer,
//!   no atomic instruction on the signal path): block on lock-free data, free when nobody sleeps.
//! - [`futex`]: wait on a 32-bit word with an absolute `CLOCK_MONOTONIC` deadline; wake.
//! - [`lock`]: spinlocks, a futex mutex and Spindle's recommended [`lock::Mutex`], all `lock_api` raw mutexes.
//! - [`time`]: [`Deadline`], a point on that clock.

#![warn(missing_docs)]

pub mod eventcount;
pub mod futex;
pub mod lock;
#[allow(unused_imports, dead_code)]
mod primitives;
pub mod time;

pub use eventcount::{EventCount, SpEventCount};
pub use time::Deadline;
