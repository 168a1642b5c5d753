//! What the runner knows about one experiment between trials — and between visits: the
//! planner may come back to an experiment whose claims are still open, and the new visit
//! continues the same drivers on the same data.

use std::time::Duration;

use crate::load::Load;
use crate::results::{LoadRecord, RoundTripRecord, Visit};
use crate::spec::{Body, Plan};

use super::claims::ClaimState;
use super::data::{Data, Layout};

/// One section's progress.
#[derive(Clone, Debug, Default)]
pub(crate) struct SectionState {
    /// Trials kept.
    pub trials: u64,
    /// Trials discarded under load.
    pub discarded: u64,
    pub load: LoadRecord,
    /// The round trips measured as its windows closed (two-thread experiments only).
    pub round_trip: Option<RoundTripRecord>,
    /// Set once the runner stops running the section, with the reason.
    pub done: Option<String>,
    /// It reached the profile's trial cap: its open claims cannot get more trials.
    pub at_cap: bool,
}

impl SectionState {
    /// Accounts one window of trials in which this section ran `trials` times; `loaded`: the
    /// window's load disturbs, `discarded`: its trials are thrown away.
    pub fn window(&mut self, load: &Load, loaded: bool, discarded: bool, trials: u64) {
        let r = &mut self.load;
        r.windows += 1;
        r.max_others_cpus = r.max_others_cpus.max(load.others_cpus);
        r.max_steal_cpus = r.max_steal_cpus.max(load.steal_cpus);
        r.max_runnable = r.max_runnable.max(load.runnable);
        if loaded {
            r.loaded_windows += 1;
        }
        if discarded {
            self.discarded += trials;
        }
    }
}

/// Everything about an experiment that outlives one visit.
pub(crate) struct State {
    /// Variant ids, to check that a later visit declares the same plan.
    pub ids: Vec<String>,
    pub data: Data,
    pub sections: Vec<SectionState>,
    /// Variants of each section (what a trial runs until the section's table has its minimum).
    pub members: Vec<Vec<usize>>,
    /// Trials every section's table needs (the profile's minimum).
    pub min_trials: u64,
    pub claims: Vec<ClaimState>,
    /// Work per run of each variant, fixed by the first visit's calibration.
    pub work: Option<Vec<u64>>,
    /// A calibration that a visit's slice cut short: the sizes found so far and how many
    /// variants have one. The next visit goes on from there instead of starting again, so
    /// that a machine too loaded to calibrate an experiment in one slice still gets there.
    pub partial: Option<(Vec<u64>, usize)>,
    /// Smoothed wall time of one run of each variant (predicts the next trial's length).
    pub run_seconds: Vec<f64>,
    /// The first visit's slice: it sizes work per run in every visit, so that all trials
    /// measure the same thing.
    pub sizing: Duration,
    pub visits: Vec<Visit>,
    /// Seconds the latest visit spent before its first trial (setup, calibration, warm-up).
    pub setup_s: f64,
    /// When the latest visit ended.
    pub ended: Option<std::time::Instant>,
    /// Values the experiment computed once for all its visits ([`super::Ctx::once`]).
    pub memo: Vec<(&'static str, u64)>,
}

/// An experiment's state between visits (opaque outside the runner).
pub struct Saved(pub(crate) State);

impl State {
    pub fn new(
        plan: &Plan<'_>,
        layout: &Layout,
        eps: f64,
        sizing: Duration,
        min_trials: u64,
    ) -> Result<State, String> {
        let claims = plan
            .claims
            .iter()
            .map(|c| ClaimState::new(c, plan, layout, eps))
            .collect::<Result<_, _>>()?;
        Ok(State {
            ids: plan.variants.iter().map(|v| v.id.clone()).collect(),
            data: Data::new(plan, layout),
            sections: vec![SectionState::default(); plan.sections.len()],
            members: layout.members.clone(),
            min_trials,
            claims,
            work: None,
            partial: None,
            run_seconds: vec![0.0; plan.variants.len()],
            sizing,
            visits: Vec::new(),
            setup_s: 0.0,
            ended: None,
            memo: Vec::new(),
        })
    }

    /// A saved state, checked against the plan the experiment declared this time.
    pub fn resume(saved: Saved, plan: &Plan<'_>) -> Result<State, String> {
        let state = saved.0;
        let ids: Vec<&str> = plan.variants.iter().map(|v| v.id.as_str()).collect();
        if state.ids != ids || state.claims.len() != plan.claims.len() {
            return Err(
                "the experiment declared different variants or claims on its second visit".into(),
            );
        }
        Ok(state)
    }

