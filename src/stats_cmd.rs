//! `spindle stats`: the statistics engine as shell calculators and a stream filter.

use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::ValueEnum;
use serde::Serialize;
use spindle_stats::{
    beta_bound, csm, log_proportion, power_with_progress, proportion_shape, quantile_bounds,
    Alternative, Decision, Driver, DriverConfig, ExactConfig, Location, LocationTest, PowerOptions,
    Resampler, Step, StopRule,
};

use crate::exit::{self, usage, CliError, CliResult};
use crate::output::print_json;
use crate::samples::{self, Accept};
use crate::units::{count, excerpt, format_percent, format_probability, format_value};

pub fn csm_cmd(n: u64, alpha: f64, successes: u64, eps: f64, json: bool) -> CliResult<u8> {
    if successes > n {
        return Err(usage(format!(
            "S = {successes} successes cannot exceed N = {n} trials"
        )));
    }
    check_count("N", n)?;
    let log_eps = spindle_stats::round::ln_down(eps);
    let check = csm(n, alpha, successes, log_eps);
    let estimate = if n == 0 {
        0.0
    } else {
        successes as f64 / n as f64
    };
    let side = if estimate > alpha { "above" } else { "below" };
    // A calculator's answer, not a verdict on a claim: "stop" (the test rejects ALPHA, on the
    // side printed) and "continue" get codes of their own so that a script can branch on them.
    let code = if check.stop {
        exit::HOLDS
    } else {
        exit::UNDECIDED
    };
    if json {
        #[derive(Serialize)]
        struct Out {
            exit_code: u8,
            n: u64,
            alpha: f64,
            successes: u64,
            eps: f64,
            stop: bool,
            log_level: f64,
            log_eps: f64,
            estimate: f64,
            side: Option<&'static str>,
        }
        print_json(&Out {
            exit_code: code,
            n,
            alpha,
            successes,
            eps,
            stop: check.stop,
            log_level: check.log_level,
            log_eps,
            estimate,
            side: check.stop.then_some(side),
        });
    } else if check.stop {
        outln!(
            "stop: success rate {side} {} (estimate {}, false-positive rate < {})",
            float(alpha),
            format_value(estimate),
            float(eps)
        );
        // The log level and ln(eps) keep every digit: they are the CSM post's figures.
        outln!(
            "log level {} < ln(eps) = {}",
            float(check.log_level),
            float(log_eps)
        );
    } else {
        outln!(
            "continue: {successes}/{n} cannot yet be told apart from {} at eps = {}",
            float(alpha),
            float(eps)
        );
        outln!(
            "log level {} >= ln(eps) = {}",
            float(check.log_level),
            float(log_eps)
        );
    }
    Ok(code)
}

pub fn beta_icdf_cmd(a: u64, b: u64, alpha: f64, upper: bool, json: bool) -> CliResult<u8> {
    for (name, v) in [("A", a), ("B", b)] {
        if !(1..=spindle_stats::beta::MAX_BETA_PARAM).contains(&v) {
            return Err(usage(format!(
                "{name} = {v} must be an integer in [1, 2^44]"
            )));
        }
    }
    if !(0.0..1.0).contains(&alpha) {
        return Err(usage(format!("ALPHA = {alpha} is outside [0, 1)")));
    }
    if alpha > 0.05 && !json {
        errln!("note: ALPHA above 0.05 is computed as 0.05 (a wider interval, still valid)");
    }
    let bound = beta_bound(a, b, alpha, upper);
    if json {
        #[derive(Serialize)]
        struct Out {
            a: u64,
            b: u64,
            alpha: f64,
            upper: bool,
            value: f64,
            slack: f64,
        }
        print_json(&Out {
            a,
            b,
            alpha,
            upper,
            value: bound.value,
            slack: bound.slack,
        });
    } else {
        outln!("{}", float(bound.value));
    }
    Ok(exit::HOLDS)
}

