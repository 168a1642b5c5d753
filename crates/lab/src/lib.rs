//! # spindle-lab: reproduce every performance claim on the user's own machine
//!
//! The lab runs *experiments*. An experiment declares *sections* of *variants* — Spindle's
//! primitives, the peers a user would otherwise pick, and floors — and what one run of a
//! variant measures (any number of named metrics). The [`runner`] measures them in
//! *trials* that run each variant of the sections still at work once (past a section's table
//! minimum, only the variants its open claims compare), in a random order that keeps each
//! section's variants together, and decides *claims* about ratios between variants measured
//! in the same trial from Robbins' confidence sequence for their median
//! ([`spindle_stats::ToleranceGate`]): holds, violated, or undecided (never rounded to a pass).
//! The [`planner`] shares one time budget among the experiments.
//!
//! Claims are of two kinds. A **guarantee** is Spindle's promise about its own code; a
//! violation is a defect. A **reproduction** re-measures a figure of a source document; its
//! verdict says whether this machine agrees with the document's.
//!
//! Every result carries a [`Machine`] fingerprint. A run writes `results.json` and a
//! self-contained `index.html` while it runs (atomically, every few seconds), and never
//! overwrites a complete earlier report in the same directory until it is complete itself.
//!
//! | module | job |
//! |---|---|
//! | [`spec`] | how an experiment is declared: sections, metrics, variants, samples, claims |
//! | [`planner`] | the run's one time budget: a first pass of minimum shares, then visits to open claims |
//! | [`runner`] | one visit of an experiment: calibration, interleaved trials of the sections at work, claim tests, snapshots |
//! | [`load`] | other processes' CPU time during a window of trials |
//! | [`kit`] | cache padding, timed spans, thread groups, calibration, medians |
//! | [`experiments`] | the catalogue, one file per experiment |
//! | [`results`] | the schema of `results.json` |
//! | [`report`] | HTML with SVG charts, terminal summary, Markdown, baseline comparison |
//! | [`progress`] | the trait through which the lab reports progress (the binary draws it) |
//! | [`machine`], [`sys`] | the fingerprint; TSC, pinning, feature probes |
//!
//! The library never prints: progress goes through the [`Progress`] trait, which the
//! `spindle` binary implements with progress bars or log lines.
//!
//! Dependencies inside the crate point one way: `experiments` → `runner` → `spec`, `kit`,
//! `load`, `results`, `progress`; `planner` → `runner`; `report` → `results`; `lib` wires them
//! together.

// The examples of the workspace README (which use spindle-sync and spindle-fmt, both
// dependencies of the lab) are compiled and run as doctests here.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct WorkspaceReadmeDoctests;

pub mod experiments;
pub mod kit;
pub mod load;
pub mod machine;
pub mod planner;
pub mod progress;
pub mod references;
pub mod report;
pub mod results;
pub mod runner;
pub mod spec;
pub mod sys;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use spindle_stats::rng::SplitMix64;

pub use machine::Machine;
pub use planner::LabPlan;
pub use progress::{Progress, Silent, Status};
pub use results::{
    ClaimKind, ClaimResult, ExperimentResult, LabReport, Profile, RunState, Verdict,
};
use runner::{Experiment, Saved};
pub use spec::Info;

/// The commit this binary was built from, recorded by the build script.
pub const COMMIT: &str = env!("SPINDLE_COMMIT");

/// Whether this build aligns every loop to 64 bytes (`-C llvm-args=-align-loops=64`, set in
/// `.cargo/config.toml`; a `RUSTFLAGS` variable replaces it). Without it, loops of a few
/// cycles (a signal, a push and a pop) take a cycle more where they happen to cross a 64-byte
/// boundary, and their verdicts can change from one build to the next.
pub const LOOPS_ALIGNED: bool = matches!(env!("SPINDLE_LOOPS_ALIGNED").as_bytes(), b"1");

