//! The trial loop: calibration, warm-up, interleaved trials of the sections still at work, and
//! windows of trials kept only when no other process loaded the machine.

use std::time::{Duration, Instant};

use crate::kit::calibrate;
use crate::load::{Load, Reading};
use crate::progress::Status;
use crate::spec::{Body, Plan, Sample};

use super::data::Layout;
use super::state::{is_fixed, State};
use super::Ctx;

/// Trials are kept or discarded a window at a time; a window closes after this long.
const WINDOW: Duration = Duration::from_millis(500);

/// A window may close early, once the trials in it may settle a claim or fill a table — but
/// not before this long: a shorter one holds too few ticks of CPU time to see a competing
/// process in.
const MIN_WINDOW: Duration = Duration::from_millis(100);

/// A trial measured but not yet kept: `samples[v]` is None for variants that did not run.
struct Pending {
    samples: Vec<Option<Sample>>,
    active: Vec<bool>,
}

/// Trials since the last load reading.
struct Window {
    start: Option<Reading>,
    opened: Instant,
    trials: Vec<Pending>,
}

impl Window {
    /// Trials of each of `sections` sections in the window.
    fn counts(&self, sections: usize) -> Vec<u64> {
        (0..sections)
            .map(|s| self.trials.iter().filter(|t| t.active[s]).count() as u64)
            .collect()
    }
}