pub fn quantile_cmd(n: u64, q: f64, eps: f64, json: bool) -> CliResult<u8> {
    if n == 0 {
        return Err(usage("N must be at least 1"));
    }
    check_count("N", n)?;
    if !(0.0..=1.0).contains(&q) {
        return Err(usage(format!("Q = {q} is outside [0, 1]")));
    }
    let ranks = quantile_bounds(n, q, spindle_stats::round::ln_down(eps));
    if json {
        #[derive(Serialize)]
        struct Out {
            n: u64,
            q: f64,
            eps: f64,
            estimate_rank: u64,
            lower_rank: Option<u64>,
            upper_rank: Option<u64>,
        }
        print_json(&Out {
            n,
            q,
            eps,
            estimate_rank: ranks.estimate,
            lower_rank: ranks.lower,
            upper_rank: ranks.upper,
        });
    } else {
        let show = |r: Option<u64>| {
            r.map(|r| r.to_string())
                .unwrap_or_else(|| "none (too few samples)".into())
        };
        outln!("ranks are 1-based positions in the sorted samples (sort -g | sed -n RANKp)");
        outln!("estimate: {}", ranks.estimate);
        outln!("lower:    {}", show(ranks.lower));
        outln!("upper:    {}", show(ranks.upper));
    }
    Ok(exit::HOLDS)
}

