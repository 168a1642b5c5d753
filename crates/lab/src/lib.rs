//! # spindle-lab: reproduce every performance claim on the user's own machine
//!
//! The lab runs *experiments*. An experiment measures *variants* — Spindle's primitives and the
//! peers a user would otherwise pick — in *trials* that run every variant once in a random order,
//! and states *claims* about ratios between variants measured in the same trial. A CSM
//! [`spindle_stats::Driver`] decides each claim with a bounded false-positive rate: holds,
//! violated, or undecided (never rounded to a pass).
//!
//! Every result carries a [`Machine`] fingerprint, and a run writes `results.json` and a
//! self-contained `index.html` (tables and SVG charts) after *each* experiment, so an
//! interrupted run keeps what it measured.
//!
//! | module | job |
//! |---|---|
//! | [`machine`] | CPU, kernel, HZ, clocksource, TSC rate, membarrier, rseq, perf counters |
//! | [`sys`] | TSC, pinning, feature probes |
//! | [`harness`] | threads released together, interleaved trials, claims and their verdicts |
//! | [`experiments`] | the catalogue, one file per experiment |
//! | [`report`] | JSON, HTML with SVG charts, terminal summary |

pub mod experiments;
pub mod harness;
pub mod machine;
pub mod report;
pub mod sys;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use spindle_stats::rng::SplitMix64;

pub use experiments::ExperimentInfo;
pub use harness::{Profile, Verdict};
pub use machine::Machine;
pub use report::{ExperimentFailure, ExperimentResult, LabReport};

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
    /// No progress bars.
    pub quiet: bool,
    /// Seed for the order of variants within trials (default: from the clock).
    pub seed: Option<u64>,
}

/// Problems that stop the lab before it measures anything.
#[derive(Debug)]
pub enum LabError {
    /// A name that is not in the catalogue.
    UnknownExperiment {
        name: String,
        known: Vec<&'static str>,
    },
    /// An option out of range.
    BadOption(String),
    /// The report directory cannot be created or written.
    Output(String),
}

impl std::fmt::Display for LabError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LabError::UnknownExperiment { name, known } => {
                write!(
                    f,
                    "unknown experiment '{name}' (available: {}; see --list)",
                    known.join(", ")
                )
            }
            LabError::BadOption(m) | LabError::Output(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for LabError {}

/// A finished lab run.
pub struct LabOutcome {
    pub report: LabReport,
    /// Files written.
    pub files: Vec<PathBuf>,
    /// Set when the report could not be (re)written at some point; the results are still in
    /// `report`.
    pub write_error: Option<String>,
}

/// The experiments the lab knows, in run order.
pub fn catalogue() -> Vec<ExperimentInfo> {
    experiments::all().iter().map(|e| e.info()).collect()
}

/// Runs the selected experiments, writing the report after each one.
pub fn run(options: &LabOptions) -> Result<LabOutcome, LabError> {
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
    // Fail before measuring anything if the report cannot be written.
    check_writable(&options.out)?;

    let multi = MultiProgress::with_draw_target(if options.quiet {
        ProgressDrawTarget::hidden()
    } else {
        ProgressDrawTarget::stderr()
    });
    let spinner = multi.add(ProgressBar::new_spinner());
    spinner.set_message("fingerprinting the machine (TSC rate, HZ, kernel features)");
    spinner.enable_steady_tick(Duration::from_millis(100));
    let machine = Machine::detect();
    spinner.finish_and_clear();

    let started_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let mut report = LabReport {
        tool: "spindle",
        version: env!("CARGO_PKG_VERSION"),
        started_unix,
        started_utc: report::utc_string(started_unix),
        profile: options.profile,
        eps: options.eps,
        machine,
        experiments: Vec::new(),
        failures: Vec::new(),
        partial: true,
    };
    let overall = multi.add(ProgressBar::new(selected.len() as u64));
    overall.set_style(
        ProgressStyle::with_template("{prefix:>10} [{bar:20}] {pos}/{len} experiments  {msg}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    overall.set_prefix("lab");
    let mut rng = options
        .seed
        .map(SplitMix64::new)
        .unwrap_or_else(SplitMix64::from_entropy);
    let mut files = Vec::new();
    let mut write_error = None;

    for experiment in &selected {
        let info = experiment.info();
        overall.set_message(format!("{} — {}", info.name, info.title));
        let bar = multi.add(ProgressBar::new(1));
        bar.set_style(
            ProgressStyle::with_template(
                "{prefix:>10} [{bar:20}] {pos}/{len} trials  {elapsed}  {msg}",
            )
            .expect("valid template")
            .progress_chars("=> "),
        );
        bar.set_prefix(info.name);
        let mut ctx = harness::Ctx {
            profile: options.profile,
            eps: options.eps,
            machine: &report.machine,
            progress: bar.clone(),
            rng: SplitMix64::new(rng.next_u64()),
        };
        // A panicking experiment must not take the others' results with it.
        let result = catch_unwind(AssertUnwindSafe(|| experiment.run(&mut ctx)));
        bar.finish_and_clear();
        multi.remove(&bar);
        match result {
            Ok(Ok(r)) => report.experiments.push(r),
            Ok(Err(e)) => report.failures.push(ExperimentFailure {
                name: info.name.into(),
                error: e,
            }),
            Err(panic) => report.failures.push(ExperimentFailure {
                name: info.name.into(),
                error: format!("panicked: {}", panic_message(&panic)),
            }),
        }
        overall.inc(1);
        // Save after every experiment: an interrupted run keeps what it measured.
        match report::write_report(&options.out, &report) {
            Ok(f) => files = f,
            Err(e) => write_error = Some(e),
        }
    }
    overall.finish_and_clear();
    report.partial = false;
    match report::write_report(&options.out, &report) {
        Ok(f) => files = f,
        Err(e) => write_error = Some(e),
    }
    Ok(LabOutcome {
        report,
        files,
        write_error,
    })
}

fn check_writable(dir: &Path) -> Result<(), LabError> {
    std::fs::create_dir_all(dir).map_err(|e| {
        LabError::Output(format!(
            "cannot create report directory {}: {e}",
            dir.display()
        ))
    })?;
    let probe = dir.join(".spindle-write-test");
    std::fs::write(&probe, b"").map_err(|e| {
        LabError::Output(format!(
            "cannot write into report directory {}: {e}",
            dir.display()
        ))
    })?;
    let _ = std::fs::remove_file(probe);
    Ok(())
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}