    /// Which sections still have work: an open claim that needs them, or fewer trials than the
    /// tables need (counting `pending[s]` trials measured but not yet kept). Marks the others
    /// done, with the reason.
    pub fn active_sections(
        &mut self,
        min_trials: u64,
        max_trials: u64,
        pending: &[u64],
    ) -> Vec<bool> {
        let mut needed = vec![false; self.sections.len()];
        let mut claimed = vec![false; self.sections.len()];
        let visit = self.visit();
        for c in &self.claims {
            for &s in &c.sections {
                claimed[s] = true;
                needed[s] |= c.needs_trials(visit);
            }
        }
        for (s, section) in self.sections.iter_mut().enumerate() {
            let trials = section.trials + pending.get(s).copied().unwrap_or(0);
            section.at_cap = trials >= max_trials;
            let active = !section.at_cap && (needed[s] || trials < min_trials);
            if active {
                section.done = None;
            } else if section.done.is_none() {
                section.done = Some(if section.trials >= max_trials {
                    format!("trial cap ({max_trials}) reached")
                } else if claimed[s] && self.claims.iter().any(|c| c.provisional()) {
                    format!(
                        "its claims were decided after {} trials (a later visit confirms them)",
                        section.trials
                    )
                } else if claimed[s] {
                    format!("its claims were decided after {} trials", section.trials)
                } else {
                    format!("{} trials (it has no claims)", section.trials)
                });
            }
        }
        self.sections.iter().map(|s| s.done.is_none()).collect()
    }

    /// Which variants the next trial runs, given the active sections: every variant of a
    /// section whose table still lacks `min_trials` trials (counting `pending`); past that, only
    /// the two variants of each claim that still needs trials. A section's later trials then
    /// cost what its open claims need (two runs) instead of a run of every rival, so a claim
    /// close to its bound gets several times more trials in the same time. A ratio is only
    /// taken between values of the same trial, so the variants left out cost no pairing.
    pub fn running(
        &self,
        layout: &Layout,
        active: &[bool],
        min_trials: u64,
        pending: &[u64],
    ) -> Vec<bool> {
        let mut run: Vec<bool> = (0..layout.section_of.len())
            .map(|v| {
                let s = layout.section_of[v];
                let trials = self.sections[s].trials + pending.get(s).copied().unwrap_or(0);
                active[s] && trials < min_trials
            })
            .collect();
        let visit = self.visit();
        for c in self.claims.iter().filter(|c| c.needs_trials(visit)) {
            for v in c.operands() {
                run[v] |= active[layout.section_of[v]];
            }
        }
        run
    }

    /// Predicted wall time of a trial that runs the variants marked in `running`.
    pub fn predict(&self, running: &[bool]) -> Duration {
        let s: f64 = (0..self.run_seconds.len())
            .filter(|&v| running[v])
            .map(|v| self.run_seconds[v])
            .sum();
        Duration::from_secs_f64(s)
    }

    /// Records how long a run of variant `v` took.
    pub fn ran(&mut self, v: usize, seconds: f64) {
        let old = self.run_seconds[v];
        // Smoothed, but never below the latest run: predicting short means overrunning.
        self.run_seconds[v] = if old == 0.0 {
            seconds
        } else {
            (0.7 * old + 0.3 * seconds).max(seconds)
        };
    }

    /// Whether `pending[s]` more trials of each section might settle something: fill a table
    /// to its minimum, or reach the trials an open claim was estimated to need.
    pub fn pending_may_settle(&self, min_trials: u64, pending: &[u64]) -> bool {
        let tables = self
            .sections
            .iter()
            .zip(pending)
            .any(|(s, &p)| p > 0 && s.trials < min_trials && s.trials + p >= min_trials);
        tables
            || self.claims.iter().any(|c| {
                c.expected
                    .is_some_and(|n| c.sections.iter().all(|&s| pending[s] >= n))
            })
    }

    /// The visit now running (0 for the first).
    pub fn visit(&self) -> u32 {
        self.visits.len() as u32
    }

    pub fn open_claims(&self) -> usize {
        self.claims.iter().filter(|c| c.is_open()).count()
    }
}

/// Whether a variant sizes its own work (nothing to calibrate).
pub(crate) fn is_fixed(body: &Body<'_>) -> bool {
    matches!(body, Body::Fixed(_))
}
