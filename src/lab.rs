//! `spindle lab`: run experiments with progress (bars on a terminal, one line per experiment
//! and per claim in a pipe), print a summary, point at the report; `--markdown` renders
//! earlier runs' results for `docs/results.md`.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use spindle_lab::report::{format, markdown, stability, terminal};
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
    pub keep_loaded: bool,
    pub markdown: Vec<PathBuf>,
    pub flips: Vec<PathBuf>,
}

/// The `--help` text after the options: time bounds (from the catalogue) and exit codes.
pub fn after_help() -> String {
    // Rounded up to a tenth of a minute: a bound.
    let minutes = |p: Profile| (spindle_lab::time_bound(p).as_secs_f64() / 6.0).ceil() / 10.0;
    format!(
        "Examples:
  spindle lab                     every experiment, quick profile
  spindle lab locks --full        one experiment, full profile
  spindle lab --baseline old/results.json
                                  medians beside an earlier run's (unpaired)
  spindle lab --markdown docs/results/*/results.json > docs/results.md
  spindle lab --flips run1/results.json run2/results.json
                                  did a verdict flip between two runs?

Time: the quick profile takes at most {:.1} minutes and the full profile at most {:.1} minutes \
on any machine, however many experiments exist: a first pass gives each experiment a minimum \
share, and the time left goes to the claims still open. A selection of experiments gets a \
budget of its own. Thread counts and work per run are sized to the machine.

Verdicts: a claim holds when the confidence sequence for the median of its per-trial ratios \
lies more than 2% inside its bound, and is violated when it lies more than 2% beyond it; a \
later batch of trials must agree. Trials measured while other processes load the CPUs are \
discarded.

The report lands in DIR/index.html and DIR/results.json, rewritten every few seconds while the \
lab runs. A complete report already in DIR is kept until this run completes (meanwhile: \
index.partial.html).

Exit codes:
  0    the lab ran to the end (verdicts are in the report)
  1    --strict and a guarantee was violated; --flips and a guarantee flipped
  3    usage error: unknown or unbuilt experiment, bad flag or value,
       unreadable --baseline/--markdown/--flips file
  4    execution error: the report could not be written, or an experiment
       failed
  130  interrupted (Ctrl-C): what was measured so far is written; a second
       Ctrl-C quits at once",
        minutes(Profile::Quick),
        minutes(Profile::Full)
    )
}

pub fn run(args: LabCli) -> CliResult<u8> {
    if args.list {
        return list(&args.experiments, args.json);
    }
    if !args.markdown.is_empty() {
        return render_markdown(&args.markdown);
    }
    if !args.flips.is_empty() {
        return flips(&args.flips, args.json);
    }
    interrupt::install();
    let options = LabOptions {
        experiments: args.experiments,
        profile: args.profile,
        eps: args.eps,
        out: args.out.clone(),
        seed: args.seed,
        baseline: args.baseline,
        keep_loaded: args.keep_loaded,
    };
    let tty = std::io::stderr().is_terminal();
    let banner = Banner {
        profile: args.profile,
        out: args.out.clone(),
    };
    let progress: Box<dyn Progress> = if args.quiet {
        Box::new(Quiet)
    } else if tty {
        Box::new(Bars::new(banner))
    } else {
        Box::new(Lines { banner })
    };
    let outcome = spindle_lab::run(&options, progress.as_ref()).map_err(|e| match e {
        LabError::UnknownExperiment { .. } | LabError::NotBuilt { .. } | LabError::BadOption(_) => {
            CliError::Usage(e.to_string())
        }
        LabError::Output(m) => CliError::Execution(m),
    })?;
    drop(progress);
    let report = &outcome.report;
    if args.json {
        crate::output::print_json(report);
    } else {
        out!("{}", terminal::render(report));
        if let Some(html) = outcome
            .files
            .iter()
            .find(|p| p.extension().is_some_and(|e| e == "html"))
        {
            outln!("report: {}", html.display());
        }
        if let Some(kept) = &outcome.kept_previous {
            outln!(
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
        errln!("spindle: interrupted; the figures measured so far are in the report");
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
        errln!(
            "spindle: --strict: {} guarantee(s) violated",
            report.violated_guarantees()
        );
        return Ok(exit::VIOLATED);
    }
    Ok(exit::HOLDS)
}

/// `--list [NAME…]`: every experiment, or those named (an unknown name is a usage error).
fn list(names: &[String], json: bool) -> CliResult<u8> {
    let mut catalogue = spindle_lab::catalogue();
    if !names.is_empty() {
        let known: Vec<&str> = catalogue.iter().map(|e| e.name).collect();
        if let Some(bad) = names.iter().find(|n| !known.contains(&n.as_str())) {
            return Err(exit::usage(format!(
                "unknown experiment '{bad}' (available: {})",
                known.join(", ")
            )));
        }
        catalogue.retain(|e| names.iter().any(|n| n == e.name));
    }
    if json {
        let built: Vec<serde_json::Value> = catalogue
            .iter()
            .map(|e| {
                serde_json::json!({
                    "name": e.name,
                    "title": e.title,
                    "summary": e.summary,
                    "first_pass_quick_s": spindle_lab::plan(Profile::Quick, &[e.name.to_string()]).first[0].1.as_secs_f64(),
                    "references": e.references.iter().map(|r| r.cite()).collect::<Vec<_>>(),
                })
            })
            .collect();
        let planned: Vec<serde_json::Value> = spindle_lab::experiments::PLANNED
            .iter()
            .map(|(name, what)| serde_json::json!({"name": name, "summary": what}))
            .collect();
        crate::output::print_json(&serde_json::json!({
            "experiments": built,
            "planned": planned,
            "quick_budget_s": spindle_lab::time_bound(Profile::Quick).as_secs_f64(),
            "full_budget_s": spindle_lab::time_bound(Profile::Full).as_secs_f64(),
        }));
        return Ok(exit::HOLDS);
    }
    outln!("Experiments (run them all with `spindle lab`, or name some):");
    for e in catalogue {
        outln!("  {:<11} {} — {}", e.name, e.title, e.summary);
        for r in e.references {
            outln!("  {:<11} reference: {}", "", r.cite());
        }
    }
    if !spindle_lab::experiments::PLANNED.is_empty() {
        outln!("\nPlanned, not built yet:");
        for (name, what) in spindle_lab::experiments::PLANNED {
            outln!("  {name:<11} {what}");
        }
    }
    outln!(
        "\nThe quick profile runs them all in at most {:.0} s, the full profile in at most {:.0} s.",
        spindle_lab::time_bound(Profile::Quick).as_secs_f64(),
        spindle_lab::time_bound(Profile::Full).as_secs_f64()
    );
    Ok(exit::HOLDS)
}

/// `--flips`: do these runs agree?
fn flips(files: &[PathBuf], json: bool) -> CliResult<u8> {
    let reports = files
        .iter()
        .map(|p| spindle_lab::read_report(p))
        .collect::<Result<Vec<_>, _>>()
        .map_err(CliError::Usage)?;
    // Flips say something of this machine only between runs on it.
    let machine = |r: &spindle_lab::results::LabReport| {
        (
            r.machine.cpu_model.clone(),
            r.machine.cpu_family_model.clone(),
            r.machine.cpus_online,
        )
    };
    if let Some((i, _)) = reports
        .iter()
        .enumerate()
        .find(|(_, r)| machine(r) != machine(&reports[0]))
    {
        let name = |r: &spindle_lab::results::LabReport| {
            let m = &r.machine;
            format!(
                "{} ({}), {} CPUs",
                m.cpu_model,
                m.microarchitecture
                    .as_deref()
                    .unwrap_or(&m.cpu_family_model),
                m.cpus_online
            )
        };
        errln!(
            "spindle: warning: {} and {} come from different machines ({}; {}): a claim that differs between them says more about the machines than about the runs' stability",
            files[0].display(),
            files[i].display(),
            name(&reports[0]),
            name(&reports[i]),
        );
    }
    let s = stability::compare(&reports);
    if json {
        crate::output::print_json(&s);
    } else {
        for (i, ((secs, budget), [h, v, u])) in s.seconds.iter().zip(&s.guarantees).enumerate() {
            outln!(
                "run {}: {} — {secs:.0} s{}; guarantees {h} hold, {v} violated, {u} undecided",
                i + 1,
                files[i].display(),
                if *budget > 0.0 {
                    format!(" of at most {budget:.0} s")
                } else {
                    String::new()
                }
            );
        }
        let show = |c: &stability::ClaimAcross| {
            let runs: Vec<String> = c
                .runs
                .iter()
                .map(|r| match r {
                    Some((v, m)) => format!("{} ({})", v.word(c.kind), format::num(*m)),
                    None => "not tested".into(),
                })
                .collect();
            outln!("  {}/{}: {}", c.experiment, c.claim, runs.join(" / "));
        };
        outln!(
            "flipped between holds and violated: {} ({} guarantees)",
            s.flipped.len(),
            s.flipped_guarantees()
        );
        s.flipped.iter().for_each(show);
        outln!(
            "undecided although the median lay ≥ {:.0}% from the bound: {}",
            stability::FAR * 100.0,
            s.undecided_far.len()
        );
        s.undecided_far.iter().for_each(show);
    }
    Ok(if s.flipped_guarantees() > 0 {
        exit::VIOLATED
    } else {
        exit::HOLDS
    })
}

fn render_markdown(files: &[PathBuf]) -> CliResult<u8> {
    let reports = files
        .iter()
        .map(|p| spindle_lab::read_report(p).map(|r| (p.display().to_string(), r)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(CliError::Usage)?;
    out!("{}", markdown::render(&reports));
    Ok(exit::HOLDS)
}

// --- progress displays -----------------------------------------------------------------------

struct Quiet;
impl Progress for Quiet {
    fn stop_requested(&self) -> bool {
        interrupt::requested()
    }
}

/// The line that opens a run, printed once the options are checked and the run is planned.
struct Banner {
    profile: Profile,
    out: PathBuf,
}

impl Banner {
    fn line(&self, budget: Duration, first: &[(&'static str, Duration)]) -> String {
        format!(
            "spindle lab: {} profile, {} experiment(s), at most {:.0} s; report in {} (rewritten as results come in). Ctrl-C stops and keeps what was measured.",
            self.profile.as_str(),
            first.len(),
            budget.as_secs_f64(),
            self.out.display()
        )
    }
}

/// "started (9 s)" / "back for its open claims (12 s)".
fn visit_words(phase: &str, slice: Duration) -> String {
    let what = if phase == "first pass" {
        "started".to_string()
    } else {
        format!("back for its {phase}")
    };
    format!("{what} ({:.0} s)", slice.as_secs_f64())
}

/// In a pipe (CI logs): one line per experiment visit and per claim, as they happen.
struct Lines {
    banner: Banner,
}
impl Progress for Lines {
    fn lab_started(&self, budget: Duration, first: &[(&'static str, Duration)]) {
        errln!("{}", self.banner.line(budget, first));
        errln!(
            "lab: {}",
            first.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
        );
    }
    fn experiment_started(
        &self,
        _index: usize,
        info: &Info,
        slice: Duration,
        phase: &str,
        _lab_elapsed: Duration,
    ) {
        errln!("{}: {}", info.name, visit_words(phase, slice));
    }
    fn claim_decided(&self, experiment: &str, claim: &ClaimResult) {
        errln!("{experiment}: {}", terminal::claim_line(claim));
    }
    fn experiment_finished(&self, result: &ExperimentResult) {
        errln!("{}", terminal::experiment_line(result));
    }
    fn experiment_failed(&self, name: &str, error: &str) {
        errln!("{name}: FAILED — {error}");
    }
    fn stop_requested(&self) -> bool {
        interrupt::requested()
    }
}

/// On a terminal: a bar for the whole run (time against the planner's budget) and one for
/// the current visit; verdicts are printed above the bars as they are decided.
struct Bars {
    banner: Banner,
    multi: MultiProgress,
    overall: ProgressBar,
    current: Mutex<Option<ProgressBar>>,
    /// When the run started and its budget (set by lab_started).
    clock: Mutex<Option<(Instant, Duration)>>,
}

impl Bars {
    fn new(banner: Banner) -> Bars {
        let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
        let overall = multi.add(ProgressBar::new(1));
        overall.set_style(
            ProgressStyle::with_template("{prefix:>11} [{bar:24}] {msg}")
                .expect("valid template")
                .progress_chars("=> "),
        );
        overall.set_prefix("lab");
        Bars {
            banner,
            multi,
            overall,
            current: Mutex::new(None),
            clock: Mutex::new(None),
        }
    }

    /// Moves the overall bar to the run's elapsed time, with what is left of the budget.
    fn tick(&self, what: &str) {
        if let Some((start, budget)) = *self.clock.lock().unwrap_or_else(|e| e.into_inner()) {
            let elapsed = start.elapsed().min(budget);
            self.overall.set_position(elapsed.as_millis() as u64);
            self.overall.set_message(format!(
                "{what}  (at most {:.0} s left)",
                (budget - elapsed).as_secs_f64()
            ));
        }
    }
}

impl Progress for Bars {
    fn lab_started(&self, budget: Duration, first: &[(&'static str, Duration)]) {
        let _ = self.multi.println(self.banner.line(budget, first));
        self.overall.set_length(budget.as_millis().max(1) as u64);
        *self.clock.lock().unwrap_or_else(|e| e.into_inner()) = Some((Instant::now(), budget));
    }
    fn fingerprinting(&self) {
        self.tick("fingerprinting the machine (TSC rate, HZ, round trip, load)");
    }
    fn experiment_started(
        &self,
        _index: usize,
        info: &Info,
        slice: Duration,
        phase: &str,
        _lab_elapsed: Duration,
    ) {
        let bar = self
            .multi
            .add(ProgressBar::new(slice.as_millis().max(1) as u64));
        bar.set_style(
            ProgressStyle::with_template("{prefix:>11} [{bar:24}] {msg}")
                .expect("valid template")
                .progress_chars("=> "),
        );
        bar.set_prefix(info.name);
        self.tick(&format!("{} — {}", info.name, visit_words(phase, slice)));
        if let Some(old) = self
            .current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace(bar)
        {
            old.finish_and_clear();
        }
    }
    fn status(&self, experiment: &str, s: &Status) {
        if let Some(bar) = &*self.current.lock().unwrap_or_else(|e| e.into_inner()) {
            bar.set_position(s.elapsed.as_millis() as u64);
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
        }
        self.tick(experiment);
    }
    fn claim_decided(&self, experiment: &str, claim: &ClaimResult) {
        let _ = self
            .multi
            .println(format!("{experiment}: {}", terminal::claim_line(claim)));
    }
    fn experiment_finished(&self, result: &ExperimentResult) {
        self.end_visit();
        let _ = self.multi.println(terminal::experiment_line(result));
    }
    fn experiment_failed(&self, name: &str, error: &str) {
        self.end_visit();
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
    fn end_visit(&self) {
        if let Some(bar) = self
            .current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            bar.finish_and_clear();
            self.multi.remove(&bar);
        }
    }
}

impl Drop for Bars {
    fn drop(&mut self) {
        self.overall.finish_and_clear();
    }
}