/// What to run and where to write.
#[derive(Clone, Debug)]
pub struct LabOptions {
    /// Experiment names; empty = all.
    pub experiments: Vec<String>,
    pub profile: Profile,
    /// False-positive rate of each claim.
    pub eps: f64,
    /// Report directory.
    pub out: PathBuf,
    /// Seed for the order of variants within trials (default: from the clock).
    pub seed: Option<u64>,
    /// An earlier `results.json` to compare medians with (unpaired).
    pub baseline: Option<PathBuf>,
    /// Keep trials measured while other processes loaded the CPUs (the load is still
    /// recorded per section); by default they are discarded.
    pub keep_loaded: bool,
}

/// Problems that stop the lab before it measures anything.
#[derive(Debug)]
pub enum LabError {
    /// A name that is not in the catalogue.
    UnknownExperiment {
        name: String,
        known: Vec<&'static str>,
    },
    /// A planned experiment that is not built yet.
    NotBuilt { name: String, what: &'static str },
    /// An option out of range, or a baseline file that cannot be used.
    BadOption(String),
    /// The report directory cannot be created or written.
    Output(String),
}

impl std::fmt::Display for LabError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LabError::UnknownExperiment { name, known } => write!(
                f,
                "unknown experiment '{name}' (available: {}; see --list)",
                known.join(", ")
            ),
            LabError::NotBuilt { name, what } => write!(
                f,
                "experiment '{name}' ({what}) is planned, not built yet (see --list)"
            ),
            LabError::BadOption(m) | LabError::Output(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for LabError {}

/// A finished (or interrupted) lab run.
pub struct LabOutcome {
    pub report: LabReport,
    /// Files written last.
    pub files: Vec<PathBuf>,
    /// A complete report from an earlier run that was left in place because this run did not
    /// complete (its path).
    pub kept_previous: Option<PathBuf>,
    /// Set when the report could not be (re)written at some point; the results are still in
    /// `report`.
    pub write_error: Option<String>,
}

/// The experiments the lab knows, in run order.
pub fn catalogue() -> Vec<Info> {
    experiments::all().iter().map(|e| e.info()).collect()
}

/// The plan of a run of `experiments` (empty: all) in `profile`: the time budget of the whole
/// run, fingerprint included, and each experiment's first slice. Unknown names are left out
/// (`run` refuses them).
pub fn plan(profile: Profile, experiments: &[String]) -> planner::LabPlan {
    let all = catalogue();
    let selected: Vec<Info> = all
        .iter()
        .filter(|i| experiments.is_empty() || experiments.iter().any(|n| n == i.name))
        .copied()
        .collect();
    planner::LabPlan::new(profile, &all, &selected)
}

/// Upper bound on a whole lab run in `profile` (every experiment), fingerprint included.
pub fn time_bound(profile: Profile) -> Duration {
    plan(profile, &[]).budget
}

/// Reads an earlier run's `results.json`.
pub fn read_report(path: &Path) -> Result<LabReport, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    LabReport::from_json(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Checks the options and picks the experiments, before anything is measured.
fn select(options: &LabOptions) -> Result<Vec<Box<dyn Experiment>>, LabError> {
    if !(options.eps > 0.0 && options.eps < 0.5) {
        return Err(LabError::BadOption(format!(
            "eps = {} is outside (0, 0.5)",
            options.eps
        )));
    }
    let all = experiments::all();
    let known: Vec<&'static str> = all.iter().map(|e| e.info().name).collect();
    for name in &options.experiments {
        if let Some((_, what)) = experiments::PLANNED.iter().find(|(n, _)| n == name) {
            return Err(LabError::NotBuilt {
                name: name.clone(),
                what,
            });
        }
        if !known.contains(&name.as_str()) {
            return Err(LabError::UnknownExperiment {
                name: name.clone(),
                known,
            });
        }
    }
    Ok(all
        .into_iter()
        .filter(|e| {
            options.experiments.is_empty() || options.experiments.iter().any(|n| n == e.info().name)
        })
        .collect())
}

/// Runs the selected experiments, writing the report as results come in: a first pass gives
/// every experiment its minimum share, then the planner spends what is left on the
/// experiments whose claims are still open (see [`planner`]).
pub fn run(options: &LabOptions, progress: &dyn Progress) -> Result<LabOutcome, LabError> {
    let selected = select(options)?;
    let baseline = match &options.baseline {
        Some(p) => Some((p.clone(), read_report(p).map_err(LabError::BadOption)?)),
        None => None,
    };
    // Fail before measuring anything if the report cannot be written.
    let writer = report::ReportWriter::open(&options.out).map_err(LabError::Output)?;
    let plan = plan(options.profile, &options.experiments);

    let lab_start = Instant::now();
    progress.lab_started(plan.budget, &plan.first);
    progress.fingerprinting();
    let machine = Machine::detect();
    let started_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let report = LabReport {
        schema: results::SCHEMA,
        tool: "spindle".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        commit: COMMIT.into(),
        started_unix,
        started_utc: results::utc_string(started_unix),
        lab_seconds: 0.0,
        profile: options.profile,
        budget_s: plan.budget.as_secs_f64(),
        eps: options.eps,
        state: RunState::Running,
        machine,
        baseline: baseline.as_ref().map(|(p, b)| results::BaselineInfo {
            path: p.display().to_string(),
            started_utc: b.started_utc.clone(),
            machine: b.machine.one_line(),
            commit: b.commit.clone(),
        }),
        experiments: Vec::new(),
        failures: Vec::new(),
    };
    let mut lab = Lab {
        options,
        progress,
        writer: &writer,
        baseline: baseline.as_ref().map(|b| &b.1),
        lab_start,
        rng: options
            .seed
            .map(SplitMix64::new)
            .unwrap_or_else(SplitMix64::from_entropy),
        load: load::ProcLoad::new(&report.machine.cpus_allowed, !options.keep_loaded),
        saved: (0..selected.len()).map(|_| None).collect(),
        files: Vec::new(),
        write_error: None,
        report,
    };
    lab.write();

    for (index, experiment) in selected.iter().enumerate() {
        if progress.stop_requested() {
            break;
        }
        let slice = plan.first_slice(index, lab_start.elapsed());
        lab.visit(index, experiment.as_ref(), slice, "first pass");
    }
    while !progress.stop_requested() {
        let saved: Vec<Option<&Saved>> = lab.saved.iter().map(|s| s.as_ref()).collect();
        let Some((index, slice)) = plan.next_visit(lab_start.elapsed(), &saved) else {
            break;
        };
        lab.visit(index, selected[index].as_ref(), slice, "open claims");
    }
    lab.finish()
}

/// One lab run in progress.
struct Lab<'a> {
    options: &'a LabOptions,
    progress: &'a dyn Progress,
    writer: &'a report::ReportWriter,
    baseline: Option<&'a LabReport>,
    lab_start: Instant,
    rng: SplitMix64,
    load: load::ProcLoad,
    /// Each selected experiment's state between visits (None before its first, or after it
    /// failed).
    saved: Vec<Option<Saved>>,
    report: LabReport,
    files: Vec<PathBuf>,
    write_error: Option<String>,
}

impl Lab<'_> {
    fn write(&mut self) {
        self.report.lab_seconds = self.lab_start.elapsed().as_secs_f64();
        match self.writer.write(&self.report) {
            Ok(f) => self.files = f,
            Err(e) => self.write_error = Some(e),
        }
    }

    /// One visit of an experiment: runs it in a slice of time and puts its result (so far) in
    /// the report, or records its failure with what it measured before.
    fn visit(
        &mut self,
        index: usize,
        experiment: &dyn Experiment,
        slice: Duration,
        phase: &'static str,
    ) {
        let info = experiment.info();
        self.progress
            .experiment_started(index, &info, slice, phase, self.lab_start.elapsed());
        let mut session = RunSession {
            progress: self.progress,
            report: &self.report,
            writer: self.writer,
            baseline: self.baseline,
            latest: None,
            write_error: None,
            lab_start: self.lab_start,
        };
        let visit = runner::VisitPlan {
            slice,
            phase,
            resume: self.saved[index].take(),
        };
        let seed = self.rng.next_u64();
        let (outcome, result, saved) = {
            let mut ctx = runner::Ctx::new(
                &self.report.machine,
                self.options.profile,
                self.options.eps,
                info,
                seed,
                &mut session,
                &mut self.load,
                visit,
            );
            // A panicking experiment must not take the others' results with it.
            let r = catch_unwind(AssertUnwindSafe(|| experiment.run(&mut ctx)));
            (r, ctx.result.take(), ctx.saved.take())
        };
        let latest = session.latest.take();
        if let Some(e) = session.write_error.take() {
            self.write_error = Some(e);
        }
        let failure = match (outcome, result) {
            (Ok(Ok(())), Some(mut result)) => {
                annotate(&mut result, self.baseline);
                self.progress.experiment_finished(&result);
                put(&mut self.report.experiments, result);
                self.saved[index] = saved;
                None
            }
            (Ok(Ok(())), None) => {
                Some("the experiment measured nothing (it never called measure)".to_string())
            }
            (Ok(Err(e)), _) => Some(e),
            (Err(panic), _) => Some(format!("panicked: {}", panic_message(&panic))),
        };
        if let Some(error) = failure {
            self.progress.experiment_failed(info.name, &error);
            // Keep what it measured before it failed.
            if let Some(mut partial) = latest {
                partial.complete = false;
                partial.stop_reason = format!("failed: {error}");
                put(&mut self.report.experiments, partial);
            }
            self.report.failures.push(results::ExperimentFailure {
                name: info.name.into(),
                error,
            });
        }
        self.write();
    }

    /// Announces the claims left undecided, measures the round trip again and writes the final
    /// report.
    fn finish(mut self) -> Result<LabOutcome, LabError> {
        for e in &self.report.experiments {
            for c in e.claims.iter().filter(|c| c.verdict == Verdict::Undecided) {
                self.progress.claim_decided(&e.name, c);
            }
        }
        let interrupted = self.progress.stop_requested();
        if !interrupted {
            self.report.machine.remeasure_at_end();
        }
        self.report.state = if interrupted {
            RunState::Interrupted
        } else {
            RunState::Complete
        };
        self.report.lab_seconds = self.lab_start.elapsed().as_secs_f64();
        let kept_previous = match self.writer.finish(&self.report) {
            Ok(f) => {
                self.files = f;
                self.writer.kept_previous(&self.report)
            }
            Err(e) => {
                self.write_error = Some(e);
                None
            }
        };
        Ok(LabOutcome {
            report: self.report,
            files: self.files,
            kept_previous,
            write_error: self.write_error,
        })
    }
}

/// Puts an experiment's result in the report's list, replacing an earlier visit's.
fn put(experiments: &mut Vec<ExperimentResult>, result: ExperimentResult) {
    match experiments.iter_mut().find(|e| e.name == result.name) {
        Some(old) => *old = result,
        None => experiments.push(result),
    }
}

/// Adds the `--baseline` comparison to a result.
fn annotate(result: &mut ExperimentResult, baseline: Option<&LabReport>) {
    if let Some(b) = baseline {
        report::baseline::annotate(result, b);
    }
}

struct RunSession<'a> {
    progress: &'a dyn Progress,
    report: &'a LabReport,
    writer: &'a report::ReportWriter,
    baseline: Option<&'a LabReport>,
    latest: Option<ExperimentResult>,
    write_error: Option<String>,
    lab_start: Instant,
}

impl runner::Session for RunSession<'_> {
    fn progress(&self) -> &dyn Progress {
        self.progress
    }

    fn snapshot(&mut self, result: &ExperimentResult) {
        let mut result = result.clone();
        annotate(&mut result, self.baseline);
        let mut report = self.report.clone();
        put(&mut report.experiments, result.clone());
        report.lab_seconds = self.lab_start.elapsed().as_secs_f64();
        if let Err(e) = self.writer.write(&report) {
            self.write_error = Some(e);
        }
        self.latest = Some(result);
    }
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}
