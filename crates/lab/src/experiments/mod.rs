//! The experiment catalogue. One file per experiment; each reads as variants, parameters,
//! trial, claims.

mod contention;
mod eventcount;
mod fences;
mod locks;
mod smr;

use crate::harness::Ctx;
use crate::report::ExperimentResult;

/// What `spindle lab --list` shows.
#[derive(Clone, Copy, Debug)]
pub struct ExperimentInfo {
    pub name: &'static str,
    pub title: &'static str,
    pub seed: &'static str,
    pub summary: &'static str,
}

/// An experiment of the lab.
pub trait Experiment {
    fn info(&self) -> ExperimentInfo;
    fn run(&self, ctx: &mut Ctx) -> Result<ExperimentResult, String>;
}

/// Every experiment, in the order the lab runs them.
pub fn all() -> Vec<Box<dyn Experiment>> {
    vec![
        Box::new(contention::Contention),
        Box::new(eventcount::EventCountExperiment),
        Box::new(locks::Locks),
        Box::new(fences::Fences),
        Box::new(smr::Smr),
    ]
}

/// Experiments planned in the architecture but not built yet, for `--list`.
pub const PLANNED: &[(&str, &str)] = &[
    (
        "affinity",
        "pinned vs unpinned message exchange between two threads (seed 004)",
    ),
    ("rings", "single-writer rings vs peers (seed 004)"),
    ("itoa", "integer formatting (seed 000)"),
    ("sampler", "sampling without replacement (seed 002)"),
    ("alloc", "trace-driven allocator benchmark (seed 001)"),
];