#[derive(clap::Args)]
pub struct StreamArgs {
    /// Objective: the fraction of lines that must succeed, in (0, 1). With --rate-hi, the lower
    /// threshold of an indifference band.
    #[arg(long, value_parser = crate::rate_parser)]
    pub rate: f64,
    /// Upper threshold: rates between --rate and --rate-hi are "don't care", and the test stops
    /// as soon as the rate is known to be above --rate (holds) or below --rate-hi (violated), the
    /// CSM post's two-threshold rule. Every rate is then decided eventually.
    #[arg(long, value_name = "RATE", value_parser = crate::rate_parser)]
    pub rate_hi: Option<f64>,
    /// Bound on the probability of a wrong verdict, in (0, 0.5).
    #[arg(long, default_value = "1e-6", value_parser = crate::eps_parser)]
    pub eps: f64,
    /// Lines are times in seconds (latencies: 0.012 for 12 ms); a line succeeds when its time is
    /// below DURATION, which needs a unit like every duration (50ms, 1.5s).
    #[arg(long, value_name = "DURATION", value_parser = crate::units::parse_positive_duration, allow_hyphen_values = true)]
    pub under: Option<Duration>,
    /// Read this many lines before testing.
    #[arg(long, default_value_t = 1, value_parser = crate::positive_count_parser)]
    pub min: u64,
    /// Give up (exit 2) after this many lines.
    #[arg(long, value_parser = crate::positive_count_parser)]
    pub max: Option<u64>,
    /// Print the post's progress log on stderr: n, estimate, credible interval, log level / −ln 10.
    #[arg(long)]
    pub trace: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Longest line `stats stream` accepts; longer ones are refused, not held in memory.
const MAX_LINE: u64 = 1 << 16;

/// Reads outcomes from stdin and exits as soon as the CSM decides.
pub fn stream_cmd(args: StreamArgs) -> CliResult<u8> {
    // Lines are in seconds; the limit is compared with them as written.
    let under = args.under.map(|d| d.as_secs_f64());
    let rate_hi = args.rate_hi.unwrap_or(args.rate);
    if rate_hi < args.rate {
        return Err(usage(format!(
            "--rate-hi {rate_hi} must be at least --rate {}",
            args.rate
        )));
    }
    let mut config = DriverConfig::band(args.rate, rate_hi, args.eps).min_count(args.min);
    if let Some(max) = args.max {
        config = config.max_count(max);
    }
    if args.min > config.max_count {
        return Err(usage(match args.max {
            Some(max) => format!("--min {} exceeds --max {max}", args.min),
            None => format!(
                "--min {} exceeds the largest count the test can track ({}; the default --max)",
                args.min, config.max_count
            ),
        }));
    }
    let mut driver = Driver::new(config)?;
    let mut trace = Trace::new(args.trace);
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut decided = None;
    let mut buffer = Vec::new();
    let mut number = 0u64;
    loop {
        buffer.clear();
        number += 1;
        let read = (&mut input)
            .take(MAX_LINE + 1)
            .read_until(b'\n', &mut buffer)
            .map_err(|e| CliError::Execution(format!("reading stdin: {e}")))?;
        if read == 0 {
            break;
        }
        if buffer.len() as u64 > MAX_LINE {
            return Err(usage(format!(
                "line {number} is longer than {MAX_LINE} bytes; expected one outcome per line"
            )));
        }
        let text = std::str::from_utf8(&buffer)
            .map_err(|_| usage(format!("line {number}: not valid UTF-8 text")))?
            .trim();
        if text.is_empty() || text.starts_with('#') {
            continue;
        }
        let success =
            parse_outcome(text, under).map_err(|why| usage(format!("line {number}: {why}")))?;
        let step = driver.observe(success);
        trace.row(&driver);
        if let Step::Done(d) = step {
            decided = Some(d);
            break;
        }
    }
    let outcome = driver.outcome();
    let decision = decided.unwrap_or(Decision::Undecided);
    let (verdict, code) = match decision {
        Decision::Above => ("holds", exit::HOLDS),
        Decision::Below => ("violated", exit::VIOLATED),
        Decision::Within => ("within", exit::UNDECIDED),
        Decision::Undecided => ("undecided", exit::UNDECIDED),
    };
    let (known_lo, known_hi) = outcome.known_range();
    if args.json {
        #[derive(Serialize)]
        struct Out {
            verdict: &'static str,
            exit_code: u8,
            rate: f64,
            rate_hi: f64,
            eps: f64,
            n: u64,
            successes: u64,
            estimate: f64,
            /// What the tests established: the rate lies in this range.
            known_range: [f64; 2],
            /// Confidence interval (Robbins' confidence sequence, at ε/2 or ε/3).
            interval: [f64; 2],
            /// Bayesian credible interval, ε/4 or ε/6 cut from each end (the post's report).
            credible_interval: [f64; 2],
        }
        print_json(&Out {
            verdict,
            exit_code: code,
            rate: args.rate,
            rate_hi,
            eps: args.eps,
            n: outcome.n,
            successes: outcome.successes,
            estimate: outcome.estimate,
            known_range: [known_lo, known_hi],
            interval: [outcome.confidence.0, outcome.confidence.1],
            credible_interval: [outcome.credible.0, outcome.credible.1],
        });
    } else {
        let pct = format_percent;
        let why = match decision {
            Decision::Above => format!("the success rate is above {}", pct(known_lo)),
            Decision::Below => format!("the success rate is below {}", pct(known_hi)),
            Decision::Within => format!(
                "the success rate lies between {} and {}",
                pct(known_lo),
                pct(known_hi)
            ),
            _ if decided.is_some() => "--max reached before a threshold could be rejected".into(),
            _ => "input ended before a threshold could be rejected".into(),
        };
        outln!(
            "{verdict}: {why} ({} in {}; confidence interval [{}, {}], credible interval [{}, {}])",
            count(outcome.successes, "success", "successes"),
            count(outcome.n, "outcome", "outcomes"),
            pct(outcome.confidence.0),
            pct(outcome.confidence.1),
            pct(outcome.credible.0),
            pct(outcome.credible.1)
        );
    }
    Ok(code)
}

/// One stream line: `1`/`0`/`true`/`false`/`yes`/`no`, or with `under`, a non-negative number
/// that succeeds when it is below the limit.
fn parse_outcome(text: &str, under: Option<f64>) -> Result<bool, String> {
    match under {
        Some(limit) => {
            let value: f64 = text.parse().map_err(|_| {
                format!(
                    "expected a number (compared with --under), got '{}'",
                    excerpt(text, 40)
                )
            })?;
            if value.is_nan() {
                return Err("NaN is not a measurement".into());
            }
            if value < 0.0 {
                return Err(format!("{value} is negative; measurements are at least 0"));
            }
            Ok(value < limit)
        }
        None => match text.to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "ok" | "pass" => Ok(true),
            "0" | "false" | "no" | "fail" => Ok(false),
            _ => Err(format!(
                "expected 1/0 (or true/false), got '{}'; use --under X for numbers",
                excerpt(text, 40)
            )),
        },
    }
}

/// The post's progress log (`csm-driver` with a stream): one line at n = 1, 10, 20, …, 100, 200,
/// …, 1000, 2000, … with n, the estimate, the credible interval and the log level divided by
/// −ln 10 (so that it reads as a number of decimal digits of ε).
struct Trace {
    on: bool,
}

impl Trace {
    fn new(on: bool) -> Self {
        Self { on }
    }

    fn due(n: u64) -> bool {
        if n == 1 {
            return true;
        }
        let mut power = 10;
        while power * 10 <= n {
            power *= 10;
        }
        n >= 10 && n.is_multiple_of(power)
    }

    fn row(&mut self, driver: &Driver) {
        let n = driver.n();
        if !self.on || !Self::due(n) {
            return;
        }
        let (lo, hi) = driver.credible_interval();
        errln!(
            "{n:>10} {:.3e} {lo:.3e} {hi:.3e} {:.3e}",
            driver.estimate(),
            driver.log_level() / -std::f64::consts::LN_10
        );
    }
}

