//! `spindle slo`: run a command until the CSM can say whether it meets a success-rate objective.

use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use spindle_stats::{quantile_interval, Decision, Driver, DriverConfig, Step};

use crate::exec::{CommandLine, RunEnd};
use crate::exit::{self, CliResult};
use crate::interrupt;
use crate::output;
use crate::units::{count, format_percent, format_probability, format_seconds};

pub struct SloArgs {
    pub rate: f64,
    pub under: Option<Duration>,
    pub eps: f64,
    pub min_runs: u64,
    pub max_runs: u64,
    pub timeout: Option<Duration>,
    pub max_time: Option<Duration>,
    pub json: bool,
    pub quiet: bool,
    pub command: CommandLine,
}

#[derive(Serialize)]
struct FailureCounts {
    nonzero_exit: u64,
    killed_by_signal: u64,
    too_slow: u64,
    timed_out: u64,
}

#[derive(Serialize)]
struct RunTimes {
    min_s: f64,
    median_s: f64,
    p99_s: Option<f64>,
    max_s: f64,
}

#[derive(Serialize)]
struct SloReport {
    verdict: &'static str,
    exit_code: u8,
    reason: String,
    command: String,
    rate: f64,
    under_s: Option<f64>,
    eps: f64,
    runs: u64,
    successes: u64,
    estimate: f64,
    /// Confidence interval of the success rate (confidence sequence: valid at the stopping time).
    interval: [f64; 2],
    interval_level: f64,
    /// Bayesian credible interval (uniform prior) at the same nominal level.
    credible_interval: [f64; 2],
    failures: FailureCounts,
    run_time: Option<RunTimes>,
    wall_s: f64,
}

pub fn run(args: SloArgs) -> CliResult<u8> {
    let config = DriverConfig::new(args.rate, args.eps)
        .min_count(args.min_runs)
        .max_count(args.max_runs);
    let mut driver = Driver::new(config)?;
    let progress = progress_bar(args.quiet);
    let started = Instant::now();
    let mut failures = FailureCounts {
        nonzero_exit: 0,
        killed_by_signal: 0,
        too_slow: 0,
        timed_out: 0,
    };
    let mut times = Vec::new();
    let mut interval_at = Instant::now();
    let mut interval = (0.0, 1.0);
    let mut stopped_by_clock = false;
    let mut longest_run = Duration::ZERO;
    let mut error = None;
    let mut interrupted = false;
    // Ctrl-C: stop after the run in flight (which the terminal's Ctrl-C reaches too, and which
    // does not count) and report what was measured; a second one ends the process at once.
    interrupt::install();

    loop {
        if interrupt::requested() {
            interrupted = true;
            break;
        }
        // --max-time is a bound: a run that would end past it, if it took as long as the
        // longest so far, is not started (the first always is).
        if let Some(limit) = args.max_time {
            if driver.n() > 0 && started.elapsed() + longest_run > limit {
                stopped_by_clock = true;
                break;
            }
        }
        let run = match args.command.run(args.timeout) {
            // A run that Ctrl-C reached says nothing of the command.
            _ if interrupt::requested() => {
                interrupted = true;
                break;
            }
            Ok(run) => run,
            Err(e) => {
                // Keep what was measured: report it, then fail with the error's code.
                error = Some(e);
                break;
            }
        };
        times.push(run.elapsed.as_secs_f64());
        longest_run = longest_run.max(run.elapsed);
        let fast_enough = args.under.is_none_or(|limit| run.elapsed <= limit);
        let success = match run.end {
            RunEnd::Exited(Some(0)) if fast_enough => true,
            RunEnd::Exited(Some(0)) => {
                failures.too_slow += 1;
                false
            }
            RunEnd::Exited(Some(_)) => {
                failures.nonzero_exit += 1;
                false
            }
            RunEnd::Exited(None) => {
                failures.killed_by_signal += 1;
                false
            }
            RunEnd::TimedOut => {
                failures.timed_out += 1;
                false
            }
        };
        let step = driver.observe(success);
        if driver.n() == 1 || interval_at.elapsed() > Duration::from_millis(250) {
            interval = driver.confidence_interval();
            interval_at = Instant::now();
        }
        progress.set_message(format!(
            "{} · {} · estimate {} · interval [{}, {}]",
            count(driver.n(), "run", "runs"),
            count(driver.successes(), "success", "successes"),
            format_percent(driver.estimate()),
            format_percent(interval.0),
            format_percent(interval.1)
        ));
        if let Step::Done(_) = step {
            break;
        }
    }
    progress.finish_and_clear();

    let outcome = driver.outcome();
    let decision = if error.is_some() || stopped_by_clock || interrupted {
        Decision::Undecided
    } else {
        outcome.decision
    };
    let (verdict, code) = match decision {
        Decision::Above => ("holds", exit::HOLDS),
        Decision::Below => ("violated", exit::VIOLATED),
        // As a shell reports a command Ctrl-C ended: a CI script cannot take it for a verdict.
        _ if interrupted => ("undecided", interrupt::INTERRUPTED),
        _ => ("undecided", exit::UNDECIDED),
    };
    let success_words = match args.under {
        Some(limit) => format!("exit 0 within {}", format_seconds(limit.as_secs_f64())),
        None => "exit 0".to_string(),
    };
    let target = format_percent(args.rate);
    let reason = match (decision, &error) {
        (_, Some(e)) => format!("stopped early: {e}"),
        _ if interrupted => format!(
            "interrupted (Ctrl-C) after {}: the success rate could not yet be told apart from {target}",
            count(outcome.n, "run", "runs")
        ),
        (Decision::Above, _) => format!("more than {target} of runs {success_words}"),
        (Decision::Below, _) => format!("fewer than {target} of runs {success_words}"),
        _ if stopped_by_clock => format!(
            "no verdict within --max-time ({}, and another would not have ended in time): the success rate could not be told apart from {target}",
            count(outcome.n, "run", "runs")
        ),
        _ => format!(
            "{} (--max-runs) {} not enough to tell the success rate apart from {target}",
            count(outcome.n, "run", "runs"),
            if outcome.n == 1 { "was" } else { "were" }
        ),
    };
    let run_time = run_times(&times, args.eps);
    let report = SloReport {
        verdict,
        exit_code: code,
        reason: reason.clone(),
        command: args.command.display(),
        rate: args.rate,
        under_s: args.under.map(|d| d.as_secs_f64()),
        eps: args.eps,
        runs: outcome.n,
        successes: outcome.successes,
        estimate: outcome.estimate,
        interval: [outcome.confidence.0, outcome.confidence.1],
        interval_level: 1.0 - config.confidence_eps(),
        credible_interval: [outcome.credible.0, outcome.credible.1],
        failures,
        run_time,
        wall_s: started.elapsed().as_secs_f64(),
    };

    // A command that never ran leaves nothing to report but the error.
    if report.runs > 0 {
        output::emit(args.json, &report, print_report);
    } else if interrupted {
        errln!("spindle: interrupted before the first run ended; nothing measured");
    }
    match error {
        Some(e) => Err(e),
        None => Ok(code),
    }
}

