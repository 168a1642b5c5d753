//! # spindle-lab: reproduce every performance claim on the user's own machine
//!
//! The lab runs *experiments*. An experiment declares *sections* of *variants* — Spindle's
//! primitives, the peers a user would otherwise pick, and floors — and what one run of a
//! variant measures (any number of named metrics). The [runner](runner) measures them in
//! *trials* that run every variant once in a random order, and decides *claims* about ratios
//! between variants measured in the same trial with a CSM [`spindle_stats::Driver`]: holds,
//! violated, or undecided (never rounded to a pass).
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
//! | [`runner`] | budgets, calibration, interleaved trials, drivers, snapshots |
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
//! `results`, `progress`; `report` → `results`; `lib` wires them together.

pub mod experiments;
pub mod kit;
pub mod machine;
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
pub use progress::{Progress, Silent, Status};
pub use results::{
    ClaimKind, ClaimResult, ExperimentResult, LabReport, Profile, RunState, Verdict,
};
pub use spec::Info;

/// The commit this binary was built from, recorded by the build script.
pub const COMMIT: &str = env!("SPINDLE_COMMIT");

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
}

/// Problems that stop the lab before it measures anything.
#[derive(Debug)]
pub enum LabError {
    /// A name that is not in the catalogue.
    UnknownExperiment {
        name: String,
        known: Vec<&'static str>,
    },
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

/// Upper bound on a whole lab run in `profile`, fingerprint included (the sum of the
/// experiments' budgets plus a few seconds).
pub fn time_bound(profile: Profile) -> Duration {
    catalogue()
        .iter()
        .map(|i| runner::budget(profile, i))
        .sum::<Duration>()
        + Duration::from_secs(5)
}

/// Reads an earlier run's `results.json`.
pub fn read_report(path: &Path) -> Result<LabReport, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    LabReport::from_json(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Runs the selected experiments, writing the report as results come in.
pub fn run(options: &LabOptions, progress: &dyn Progress) -> Result<LabOutcome, LabError> {
    if !(options.eps > 0.0 && options.eps < 0.5) {
        return Err(LabError::BadOption(format!(
            "eps = {} is outside (0, 0.5)",
            options.eps
        )));
    }
    let all = experiments::all();
    let known: Vec<&'static str> = all.iter().map(|e| e.info().name).collect();
    for name in &options.experiments {
        if !known.contains(&name.as_str()) {
            return Err(LabError::UnknownExperiment {
                name: name.clone(),
                known,
            });
        }
    }
    let selected: Vec<_> = all
        .into_iter()
        .filter(|e| {
            options.experiments.is_empty() || options.experiments.iter().any(|n| n == e.info().name)
        })
        .collect();
    let baseline = match &options.baseline {
        Some(p) => Some((p.clone(), read_report(p).map_err(LabError::BadOption)?)),
        None => None,
    };
    // Fail before measuring anything if the report cannot be written.
    let writer = report::ReportWriter::open(&options.out).map_err(LabError::Output)?;

    let lab_start = Instant::now();
    progress.fingerprinting();
    let machine = Machine::detect();
    let started_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let mut report = LabReport {
        schema: results::SCHEMA,
        tool: "spindle".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        commit: COMMIT.into(),
        started_unix,
        started_utc: results::utc_string(started_unix),
        lab_seconds: 0.0,
        profile: options.profile,
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
    let plan: Vec<(&'static str, Duration)> = selected
        .iter()
        .map(|e| (e.info().name, runner::budget(options.profile, &e.info())))
        .collect();
    progress.lab_started(&plan);
    let mut rng = options
        .seed
        .map(SplitMix64::new)
        .unwrap_or_else(SplitMix64::from_entropy);
    let mut write_error = None;
    let mut files = Vec::new();
    report.lab_seconds = lab_start.elapsed().as_secs_f64();
    match writer.write(&report) {
        Ok(f) => files = f,
        Err(e) => write_error = Some(e),
    }

    for (index, experiment) in selected.iter().enumerate() {
        if progress.stop_requested() {
            break;
        }
        let info = experiment.info();
        progress.experiment_started(index, &info, runner::budget(options.profile, &info));
        let mut session = RunSession {
            progress,
            report: &report,
            writer: &writer,
            baseline: baseline.as_ref().map(|b| &b.1),
            latest: None,
            write_error: None,
            lab_start,
        };
        let seed = rng.next_u64();
        let outcome = {
            let mut ctx = runner::Ctx::new(
                &report.machine,
                options.profile,
                options.eps,
                info,
                seed,
                &mut session,
            );
            // A panicking experiment must not take the others' results with it.
            let r = catch_unwind(AssertUnwindSafe(|| experiment.run(&mut ctx)));
            (r, ctx.result.take())
        };
        let latest = session.latest.take();
        if let Some(e) = session.write_error.take() {
            write_error = Some(e);
        }
        let failure = match outcome {
            (Ok(Ok(())), Some(mut result)) => {
                annotate(&mut result, baseline.as_ref().map(|b| &b.1));
                progress.experiment_finished(&result);
                report.experiments.push(result);
                None
            }
            (Ok(Ok(())), None) => {
                Some("the experiment measured nothing (it never called measure)".to_string())
            }
            (Ok(Err(e)), _) => Some(e),
            (Err(panic), _) => Some(format!("panicked: {}", panic_message(&panic))),
        };
        if let Some(error) = failure {
            progress.experiment_failed(info.name, &error);
            // Keep what it measured before it failed.
            if let Some(mut partial) = latest {
                partial.complete = false;
                partial.stop_reason = format!("failed: {error}");
                report.experiments.push(partial);
            }
            report.failures.push(results::ExperimentFailure {
                name: info.name.into(),
                error,
            });
        }
        report.lab_seconds = lab_start.elapsed().as_secs_f64();
        match writer.write(&report) {
            Ok(f) => files = f,
            Err(e) => write_error = Some(e),
        }
    }

    let interrupted = progress.stop_requested();
    if !interrupted {
        report.machine.remeasure_at_end();
    }
    report.state = if interrupted {
        RunState::Interrupted
    } else {
        RunState::Complete
    };
    report.lab_seconds = lab_start.elapsed().as_secs_f64();
    let kept_previous = match writer.finish(&report) {
        Ok(f) => {
            files = f;
            writer.kept_previous(&report)
        }
        Err(e) => {
            write_error = Some(e);
            None
        }
    };
    Ok(LabOutcome {
        report,
        files,
        kept_previous,
        write_error,
    })
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
        report.experiments.push(result.clone());
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