#[derive(clap::Args)]
pub struct PowerArgs {
    /// The true success rate to simulate.
    #[arg(value_name = "RATE", value_parser = crate::unit_parser)]
    pub true_rate: f64,
    /// The threshold (the lower one with --alpha-hi).
    #[arg(long, value_parser = crate::rate_parser)]
    pub alpha: f64,
    /// Upper threshold of an indifference band.
    #[arg(long, value_parser = crate::rate_parser)]
    pub alpha_hi: Option<f64>,
    /// Bound on the probability of a wrong verdict of the simulated test.
    #[arg(long, default_value = "1e-6", value_parser = crate::eps_parser)]
    pub eps: f64,
    /// The simulated test's budget of observations.
    #[arg(long, default_value_t = 10_000, value_parser = crate::positive_count_parser)]
    pub max_runs: u64,
    /// The probability of deciding correctly that counts as enough.
    #[arg(long, default_value = "0.99", value_parser = crate::rate_parser)]
    pub target: f64,
    /// Simulate the full three-way decision (above, below or inside the band, as the lab's
    /// claims need) instead of the post's stop-at-the-first-rejection rule.
    #[arg(long)]
    pub full_decision: bool,
    /// Seed of the simulated data.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn power_cmd(args: PowerArgs) -> CliResult<u8> {
    // Each simulation may run up to --max-runs observations, hundreds of times over.
    const SIMULATION_LIMIT: u64 = 10_000_000;
    if args.max_runs == 0 || args.max_runs > SIMULATION_LIMIT {
        return Err(usage(format!(
            "--max-runs must be between 1 and {SIMULATION_LIMIT} for a simulation (got {})",
            args.max_runs
        )));
    }
    let alpha_hi = args.alpha_hi.unwrap_or(args.alpha);
    if alpha_hi < args.alpha {
        return Err(usage(format!(
            "--alpha-hi {alpha_hi} must be at least --alpha {}",
            args.alpha
        )));
    }
    let rule = if args.full_decision {
        StopRule::FullDecision
    } else {
        StopRule::FirstRejection
    };
    let inner = DriverConfig::band(args.alpha, alpha_hi, args.eps)
        .max_count(args.max_runs)
        .rule(rule);
    let options = PowerOptions {
        target: args.target,
        seed: args.seed,
        ..PowerOptions::default()
    };
    // A large --max-runs can take minutes: on a terminal, a line on stderr says how far the
    // simulation has got (after the first second, a few times a second), erased at the end.
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let started = std::time::Instant::now();
    let mut shown = false;
    let mut next = Duration::from_secs(1);
    let report = power_with_progress(args.true_rate, &inner, &options, |p| {
        if !tty || started.elapsed() < next {
            return;
        }
        next = started.elapsed() + Duration::from_millis(250);
        shown = true;
        // Short enough for an 80-column terminal (a line that wraps is not erased by `\r`).
        err!(
            "\rpower: {} drivers, {} correct, {:.3e} draws, {:.0} s\x1b[K",
            p.simulations,
            p.correct,
            p.observations as f64,
            started.elapsed().as_secs_f64()
        );
    });
    if shown {
        err!("\r\x1b[K");
    }
    let report = report?;
    let outer = report.outer;
    let verdict = match outer.decision {
        Decision::Above => "enough",
        Decision::Below => "not enough",
        _ => "undecided",
    };
    if args.json {
        #[derive(Serialize)]
        struct Out {
            verdict: &'static str,
            true_rate: f64,
            alpha: f64,
            alpha_hi: f64,
            eps: f64,
            max_runs: u64,
            rule: &'static str,
            target: f64,
            simulations: u64,
            correct: u64,
            power_estimate: f64,
            power_interval: [f64; 2],
            power_credible: [f64; 2],
            max_runs_needed: u64,
        }
        print_json(&Out {
            verdict,
            true_rate: args.true_rate,
            alpha: inner.alpha_lo,
            alpha_hi: inner.alpha_hi,
            eps: args.eps,
            max_runs: args.max_runs,
            rule: rule.as_str(),
            target: args.target,
            simulations: outer.n,
            correct: outer.successes,
            power_estimate: outer.estimate,
            power_interval: [outer.confidence.0, outer.confidence.1],
            power_credible: [outer.credible.0, outer.credible.1],
            max_runs_needed: report.max_inner_n,
        });
    } else {
        outln!(
            "{} {} {verdict}: a {} driver decides correctly in {} of {} \
             ({} of them; confidence interval [{}, {}], credible interval [{}, {}]; target {})",
            count(args.max_runs, "run", "runs"),
            if args.max_runs == 1 { "is" } else { "are" },
            rule.as_str(),
            outer.successes,
            count(outer.n, "simulation", "simulations"),
            format_percent(outer.estimate),
            format_percent(outer.confidence.0),
            format_percent(outer.confidence.1),
            format_percent(outer.credible.0),
            format_percent(outer.credible.1),
            format_percent(args.target)
        );
        outln!(
            "longest decided simulation: {} (false-positive rate of this verdict < {})",
            count(report.max_inner_n, "run", "runs"),
            format_probability(options.eps)
        );
    }
    Ok(match outer.decision {
        Decision::Above => exit::HOLDS,
        Decision::Below => exit::VIOLATED,
        _ => exit::UNDECIDED,
    })
}

