//! The one runner every experiment uses: calibration and warm-up, interleaved trials, claim
//! tests, load checks, progress, and results written as they come.
//!
//! A *trial* runs each variant of the sections still at work once, in a fresh random order — every
//! variant until a section's table has its minimum of trials, then only the two variants of each
//! open claim (`runner/state.rs`) — so that slow drifts of the machine (frequency, other tenants,
//! cache state) hit all variants alike. The order keeps each section's variants together, and
//! sections that a claim joins (`runner/trials.rs`, `blocks`), so that a claim's two runs are close
//! in time and a change of the host's speed rarely falls between them. Claims compare two variants
//! *within* a trial; each claim is a sequential test on the median of its per-trial ratios
//! (`runner/claims.rs` explains it). A section runs while one of its claims is open or its table
//! has fewer than the profile's minimum of trials, so a cheap section that decides fast does not
//! pay for an expensive one that does not.
//!
//! Trials are kept a *window* at a time (about half a second): if other processes loaded the
//! CPUs during the window, its trials are discarded and measured again (see [`crate::load`]).
//! In experiments with two-thread variants each window is also tagged with where the host has
//! put their two CPUs (a quick cache-line round trip between them, `runner/placement.rs`): a
//! section reports the range it saw, and a claim with enough trials in two placements gives
//! each one's median ratio beside its verdict.
//!
//! The runner does not decide how long an experiment runs: the [planner](crate::planner) gives
//! it a slice of time per *visit*, and may visit it again with time other experiments did not
//! need. A later visit continues the same tests on the same data ([`Saved`]).

mod assemble;
mod claims;
mod data;
mod placement;
mod state;
mod trials;

#[cfg(test)]
mod tests;

use std::time::{Duration, Instant};

use spindle_stats::rng::SplitMix64;

use crate::load::LoadSource;
use crate::machine::Machine;
use crate::progress::{Progress, Status};
use crate::results::{ExperimentResult, Profile, Visit};
use crate::spec::{Info, Plan};

use data::Layout;
pub use state::Saved;
use state::State;

/// An experiment of the lab: the runner's contract with each file of `experiments`.
pub trait Experiment: Sync {
    fn info(&self) -> Info;
    /// Sizes the parameters from `ctx`, builds state and a [`Plan`] that borrows it, and hands
    /// the plan to [`Ctx::measure`]. An `Err` is reported as the experiment's failure (with
    /// whatever it measured before). It may be called again on a later visit: it must declare
    /// the same plan.
    fn run(&self, ctx: &mut Ctx<'_>) -> Result<(), String>;
}

/// How many trials a profile aims for.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Every section runs at least this many (its table needs data even when claims are easy).
    pub min_trials: u64,
    /// Work per run is sized so that this many trials of every variant fit in a first visit.
    pub target_trials: u64,
    /// No section runs more.
    pub max_trials: u64,
}

impl Limits {
    pub fn of(profile: Profile) -> Limits {
        match profile {
            Profile::Smoke => Limits {
                min_trials: 2,
                target_trials: 3,
                max_trials: 5,
            },
            Profile::Quick => Limits {
                min_trials: 10,
                target_trials: 30,
                max_trials: 5000,
            },
            Profile::Full => Limits {
                min_trials: 30,
                target_trials: 100,
                max_trials: 20_000,
            },
        }
    }
}

/// Where an experiment's results and progress go (the lab's run loop implements it).
pub(crate) trait Session {
    fn progress(&self) -> &dyn Progress;
    /// A snapshot of the experiment so far (partial until the last call).
    fn snapshot(&mut self, result: &ExperimentResult);
}

/// What the planner gives one visit of an experiment.
pub struct VisitPlan {
    /// Time this visit may take, setup included.
    pub slice: Duration,
    /// Why the planner gives it ("first pass", "open claims").
    pub phase: &'static str,
    /// The state an earlier visit left (None on the first).
    pub resume: Option<Saved>,
}

