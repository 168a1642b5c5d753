//! `spindle lab`: run experiments with progress (bars on a terminal, one line per experiment
//! and per claim in a pipe), print a summary, point at the report; `--markdown` renders
//! earlier runs' results for `docs/results.md`.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use spindle_lab::report::{markdown, terminal};
use spindle_lab::{
    ClaimResult, ExperimentResult, Info, LabError, LabOptions, Profile, Progress, Status,
};

use crate::exit::{self, CliError, CliResult};
use crate::interrupt;

pub struct LabCli {
    pub experiments: Vec<String>,
    pub profile: Profile,
    pub list: bool,
    pub json: bool,
    pub out: PathBuf,
    pub eps: f64,
    pub seed: Option<u64>,
    pub quiet: bool,
    pub strict: bool,
    pub baseline: Option<PathBuf>,
    pub markdown: Vec<PathBuf>,
}

/// The `--help` text after the options: time bounds (from the catalogue) and exit codes.
pub fn after_help() -> String {
    // Rounded up to a tenth of a minute: a bound.
    let minutes = |p: Profile| (spindle_lab::time_bound(p).as_secs_f64() / 6.0).ceil() / 10.0;
    format!(
        "Examples:\n  spindle lab                          every experiment, quick profile\n  spindle lab locks --full\n  \
         spindle lab --baseline old/results.json   medians beside an earlier run's (unpaired)\n  \
         spindle lab --markdown docs/results/*/results.json > docs/results.md\n\n\
         Time: the quick profile takes at most {:.1} minutes and the full profile at most {:.1} minutes on any\n\
         machine (each experiment has a time budget; thread counts and work per run are sized to the machine).\n\n\
         The report lands in DIR/index.html and DIR/results.json, rewritten every few seconds while the lab runs.\n\
         A complete report already in DIR is kept until this run completes (meanwhile: index.partial.html).\n\n\
         Exit codes:\n  0    the lab ran to the end (verdicts are in the report)\n  1    --strict and a guarantee was violated\n  \
         3    usage error: unknown experiment, bad flag or value, unreadable --baseline/--markdown file\n  \
         4    execution error: the report could not be written, or an experiment failed\n  \
         130  interrupted (Ctrl-C): what was measured so far is written; a second Ctrl-C quits at once",
        minutes(Profile::Quick),
        minutes(Profile::Full)
    )
}