pub fn proportion_cmd(a: u64, b: u64, points: u64, json: bool) -> CliResult<u8> {
    if !(2..=100_000).contains(&points) {
        return Err(usage(format!(
            "--points must be between 2 and 100000, not {points}"
        )));
    }
    let grid: Vec<f64> = (1..points).map(|i| i as f64 / points as f64).collect();
    let shape = proportion_shape(a, b, &grid);
    let rows: Vec<(f64, f64, f64, f64)> = grid
        .iter()
        .zip(&shape)
        .map(|(&x, &normalised)| {
            let naive = x.powi(a.min(i32::MAX as u64) as i32)
                * (1.0 - x).powi(b.min(i32::MAX as u64) as i32);
            (x, naive, log_proportion(a, b, x), normalised)
        })
        .collect();
    if json {
        #[derive(Serialize)]
        struct Row {
            x: f64,
            naive: f64,
            log: f64,
            normalised: f64,
        }
        #[derive(Serialize)]
        struct Out {
            a: u64,
            b: u64,
            max_log: f64,
            points: Vec<Row>,
        }
        print_json(&Out {
            a,
            b,
            max_log: rows.iter().map(|r| r.2).fold(f64::NEG_INFINITY, f64::max),
            points: rows
                .iter()
                .map(|&(x, naive, log, normalised)| Row {
                    x,
                    naive,
                    log,
                    normalised,
                })
                .collect(),
        });
    } else {
        outln!("x^{a} (1-x)^{b}: x, naive product, a ln x + b ln_1p(-x), normalised to max 1");
        // Enough decimals to tell grid points apart (0.05, 0.333), none of the noise of i/K;
        // the other columns keep every digit, as the CSM post prints them.
        let decimals = points.to_string().len() + 2;
        for (x, naive, log, normalised) in rows {
            let x = format!("{x:.decimals$}");
            let x = x.trim_end_matches('0').trim_end_matches('.');
            outln!("{x} {} {} {}", float(naive), float(log), float(normalised));
        }
    }
    Ok(exit::HOLDS)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LocationArg {
    Mean,
    Median,
    Quantile,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AlternativeArg {
    Greater,
    Less,
    TwoSided,
}

#[derive(clap::Args)]
pub struct ExactArgs {
    /// First sample: a file of numbers (blank- or newline-separated, # comments), a hyperfine
    /// --export-json file (FILE#N picks the N-th command) or a criterion sample.json; - for stdin.
    #[arg(value_name = "A")]
    pub a: PathBuf,
    /// Second sample, in any of the same forms.
    #[arg(value_name = "B")]
    pub b: PathBuf,
    /// The location compared: loc(A) − loc(B).
    #[arg(long, value_enum, default_value = "mean")]
    pub statistic: LocationArg,
    /// The quantile for --statistic quantile, in [0, 1] (giving it implies --statistic quantile).
    #[arg(long, value_name = "Q")]
    pub quantile: Option<f64>,
    /// greater: is loc(A) − loc(B) larger than Δ? less: smaller? two-sided: different?
    #[arg(long, value_enum, default_value = "greater")]
    pub alternative: AlternativeArg,
    /// Δ: the null hypothesis is "A − Δ and B have one distribution".
    #[arg(long, value_name = "DELTA", default_value_t = 0.0)]
    pub shift: f64,
    /// Significance level: the difference is significant when the p-value is below it.
    #[arg(long, default_value = "0.01", value_parser = crate::rate_parser)]
    pub alpha: f64,
    /// Upper significance threshold: stop as soon as the p-value is known to be below this
    /// (significant) or above --alpha (not significant); the CSM post used 0.005 and 0.01.
    #[arg(long, value_name = "ALPHA", value_parser = crate::rate_parser)]
    pub alpha_hi: Option<f64>,
    /// Bound on the probability that the sequential decision about the p-value is wrong.
    #[arg(long, default_value = "1e-6", value_parser = crate::eps_parser)]
    pub eps: f64,
    /// Give up (exit 2) after this many resamples.
    #[arg(long, default_value_t = 1_000_000, value_parser = crate::positive_count_parser)]
    pub max_resamples: u64,
    /// Seed of the resampling.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print the post's progress log on stderr.
    #[arg(long)]
    pub trace: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn exact_cmd(args: ExactArgs) -> CliResult<u8> {
    if args.a == Path::new("-") && args.b == Path::new("-") {
        return Err(usage("only one of A and B can be read from stdin"));
    }
    if !args.shift.is_finite() {
        return Err(usage("--shift must be a finite number"));
    }
    let location = match (args.statistic, args.quantile) {
        (LocationArg::Mean, None) => Location::Mean,
        (LocationArg::Median, None) => Location::Median,
        (LocationArg::Quantile, None) => {
            return Err(usage("--statistic quantile needs --quantile Q"))
        }
        (LocationArg::Mean | LocationArg::Quantile, Some(q)) => {
            if !(0.0..=1.0).contains(&q) {
                return Err(usage(format!("--quantile {q} is outside [0, 1]")));
            }
            Location::Quantile(q)
        }
        (LocationArg::Median, Some(_)) => {
            return Err(usage(
                "--quantile goes with --statistic quantile, not median",
            ))
        }
    };
    let alternative = match args.alternative {
        AlternativeArg::Greater => Alternative::Greater,
        AlternativeArg::Less => Alternative::Less,
        AlternativeArg::TwoSided => Alternative::TwoSided,
    };
    let alpha_hi = args.alpha_hi.unwrap_or(args.alpha);
    if alpha_hi < args.alpha {
        return Err(usage(format!(
            "--alpha-hi {alpha_hi} must be at least --alpha {}",
            args.alpha
        )));
    }
    let a = samples::read(&args.a, Accept::Finite)?;
    let b = samples::read(&args.b, Accept::Finite)?;
    let config = ExactConfig {
        alpha: args.alpha,
        alpha_hi,
        eps: args.eps,
        max_resamples: args.max_resamples,
        seed: args.seed,
    };
    let spec = LocationTest {
        location,
        alternative,
        shift: args.shift,
    };
    let mut resampler = Resampler::new(&a.values, &b.values, spec, args.seed)?;
    let mut driver = Driver::new(config.driver_config())?;
    let mut trace = Trace::new(args.trace);
    loop {
        let step = driver.observe(resampler.sample());
        trace.row(&driver);
        if step != Step::Continue {
            break;
        }
    }
    let out = driver.outcome();
    let (known_lo, known_hi) = out.known_range();
    let (verdict, code) = match out.decision {
        Decision::Below => ("significant", exit::HOLDS),
        Decision::Above => ("not significant", exit::VIOLATED),
        Decision::Within => ("between the thresholds", exit::UNDECIDED),
        Decision::Undecided => ("undecided", exit::UNDECIDED),
    };
    let statistic = match location {
        Location::Mean => "mean".to_string(),
        Location::Median => "median".to_string(),
        Location::Quantile(q) => format!("{q}-quantile"),
    };
    if args.json {
        #[derive(Serialize)]
        struct Out {
            verdict: &'static str,
            exit_code: u8,
            statistic: String,
            alternative: &'static str,
            shift: f64,
            observed_difference: f64,
            alpha: f64,
            alpha_hi: f64,
            eps: f64,
            resamples: u64,
            as_extreme: u64,
            p_value_estimate: f64,
            /// The p-value lies in this range (what the tests established).
            p_value_known_range: [f64; 2],
            p_value_interval: [f64; 2],
            p_value_credible: [f64; 2],
            a_count: usize,
            b_count: usize,
        }
        print_json(&Out {
            verdict,
            exit_code: code,
            statistic,
            alternative: match alternative {
                Alternative::Greater => "greater",
                Alternative::Less => "less",
                Alternative::TwoSided => "two-sided",
            },
            shift: args.shift,
            observed_difference: resampler.observed(),
            alpha: args.alpha,
            alpha_hi,
            eps: args.eps,
            resamples: out.n,
            as_extreme: out.successes,
            p_value_estimate: out.estimate,
            p_value_known_range: [known_lo, known_hi],
            p_value_interval: [out.confidence.0, out.confidence.1],
            p_value_credible: [out.credible.0, out.credible.1],
            a_count: a.values.len(),
            b_count: b.values.len(),
        });
    } else {
        let shift = if args.shift != 0.0 {
            format!(" − {}", float(args.shift))
        } else {
            String::new()
        };
        let why = match out.decision {
            Decision::Below => format!("p < {}", float(known_hi)),
            Decision::Above => format!("p > {}", float(known_lo)),
            Decision::Within => format!("{} < p < {}", float(known_lo), float(known_hi)),
            Decision::Undecided => format!(
                "{} (--max-resamples) could not place the p-value",
                count(out.n, "resample", "resamples")
            ),
        };
        outln!("{verdict}: {why}");
        outln!(
            "  {statistic}(A){shift} − {statistic}(B) = {} ({} and {} values); {} of {} as extreme ({})",
            format_value(resampler.observed()),
            a.values.len(),
            b.values.len(),
            out.successes,
            count(out.n, "resample", "resamples"),
            args.alternative.to_possible_value().map(|v| v.get_name().to_string()).unwrap_or_default()
        );
        outln!(
            "  p-value ≈ {}; confidence interval [{}, {}], credible interval [{}, {}]",
            format_value(out.estimate),
            format_value(out.confidence.0),
            format_value(out.confidence.1),
            format_value(out.credible.0),
            format_value(out.credible.1)
        );
        outln!(
            "  the p-value is on the wrong side of a threshold with probability at most {} (eps); a verdict of \
             significance at level alpha is a false positive with probability at most alpha + eps",
            format_probability(args.eps)
        );
    }
    Ok(code)
}

/// Shortest round-trip form, in scientific notation when plain decimals would be very long: for
/// what the user typed (it comes back as typed) and for the CSM post's figures, which are
/// checked to the last digit. Other computed values go through [`format_value`].
fn float(x: f64) -> String {
    if x != 0.0 && x.is_finite() && (x.abs() < 1e-5 || x.abs() >= 1e16) {
        format!("{x:e}")
    } else {
        format!("{x}")
    }
}

fn check_count(name: &str, n: u64) -> CliResult<()> {
    if n >= spindle_stats::csm::MAX_COUNT {
        return Err(usage(format!("{name} = {n} is too large (limit 2^49)")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_lines() {
        assert_eq!(parse_outcome("1", None), Ok(true));
        assert_eq!(parse_outcome("False", None), Ok(false));
        assert!(parse_outcome("2", None).is_err());
        assert_eq!(parse_outcome("0.04", Some(0.05)), Ok(true));
        assert_eq!(parse_outcome("0.05", Some(0.05)), Ok(false));
        assert!(parse_outcome("fast", Some(0.05)).is_err());
        assert!(parse_outcome("NaN", Some(0.05)).is_err());
        assert!(parse_outcome("-0.01", Some(0.05))
            .unwrap_err()
            .contains("negative"));
        let long = "9".repeat(100_000) + "x";
        assert!(parse_outcome(&long, Some(0.05)).unwrap_err().len() < 200);
    }

    #[test]
    fn trace_schedule_is_the_posts() {
        let due: Vec<u64> = (1..=2500).filter(|&n| Trace::due(n)).collect();
        let mut expected = vec![1];
        expected.extend((1..=9).map(|i| i * 10));
        expected.extend((1..=9).map(|i| i * 100));
        expected.extend([1000, 2000]);
        assert_eq!(due, expected);
    }

    #[test]
    fn floats_print_exactly_and_briefly() {
        assert_eq!(float(0.9882119750976562), "0.9882119750976562");
        assert_eq!(float(-17.238559826956475), "-17.238559826956475");
        assert_eq!(float(1e-300), "1e-300");
        assert_eq!(float(5.8e-11), "5.8e-11");
        assert_eq!(float(0.0), "0");
    }
}
