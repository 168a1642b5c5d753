//! The experiment catalogue, one file per experiment. Each reads as parameters → variants →
//! trial → claims; the runner does the rest.

mod affinity;
pub mod alloc;
mod contention;
mod eventcount;
mod fences;
mod itoa;
mod locks;
mod percpu;
mod pool;
pub mod recorder;
mod rings;
mod rings_async;
mod rotary;
mod sampler;
mod smr;
mod spawn;
pub mod spinlocks;
mod wal;

use crate::runner::Experiment;

/// Every experiment, in the order the lab runs them.
pub fn all() -> Vec<Box<dyn Experiment>> {
    vec![
        Box::new(contention::Contention),
        Box::new(eventcount::EventCounts),
        Box::new(locks::Locks),
        Box::new(fences::Fences),
        Box::new(smr::Smr),
        Box::new(rotary::Rotary),
        Box::new(alloc::Alloc),
        Box::new(rings::Rings),
        Box::new(percpu::PerCpu),
        Box::new(affinity::Affinity),
        Box::new(spawn::Spawn),
        Box::new(pool::Pool),
        Box::new(recorder::Recorder),
        Box::new(wal::WalLab),
        Box::new(sampler::Sampler),
        Box::new(itoa::Itoa),
    ]
}

/// Experiments planned but not built yet, for `--list`.
pub const PLANNED: &[(&str, &str)] = &[];