fn run_times(times: &[f64], eps: f64) -> Option<RunTimes> {
    let median = quantile_interval(times, 0.5, eps.ln())?;
    let p99 = if times.len() >= 100 {
        quantile_interval(times, 0.99, eps.ln()).map(|q| q.estimate)
    } else {
        None
    };
    Some(RunTimes {
        min_s: times.iter().copied().fold(f64::INFINITY, f64::min),
        median_s: median.estimate,
        p99_s: p99,
        max_s: times.iter().copied().fold(0.0, f64::max),
    })
}

fn print_report(r: &SloReport) {
    let headline = match r.verdict {
        "holds" => "SLO holds",
        "violated" => "SLO violated",
        _ => "SLO undecided",
    };
    outln!("{headline}: {}.", r.reason);
    outln!(
        "  {}, {} (estimate {}); {} confidence interval [{}, {}]",
        count(r.runs, "run", "runs"),
        count(r.successes, "success", "successes"),
        format_percent(r.estimate),
        format_percent(r.interval_level),
        format_percent(r.interval[0]),
        format_percent(r.interval[1])
    );
    let f = &r.failures;
    let failed = f.nonzero_exit + f.killed_by_signal + f.too_slow + f.timed_out;
    if failed > 0 {
        outln!(
            "  failures: {} non-zero exit, {} killed by a signal, {} too slow, {} timed out",
            f.nonzero_exit,
            f.killed_by_signal,
            f.too_slow,
            f.timed_out
        );
    }
    if let Some(t) = &r.run_time {
        let p99 = t
            .p99_s
            .map(|p| format!(", p99 {}", format_seconds(p)))
            .unwrap_or_default();
        outln!(
            "  run time: min {}, median {}{p99}, max {} (whole test {})",
            format_seconds(t.min_s),
            format_seconds(t.median_s),
            format_seconds(t.max_s),
            format_seconds(r.wall_s)
        );
    }
    outln!(
        "  false-positive rate of this verdict: at most {}",
        format_probability(r.eps)
    );
}

pub fn progress_bar(quiet: bool) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} {elapsed} {msg}").expect("valid template"),
    );
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}