pub fn run(args: LabCli) -> CliResult<u8> {
    if args.list {
        return list();
    }
    if !args.markdown.is_empty() {
        return render_markdown(&args.markdown);
    }
    interrupt::install();
    let options = LabOptions {
        experiments: args.experiments,
        profile: args.profile,
        eps: args.eps,
        out: args.out.clone(),
        seed: args.seed,
        baseline: args.baseline,
    };
    if !args.quiet {
        eprintln!(
            "spindle lab: {} profile, at most {:.0} s; report in {} (rewritten as results come in). Ctrl-C stops and keeps what was measured.",
            args.profile.as_str(),
            spindle_lab::time_bound(args.profile).as_secs_f64(),
            args.out.display()
        );
    }
    let tty = std::io::stderr().is_terminal();
    let progress: Box<dyn Progress> = if args.quiet {
        Box::new(Quiet)
    } else if tty {
        Box::new(Bars::new())
    } else {
        Box::new(Lines)
    };
    let outcome = spindle_lab::run(&options, progress.as_ref()).map_err(|e| match e {
        LabError::UnknownExperiment { .. } | LabError::BadOption(_) => {
            CliError::Usage(e.to_string())
        }
        LabError::Output(m) => CliError::Execution(m),
    })?;
    drop(progress);
    let report = &outcome.report;
    if args.json {
        crate::output::print_json(report);
    } else {
        print!("{}", terminal::render(report));
        if let Some(html) = outcome
            .files
            .iter()
            .find(|p| p.extension().is_some_and(|e| e == "html"))
        {
            println!("report: {}", html.display());
        }
        if let Some(kept) = &outcome.kept_previous {
            println!(
                "the complete report of an earlier run is still in {} (this run did not complete)",
                kept.display()
            );
        }
    }
    if let Some(e) = outcome.write_error {
        return Err(CliError::Execution(format!(
            "the report could not be written: {e}"
        )));
    }
    if interrupt::requested() {
        eprintln!("spindle: interrupted; the figures measured so far are in the report");
        return Ok(interrupt::INTERRUPTED);
    }
    if !report.failures.is_empty() {
        return Err(CliError::Execution(format!(
            "{} experiment(s) failed: {}",
            report.failures.len(),
            report
                .failures
                .iter()
                .map(|f| f.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    if args.strict && report.violated_guarantees() > 0 {
        eprintln!(
            "spindle: --strict: {} guarantee(s) violated",
            report.violated_guarantees()
        );
        return Ok(exit::VIOLATED);
    }
    Ok(exit::HOLDS)
}

fn list() -> CliResult<u8> {
    println!("Experiments (run them all with `spindle lab`, or name some):");
    for e in spindle_lab::catalogue() {
        println!(
            "  {:<11} {} — {} (quick: ≤ {} s)",
            e.name, e.title, e.summary, e.quick_seconds
        );
        for r in e.references {
            println!("  {:<11} reference: {}", "", r.cite());
        }
    }
    println!("\nPlanned, not built yet:");
    for (name, what) in spindle_lab::experiments::PLANNED {
        println!("  {name:<11} {what}");
    }
    Ok(exit::HOLDS)
}

fn render_markdown(files: &[PathBuf]) -> CliResult<u8> {
    let reports = files
        .iter()
        .map(|p| spindle_lab::read_report(p).map(|r| (p.display().to_string(), r)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(CliError::Usage)?;
    print!("{}", markdown::render(&reports));
    Ok(exit::HOLDS)
}

// --- progress displays -----------------------------------------------------------------------

struct Quiet;
impl Progress for Quiet {
    fn stop_requested(&self) -> bool {
        interrupt::requested()
    }
}

/// In a pipe (CI logs): one line per experiment and per claim, as they happen.
struct Lines;
impl Progress for Lines {
    fn lab_started(&self, plan: &[(&'static str, Duration)]) {
        eprintln!(
            "lab: {} experiment(s): {}",
            plan.len(),
            plan.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
        );
    }
    fn experiment_started(&self, _index: usize, info: &Info, budget: Duration) {
        eprintln!(
            "{}: started (budget {:.0} s)",
            info.name,
            budget.as_secs_f64()
        );
    }
    fn claim_decided(&self, experiment: &str, claim: &ClaimResult) {
        eprintln!("{experiment}: {}", terminal::claim_line(claim));
    }
    fn experiment_finished(&self, result: &ExperimentResult) {
        eprintln!("{}", terminal::experiment_line(result));
    }
    fn experiment_failed(&self, name: &str, error: &str) {
        eprintln!("{name}: FAILED — {error}");
    }
    fn stop_requested(&self) -> bool {
        interrupt::requested()
    }
}

/// On a terminal: a bar for the whole lab (time-based, with an ETA) and one for the current
/// experiment; verdicts are printed above the bars as they are decided.
struct Bars {
    multi: MultiProgress,
    overall: ProgressBar,
    current: Mutex<Option<(ProgressBar, u64)>>,
    /// Budget (ms) of the experiments before the current one.
    done_ms: Mutex<u64>,
}

impl Bars {
    fn new() -> Bars {
        let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
        let overall = multi.add(ProgressBar::new(1));
        overall.set_style(
            ProgressStyle::with_template("{prefix:>11} [{bar:24}] {msg}  (at most {eta} left)")
                .expect("valid template")
                .progress_chars("=> "),
        );
        overall.set_prefix("lab");
        Bars {
            multi,
            overall,
            current: Mutex::new(None),
            done_ms: Mutex::new(0),
        }
    }
}

impl Progress for Bars {
    fn fingerprinting(&self) {
        self.overall
            .set_message("fingerprinting the machine (TSC rate, HZ, round trip, load)");
    }
    fn lab_started(&self, plan: &[(&'static str, Duration)]) {
        let total: u64 = plan.iter().map(|(_, b)| b.as_millis() as u64).sum();
        self.overall.set_length(total.max(1));
        self.overall.reset_eta();
    }
    fn experiment_started(&self, _index: usize, info: &Info, budget: Duration) {
        let bar = self.multi.add(ProgressBar::new(budget.as_millis() as u64));
        bar.set_style(
            ProgressStyle::with_template("{prefix:>11} [{bar:24}] {msg}")
                .expect("valid template")
                .progress_chars("=> "),
        );
        bar.set_prefix(info.name);
        self.overall
            .set_message(format!("{} — {}", info.name, info.title));
        if let Some((old, _)) = self
            .current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace((bar, budget.as_millis() as u64))
        {
            old.finish_and_clear();
        }
    }
    fn status(&self, _experiment: &str, s: &Status) {
        if let Some((bar, budget)) = &*self.current.lock().unwrap_or_else(|e| e.into_inner()) {
            let ms = (s.elapsed.as_millis() as u64).min(*budget);
            bar.set_position(ms);
            let claims = if s.claims > 0 {
                format!(" · {}/{} claims decided", s.claims_decided, s.claims)
            } else {
                String::new()
            };
            let what = if s.phase == "trials" {
                format!("trial {}{claims}", s.trials)
            } else {
                s.phase.to_string()
            };
            bar.set_message(format!(
                "{:.0} s of ≤ {:.0} s · {what}",
                s.elapsed.as_secs_f64(),
                s.budget.as_secs_f64()
            ));
            self.overall
                .set_position(*self.done_ms.lock().unwrap_or_else(|e| e.into_inner()) + ms);
        }
    }
    fn claim_decided(&self, experiment: &str, claim: &ClaimResult) {
        let _ = self
            .multi
            .println(format!("{experiment}: {}", terminal::claim_line(claim)));
    }
    fn experiment_finished(&self, result: &ExperimentResult) {
        self.end_experiment();
        let _ = self.multi.println(terminal::experiment_line(result));
    }
    fn experiment_failed(&self, name: &str, error: &str) {
        self.end_experiment();
        let _ = self.multi.println(format!("{name}: FAILED — {error}"));
    }
    fn stop_requested(&self) -> bool {
        let stop = interrupt::requested();
        if stop {
            self.overall
                .set_message("interrupted: finishing the current run and writing the report…");
        }
        stop
    }
}

impl Bars {
    fn end_experiment(&self) {
        if let Some((bar, budget)) = self
            .current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            bar.finish_and_clear();
            self.multi.remove(&bar);
            *self.done_ms.lock().unwrap_or_else(|e| e.into_inner()) += budget;
            self.overall
                .set_position(*self.done_ms.lock().unwrap_or_else(|e| e.into_inner()));
        }
    }
}

impl Drop for Bars {
    fn drop(&mut self) {
        self.overall.finish_and_clear();
    }
}