impl Ctx<'_> {
    /// Sizes each variant's work to the run target (first visit only), then runs every
    /// variant that will run once without recording it: page faults, lazy initialisation,
    /// caches, and on later visits whatever ran in between. False when the slice ran out
    /// first (a machine so loaded that calibrating took it all): the sizes found are dropped,
    /// and the next visit starts again.
    pub(super) fn prepare(
        &mut self,
        plan: &mut Plan<'_>,
        layout: &Layout,
        state: &mut State,
    ) -> bool {
        let limits = self.limits();
        let active = state.active_sections(limits.min_trials, limits.max_trials, &[]);
        let running = state.running(layout, &active, limits.min_trials, &[]);
        let target = self.run_target(plan.variants.len()) / plan.run_divisor.max(1);
        let calibrating = state.work.is_none();
        let mut work = state
            .work
            .clone()
            .unwrap_or_else(|| vec![1; plan.variants.len()]);
        let nv = plan.variants.len();
        for (i, v) in plan.variants.iter_mut().enumerate() {
            if self.stop_requested() {
                break;
            }
            if self.elapsed() >= self.slice {
                return false;
            }
            if !calibrating && !running[i] {
                continue;
            }
            let what = if calibrating {
                "calibrating and warming up"
            } else {
                "warming up"
            };
            self.status(&format!("{what} ({}/{nv})", i + 1));
            if calibrating && !is_fixed(&v.body) {
                work[i] = match (&mut v.body, v.fixed_work) {
                    (_, Some(n)) => n,
                    (Body::PerOp(f), None) => {
                        calibrate(target, 1, v.max_work, |n| f(n).as_duration())
                    }
                    (Body::Calibrated(f), None) => calibrate(target, 1, v.max_work, |n| {
                        let t = Instant::now();
                        let s = f(n);
                        s.elapsed.unwrap_or_else(|| t.elapsed())
                    }),
                    (Body::Fixed(_), None) => unreachable!("fixed variants are not calibrated"),
                };
            }
            let t = Instant::now();
            run_once(&mut v.body, work[i]);
            state.ran(i, t.elapsed().as_secs_f64());
        }
        if calibrating {
            state.work = Some(work);
        }
        true
    }

    /// Runs trials until every section is done, the slice is spent or the user stops; returns
    /// why it stopped.
    pub(super) fn run_trials(
        &mut self,
        plan: &mut Plan<'_>,
        layout: &Layout,
        state: &mut State,
    ) -> String {
        let limits = self.limits();
        let mut window = Window {
            start: self.load.read(),
            opened: Instant::now(),
            trials: Vec::new(),
        };
        let mut last_write = Instant::now();
        let first = state.data.trials;
        let sections = plan.sections.len();
        let reason = loop {
            let pending = window.counts(sections);
            let active = state.active_sections(limits.min_trials, limits.max_trials, &pending);
            let ran = state.data.trials + window.trials.len() as u64 - first;
            if !active.contains(&true) {
                break format!("every section finished ({ran} trials in this visit)");
            }
            let running = state.running(layout, &active, limits.min_trials, &pending);
            let next = state.predict(&running);
            if self.elapsed() >= self.slice || (ran > 0 && self.elapsed() + next > self.slice) {
                break format!(
                    "its {:.0} s were spent ({ran} trials in this visit)",
                    self.slice.as_secs_f64()
                );
            }
            if self.stop_requested() {
                break format!("interrupted ({ran} trials in this visit)");
            }
            let Some(trial) = self.one_trial(plan, state, active, &running) else {
                break format!("interrupted ({ran} trials in this visit)");
            };
            window.trials.push(trial);
            let age = window.opened.elapsed();
            if age >= WINDOW
                || (age >= MIN_WINDOW
                    && state.pending_may_settle(limits.min_trials, &window.counts(sections)))
            {
                self.close_window(plan, layout, state, &mut window);
            }
            self.report_status(state);
            if last_write.elapsed() >= Duration::from_secs(2) {
                let partial = self.assemble(plan, layout, state, "running", false);
                self.session.snapshot(&partial);
                last_write = Instant::now();
            }
        };
        self.close_window(plan, layout, state, &mut window);
        reason
    }

    /// Every variant marked in `running` once, in a fresh random order. None when the user
    /// stopped in the middle (an incomplete trial is not kept).
    fn one_trial(
        &mut self,
        plan: &mut Plan<'_>,
        state: &mut State,
        active: Vec<bool>,
        running: &[bool],
    ) -> Option<Pending> {
        let mut order: Vec<usize> = (0..plan.variants.len()).filter(|&v| running[v]).collect();
        self.rng.shuffle(&mut order);
        let work = state.work.clone().expect("prepared");
        let mut samples: Vec<Option<Sample>> = (0..plan.variants.len()).map(|_| None).collect();
        for v in order {
            if self.stop_requested() {
                return None;
            }
            let t = Instant::now();
            samples[v] = Some(run_once(&mut plan.variants[v].body, work[v]));
            state.ran(v, t.elapsed().as_secs_f64());
        }
        Some(Pending { samples, active })
    }

    /// Reads the load since the window opened: keeps its trials (feeding the claims) when it
    /// was quiet, discards them otherwise. Opens the next window.
    fn close_window(
        &mut self,
        plan: &Plan<'_>,
        layout: &Layout,
        state: &mut State,
        window: &mut Window,
    ) {
        // A window too short to count a competing process's ticks (the last of a visit) waits
        // out the minimum: the load while it waits stands for the load while it measured.
        let age = window.opened.elapsed();
        if !window.trials.is_empty() && age < MIN_WINDOW {
            std::thread::sleep(MIN_WINDOW - age);
        }
        let now = self.load.read();
        let load = match (&window.start, &now) {
            (Some(a), Some(b)) => Some(Load::between(a, b, self.load.ticks_per_second())),
            _ => None,
        };
        let loaded = load.is_some_and(|l| l.disturbs(self.cores()));
        let discard = loaded && self.load.discards();
        let trials = std::mem::take(&mut window.trials);
        if let Some(load) = &load {
            for (s, section) in state.sections.iter_mut().enumerate() {
                let ran = trials.iter().filter(|t| t.active[s]).count() as u64;
                if ran > 0 {
                    section.window(load, loaded, discard, ran);
                }
            }
        }
        if !discard {
            for trial in trials {
                self.keep(plan, layout, state, trial);
            }
        }
        *window = Window {
            start: now,
            opened: Instant::now(),
            trials: Vec::new(),
        };
    }

    /// Records a trial and feeds it to the open claims, freezing those it decides.
    fn keep(&mut self, plan: &Plan<'_>, layout: &Layout, state: &mut State, trial: Pending) {
        for (s, &a) in trial.active.iter().enumerate() {
            state.sections[s].trials += u64::from(a);
        }
        let visit = state.visit();
        state.data.push(plan, layout, visit, trial.samples);
        let t = state.data.trials as usize - 1;
        let min_trials = self.limits().min_trials;
        for (spec, claim) in plan.claims.iter().zip(state.claims.iter_mut()) {
            if let Some(result) = claim.keep(spec, &state.data, t, visit, self.eps, min_trials) {
                self.session
                    .progress()
                    .claim_decided(self.info.name, &result);
            }
            claim.expected = claim.outlook();
        }
    }

    fn report_status(&self, state: &State) {
        let claims = state.claims.len();
        self.session.progress().status(
            self.info.name,
            &Status {
                phase: "trials",
                trials: state.data.trials,
                elapsed: self.elapsed(),
                budget: self.slice,
                claims_decided: claims - state.open_claims(),
                claims,
            },
        );
    }
}

/// One run of a variant with `work` units.
fn run_once(body: &mut Body<'_>, work: u64) -> Sample {
    match body {
        Body::PerOp(f) => {
            let span = f(work);
            Sample::new()
                .with("time", span.ns / work as f64)
                .with("ticks", span.ticks / work as f64)
        }
        Body::Calibrated(f) => f(work),
        Body::Fixed(f) => f(),
    }
}