/// What an experiment gets from the lab.
pub struct Ctx<'r> {
    pub machine: &'r Machine,
    pub profile: Profile,
    /// False-positive rate of each claim.
    pub eps: f64,
    pub info: Info,
    slice: Duration,
    /// The first visit's slice, which sizes the work per run in every visit.
    sizing: Duration,
    phase: &'static str,
    started: Instant,
    rng: SplitMix64,
    session: &'r mut dyn Session,
    load: &'r mut dyn LoadSource,
    resume: Option<Saved>,
    /// See [`Ctx::once`].
    memo: Vec<(&'static str, u64)>,
    pub(crate) result: Option<ExperimentResult>,
    /// What the visit leaves for the next one.
    pub(crate) saved: Option<Saved>,
}

impl<'r> Ctx<'r> {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        machine: &'r Machine,
        profile: Profile,
        eps: f64,
        info: Info,
        seed: u64,
        session: &'r mut dyn Session,
        load: &'r mut dyn LoadSource,
        visit: VisitPlan,
    ) -> Self {
        // Whatever ran before (a probe, an experiment) must not leave this thread pinned:
        // every thread an experiment spawns inherits its affinity, and "unpinned" variants
        // would silently share one CPU.
        crate::sys::unpin_current_thread(&machine.cpus_allowed);
        let sizing = visit.resume.as_ref().map_or(visit.slice, |s| s.0.sizing);
        let memo = visit
            .resume
            .as_ref()
            .map_or_else(Vec::new, |s| s.0.memo.clone());
        Ctx {
            machine,
            profile,
            eps,
            info,
            slice: visit.slice,
            sizing,
            phase: visit.phase,
            started: Instant::now(),
            rng: SplitMix64::new(seed),
            session,
            load,
            resume: visit.resume,
            memo,
            result: None,
            saved: None,
        }
    }

    /// Time this visit may take, setup included.
    pub fn budget(&self) -> Duration {
        self.slice
    }

    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    pub fn limits(&self) -> Limits {
        Limits::of(self.profile)
    }

    /// How long one run of one variant should last so that the profile's target number of
    /// trials of `variants` variants fits in three quarters of the first visit's slice. The
    /// same in every visit, so that all trials measure the same work.
    pub fn run_target(&self, variants: usize) -> Duration {
        let l = self.limits();
        let share =
            self.sizing.as_secs_f64() * 0.75 / (l.target_trials as f64 * variants.max(1) as f64);
        let (lo, hi) = match self.profile {
            Profile::Smoke => (50e-6, 2e-3),
            _ => (1e-3, 0.25),
        };
        Duration::from_secs_f64(share.clamp(lo, hi))
    }

    /// A value the experiment computes once — on its first visit — and gets back unchanged on
    /// later ones: a calibration that sizes its runs, say, so that every visit measures the
    /// same work (and does not pay for calibrating again).
    pub fn once(&mut self, key: &'static str, compute: impl FnOnce(&Self) -> u64) -> u64 {
        if let Some(&(_, v)) = self.memo.iter().find(|(k, _)| *k == key) {
            return v;
        }
        let v = compute(self);
        self.memo.push((key, v));
        v
    }

    /// The CPUs this process may use.
    pub fn cpus(&self) -> &[usize] {
        &self.machine.cpus_allowed
    }

    /// Number of CPUs this process may use: "cores" in thread counts such as 4 × cores.
    pub fn cores(&self) -> usize {
        self.machine.cpus_allowed.len().max(1)
    }

    /// The two CPUs two-thread experiments pin to (those of the fingerprint's cache-line round
    /// trip), or None with a single CPU.
    pub fn cpu_pair(&self) -> Option<[usize; 2]> {
        self.machine.round_trip_cpus.or_else(|| {
            let c = &self.machine.cpus_allowed;
            (c.len() >= 2).then(|| [c[0], c[1]])
        })
    }

    /// Tells the user what a long setup step is doing.
    pub fn status(&self, phase: &str) {
        self.session.progress().status(
            self.info.name,
            &Status {
                phase,
                trials: 0,
                elapsed: self.elapsed(),
                budget: self.slice,
                claims_decided: 0,
                claims: 0,
            },
        );
    }

    fn stop_requested(&self) -> bool {
        self.session.progress().stop_requested()
    }

    /// Runs the plan's trials for this visit and stores the experiment's result.
    pub fn measure(&mut self, mut plan: Plan<'_>) -> Result<(), String> {
        plan.validate()?;
        let layout = Layout::of(&plan);
        let mut state = match self.resume.take() {
            Some(saved) => State::resume(saved, &plan)?,
            None => State::new(
                &plan,
                &layout,
                self.eps,
                self.sizing,
                self.limits().min_trials,
            )?,
        };
        let (trials_before, open_before) = (state.data.trials, state.open_claims());
        let prepared = self.prepare(&mut plan, &layout, &mut state);
        state.setup_s = self.elapsed().as_secs_f64();
        let reason = if prepared {
            self.run_trials(&mut plan, &layout, &mut state)
        } else {
            format!(
                "its {:.0} s were spent calibrating and warming up (no trials in this visit)",
                self.slice.as_secs_f64()
            )
        };
        let interrupted = reason.starts_with("interrupted");
        state.visits.push(Visit {
            phase: self.phase.into(),
            slice_s: self.slice.as_secs_f64(),
            used_s: self.elapsed().as_secs_f64(),
            trials: state.data.trials - trials_before,
            decided: (open_before - state.open_claims()) as u32,
            stop_reason: reason.clone(),
        });
        state.ended = Some(Instant::now());
        state.memo = self.memo.clone();
        let result = self.assemble(&plan, &layout, &state, &reason, !interrupted);
        self.session.snapshot(&result);
        self.result = Some(result);
        self.saved = Some(Saved(state));
        Ok(())
    }
}

