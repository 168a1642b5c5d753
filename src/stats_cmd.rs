//! `spindle stats`: the statistics engine as shell calculators and a stream filter.

use std::io::BufRead;

use serde::Serialize;
use spindle_stats::{
    beta_bound, csm, power, quantile_bounds, Decision, Driver, DriverConfig, PowerOptions, Step,
};

use crate::exit::{self, usage, CliError, CliResult};
use crate::output::print_json;
use crate::units::format_percent;

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
    if json {
        #[derive(Serialize)]
        struct Out {
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
        println!(
            "stop: the success rate is {side} {} (estimate {}, false-positive rate < {})",
            float(alpha),
            float(estimate),
            float(eps)
        );
        println!(
            "log level {} < ln(eps) = {}",
            float(check.log_level),
            float(log_eps)
        );
    } else {
        println!(
            "continue: {successes}/{n} cannot yet be told apart from {} at eps = {}",
            float(alpha),
            float(eps)
        );
        println!(
            "log level {} >= ln(eps) = {}",
            float(check.log_level),
            float(log_eps)
        );
    }
    Ok(exit::HOLDS)
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
        eprintln!("note: ALPHA above 0.05 is computed as 0.05 (a wider interval, still valid)");
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
        println!("{}", float(bound.value));
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
        println!("ranks are 1-based positions in the sorted samples (sort -g | sed -n RANKp)");
        println!("estimate: {}", ranks.estimate);
        println!("lower:    {}", show(ranks.lower));
        println!("upper:    {}", show(ranks.upper));
    }
    Ok(exit::HOLDS)
}

