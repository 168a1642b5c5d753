//! Scheduler-aware synchronisation primitives for Linux/x86-64.
//!
//! - [`futex`]: wait on a 32-bit word with an absolute `CLOCK_MONOTONIC` deadline; wake.
//! - [`time`]: [`Deadline`], a point on that clock.

#![warn(missing_docs)]

pub mod futex;
#[allow(unused_imports, dead_code)]
mod primitives;
pub mod time;

pub use time::Deadline;
