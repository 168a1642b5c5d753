//! What the lab tells its user while it runs: a trait the caller implements (the `spindle`
//! binary draws progress bars on a terminal and log lines in a pipe); the library never prints.

use std::time::Duration;

use crate::results::{ClaimResult, ExperimentResult};
use crate::spec::Info;

/// Where an experiment stands, for progress displays.
#[derive(Clone, Copy, Debug)]
pub struct Status<'a> {
    /// "calibrating …", "trials", or an experiment's own setup step.
    pub phase: &'a str,
    pub trials: u64,
    /// Time into this visit, and the visit's slice.
    pub elapsed: Duration,
    pub budget: Duration,
    pub claims_decided: usize,
    pub claims: usize,
}

/// What the lab tells its user while it runs. Every method has a silent default.
pub trait Progress: Sync {
    /// The options are valid and the run is planned: its time budget, and the experiments
    /// with their first-pass slices. Comes before the fingerprint.
    fn lab_started(&self, _budget: Duration, _first: &[(&'static str, Duration)]) {}
    /// The fingerprint is being taken (about a second).
    fn fingerprinting(&self) {}
    /// A visit of an experiment starts: `phase` is "first pass" or "open claims", `slice`
    /// the time the planner gave it, `lab_elapsed` the run's time so far.
    fn experiment_started(
        &self,
        _index: usize,
        _info: &Info,
        _slice: Duration,
        _phase: &str,
        _lab_elapsed: Duration,
    ) {
    }
    fn status(&self, _experiment: &str, _status: &Status) {}
    /// A claim's verdict is known (or, at the end of the run, known to be undecided).
    fn claim_decided(&self, _experiment: &str, _claim: &ClaimResult) {}
    /// A visit of an experiment ended (the result so far).
    fn experiment_finished(&self, _result: &ExperimentResult) {}
    fn experiment_failed(&self, _name: &str, _error: &str) {}
    /// Polled between runs: true stops the lab after the current run, keeping what it
    /// measured (the binary sets it on Ctrl-C).
    fn stop_requested(&self) -> bool {
        false
    }
}

/// A [`Progress`] that says nothing.
pub struct Silent;
impl Progress for Silent {}