#[derive(clap::Args)]
pub struct StreamArgs {
    /// Objective: the fraction of lines that must succeed, in (0, 1).
    #[arg(long, value_parser = crate::rate_parser)]
    pub rate: f64,
    /// Bound on the probability of a wrong verdict, in (0, 0.5).
    #[arg(long, default_value = "1e-6", value_parser = crate::eps_parser)]
    pub eps: f64,
    /// Lines are numbers; a line succeeds when its number is below X.
    #[arg(long, value_name = "X")]
    pub under: Option<f64>,
    /// Read this many lines before testing.
    #[arg(long, default_value_t = 1)]
    pub min: u64,
    /// Give up (exit 2) after this many lines.
    #[arg(long)]
    pub max: Option<u64>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Reads outcomes from stdin and exits as soon as the CSM decides.
pub fn stream_cmd(args: StreamArgs) -> CliResult<u8> {
    if args.under.is_some_and(|x| !x.is_finite()) {
        return Err(usage("--under must be a finite number"));
    }
    if args.max == Some(0) {
        return Err(usage("--max must be at least 1"));
    }
    let mut config = DriverConfig::new(args.rate, args.eps).min_count(args.min);
    if let Some(max) = args.max {
        config = config.max_count(max);
    }
    let mut driver = Driver::new(config)?;
    let stdin = std::io::stdin();
    let mut decided = None;
    for (number, line) in stdin.lock().lines().enumerate() {
        let line = line.map_err(|e| match e.kind() {
            std::io::ErrorKind::InvalidData => {
                usage(format!("line {}: not valid UTF-8 text", number + 1))
            }
            _ => CliError::Execution(format!("reading stdin: {e}")),
        })?;
        let text = line.trim();
        if text.is_empty() || text.starts_with('#') {
            continue;
        }
        let success = parse_outcome(text, args.under)
            .map_err(|why| usage(format!("line {}: {why}", number + 1)))?;
        if let Step::Done(d) = driver.observe(success) {
            decided = Some(d);
            break;
        }
    }
    let outcome = driver.outcome();
    let decision = decided.unwrap_or(Decision::Undecided);
    let (verdict, code) = match decision {
        Decision::Above => ("holds", exit::HOLDS),
        Decision::Below => ("violated", exit::VIOLATED),
        _ => ("undecided", exit::UNDECIDED),
    };
    if args.json {
        #[derive(Serialize)]
        struct Out {
            verdict: &'static str,
            exit_code: u8,
            rate: f64,
            eps: f64,
            n: u64,
            successes: u64,
            estimate: f64,
            interval: [f64; 2],
        }
        print_json(&Out {
            verdict,
            exit_code: code,
            rate: args.rate,
            eps: args.eps,
            n: outcome.n,
            successes: outcome.successes,
            estimate: outcome.estimate,
            interval: [outcome.confidence.0, outcome.confidence.1],
        });
    } else {
        let why = match decision {
            Decision::Above => format!("the success rate is above {}", format_percent(args.rate)),
            Decision::Below => format!("the success rate is below {}", format_percent(args.rate)),
            _ if decided.is_some() => format!(
                "--max reached before the rate could be told apart from {}",
                format_percent(args.rate)
            ),
            _ => format!(
                "input ended before the rate could be told apart from {}",
                format_percent(args.rate)
            ),
        };
        println!(
            "{verdict}: {why} ({} of {} successes, interval [{}, {}])",
            outcome.successes,
            outcome.n,
            format_percent(outcome.confidence.0),
            format_percent(outcome.confidence.1)
        );
    }
    Ok(code)
}

/// One stream line: `1`/`0`/`true`/`false`/`yes`/`no`, or with `under`, a number that succeeds
/// when it is below the limit.
fn parse_outcome(text: &str, under: Option<f64>) -> Result<bool, String> {
    match under {
        Some(limit) => {
            let value: f64 = text
                .parse()
                .map_err(|_| format!("expected a number (compared with --under), got '{text}'"))?;
            if value.is_nan() {
                return Err("NaN is not a measurement".into());
            }
            Ok(value < limit)
        }
        None => match text.to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "ok" | "pass" => Ok(true),
            "0" | "false" | "no" | "fail" => Ok(false),
            _ => Err(format!(
                "expected 1/0 (or true/false), got '{text}'; use --under X for numbers"
            )),
        },
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
    #[arg(long, default_value_t = 10_000)]
    pub max_runs: u64,
    /// The probability of deciding correctly that counts as enough.
    #[arg(long, default_value = "0.99", value_parser = crate::rate_parser)]
    pub target: f64,
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
    let inner = DriverConfig::band(args.alpha, args.alpha_hi.unwrap_or(args.alpha), args.eps)
        .max_count(args.max_runs);
    let options = PowerOptions {
        target: args.target,
        seed: args.seed,
        ..PowerOptions::default()
    };
    let report = power(args.true_rate, &inner, &options)?;
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
            target: f64,
            simulations: u64,
            power_estimate: f64,
            power_interval: [f64; 2],
            max_runs_needed: u64,
        }
        print_json(&Out {
            verdict,
            true_rate: args.true_rate,
            alpha: inner.alpha_lo,
            alpha_hi: inner.alpha_hi,
            eps: args.eps,
            max_runs: args.max_runs,
            target: args.target,
            simulations: outer.n,
            power_estimate: outer.estimate,
            power_interval: [outer.confidence.0, outer.confidence.1],
            max_runs_needed: report.max_inner_n,
        });
    } else {
        println!(
            "{} runs are {verdict}: a driver decides correctly in {} of {} simulations \
             (interval [{}, {}]; target {})",
            args.max_runs,
            format_percent(outer.estimate),
            outer.n,
            format_percent(outer.confidence.0),
            format_percent(outer.confidence.1),
            format_percent(args.target)
        );
        println!("longest decided simulation: {} runs", report.max_inner_n);
    }
    Ok(match outer.decision {
        Decision::Above => exit::HOLDS,
        Decision::Below => exit::VIOLATED,
        _ => exit::UNDECIDED,
    })
}

/// Shortest round-trip form, in scientific notation when plain decimals would be very long.
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