/// What another visit could do for an experiment (see [`Saved::outlook`]): what its open
/// claims need and what the trials they need cost. A trial runs a set of variants, and
/// claims that compare the same variants share their runs, so the cost is counted per
/// variant, not per claim (the planner's `prospect_of`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outlook {
    /// Each open claim's needs.
    pub claims: Vec<ClaimOutlook>,
    /// (variant, trials): variants that run in the next trials whatever the claims need:
    /// every variant of a section whose table lacks its minimum of trials, for the trials it
    /// lacks.
    pub fill: Vec<(usize, u64)>,
    /// Seconds one run of each variant takes (the runner's smoothed prediction).
    pub run_s: Vec<f64>,
}

/// What one open claim needs (see [`Outlook`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClaimOutlook {
    /// About how many more trials it needs (None: no estimate, or no more trials possible).
    pub trials: Option<u64>,
    /// Its test is still running and its sections are below the trial cap: its variants run
    /// in every trial of the next visit, estimate or not.
    pub testing: bool,
    pub guarantee: bool,
    /// The two variants each of its trials runs.
    pub variants: [usize; 2],
}

impl Saved {
    /// Claims still open.
    pub fn open_claims(&self) -> usize {
        self.0.open_claims()
    }

    /// For each open claim: about how many more trials it needs (None: at its bound, or its
    /// sections are at the trial cap), the variants it runs and whether it is a guarantee;
    /// the variants that tables below their minimum run anyway; and each variant's run time.
    pub fn outlook(&self) -> Outlook {
        let s = &self.0;
        let claims = s
            .claims
            .iter()
            .filter(|c| c.is_open())
            .map(|c| {
                let capped = c.sections.iter().any(|&sec| s.sections[sec].at_cap);
                ClaimOutlook {
                    trials: if capped { None } else { c.outlook() },
                    testing: !capped && c.testing(),
                    guarantee: c.guarantee,
                    // Past the first pass a trial for this claim runs its two variants.
                    variants: c.operands(),
                }
            })
            .collect();
        let fill = s
            .sections
            .iter()
            .zip(&s.members)
            .filter(|(sec, _)| !sec.at_cap && sec.trials < s.min_trials)
            .flat_map(|(sec, members)| members.iter().map(|&v| (v, s.min_trials - sec.trials)))
            .collect();
        Outlook {
            claims,
            fill,
            run_s: s.run_seconds.clone(),
        }
    }

    /// Visits so far.
    pub fn visits(&self) -> usize {
        self.0.visits.len()
    }

    /// Time since the latest visit ended.
    pub fn since_last_visit(&self) -> Duration {
        self.0.ended.map_or(Duration::MAX, |t| t.elapsed())
    }

    /// Trials measured so far, over every visit.
    pub fn trials(&self) -> u64 {
        self.0.data.trials
    }

    /// Seconds the latest visit spent before its first trial (setup, calibration, warm-up):
    /// what another visit costs before it measures anything.
    pub fn setup_s(&self) -> f64 {
        self.0.setup_s
    }
}
