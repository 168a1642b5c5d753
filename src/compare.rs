//! `spindle compare`: paired runs of two commands until the sign test can name the faster one,
//! or show that they are indistinguishable.

use std::time::Instant;

use serde::Serialize;
use spindle_stats::rng::SplitMix64;
use spindle_stats::{quantile_interval, SignTest, Step, Winner};

use crate::exec::CommandLine;
use crate::exit::{self, CliError, CliResult};
use crate::output;
use crate::slo::progress_bar;
use crate::units::{format_percent, format_probability, format_seconds};

pub struct CompareArgs {
    pub eps: f64,
    pub band: f64,
    pub max_runs: u64,
    pub warmup: u64,
    pub seed: Option<u64>,
    pub json: bool,
    pub quiet: bool,
    pub a: CommandLine,
    pub b: CommandLine,
}

/// Splits `CMD_A ::: CMD_B`.
pub fn split_commands(words: &[String]) -> CliResult<(Vec<String>, Vec<String>)> {
    let Some(at) = words.iter().position(|w| w == ":::") else {
        return Err(exit::usage(
            "compare needs two commands separated by ':::', e.g. spindle compare -- ./new ::: ./old",
        ));
    };
    let (a, b) = (&words[..at], &words[at + 1..]);
    if a.is_empty() || b.is_empty() {
        return Err(exit::usage("both sides of ':::' need a command"));
    }
    if b.iter().any(|w| w == ":::") {
        return Err(exit::usage(
            "compare takes exactly two commands (found more than one ':::')",
        ));
    }
    Ok((a.to_vec(), b.to_vec()))
}

#[derive(Serialize)]
struct Side {
    command: String,
    median_s: f64,
    min_s: f64,
}

#[derive(Serialize)]
struct CompareReport {
    verdict: &'static str,
    exit_code: u8,
    reason: String,
    a: Side,
    b: Side,
    pairs: u64,
    ties: u64,
    p_a_faster: f64,
    /// Confidence interval of P(A faster), valid at the stopping time.
    p_a_faster_interval: [f64; 2],
    interval_level: f64,
    /// Bayesian credible interval of P(A faster) (uniform prior), same nominal level.
    p_a_faster_credible: [f64; 2],
    band: f64,
    eps: f64,
    median_ratio_a_over_b: f64,
    median_ratio_interval: [Option<f64>; 2],
    wall_s: f64,
}

pub fn run(args: CompareArgs) -> CliResult<u8> {
    let mut test = SignTest::new(args.band, args.eps, args.max_runs)?;
    let mut rng = args
        .seed
        .map(SplitMix64::new)
        .unwrap_or_else(SplitMix64::from_entropy);
    let progress = progress_bar(args.quiet);
    let started = Instant::now();

    for i in 0..args.warmup {
        progress.set_message(format!("warm-up {}/{}", i + 1, args.warmup));
        check(&args.a, args.a.run(None)?)?;
        check(&args.b, args.b.run(None)?)?;
    }

    let (mut times_a, mut times_b) = (Vec::new(), Vec::new());
    let mut error = None;
    loop {
        // Randomise the order within each pair so that "runs first" is not a hidden variable.
        let a_first = rng.next_u64() & 1 == 1;
        let result = if a_first {
            pair_run(&args.a, &args.b)
        } else {
            pair_run(&args.b, &args.a).map(|(b, a)| (a, b))
        };
        let (ta, tb) = match result {
            Ok(times) => times,
            Err(e) => {
                error = Some(e);
                break;
            }
        };
        times_a.push(ta);
        times_b.push(tb);
        let step = test.observe_costs(ta, tb);
        let d = test.driver();
        progress.set_message(format!(
            "pairs {} · A faster in {} · A {} / B {} (last pair)",
            d.n() + test.ties(),
            format_percent(d.estimate()),
            format_seconds(ta),
            format_seconds(tb)
        ));
        if let Step::Done(_) = step {
            break;
        }
        if times_a.len() as u64 >= args.max_runs.saturating_mul(4) {
            // Pathological: nearly every pair was a tie. Stop rather than spin forever.
            break;
        }
    }
    progress.finish_and_clear();

    if times_a.is_empty() {
        return Err(
            error.unwrap_or_else(|| CliError::Execution("no pair of runs completed".into()))
        );
    }
    let outcome = test.outcome();
    let winner = if error.is_some() {
        Winner::Undecided
    } else {
        outcome.winner
    };
    let (verdict, code) = match winner {
        Winner::A => ("A faster", exit::HOLDS),
        Winner::B => ("A slower", exit::VIOLATED),
        Winner::Indistinguishable => ("indistinguishable", exit::UNDECIDED),
        Winner::Undecided => ("undecided", exit::UNDECIDED),
    };
    let band = format!(
        "[{}, {}]",
        format_percent(0.5 - args.band),
        format_percent(0.5 + args.band)
    );
    let reason = match (winner, &error) {
        (_, Some(e)) => format!("stopped early: {e}"),
        (Winner::A, _) => format!("A wins more than {} of paired runs", format_percent(0.5 + args.band)),
        (Winner::B, _) => format!("A wins fewer than {} of paired runs", format_percent(0.5 - args.band)),
        (Winner::Indistinguishable, _) => format!("A wins a share of paired runs inside the band {band}"),
        _ => format!("{} pairs (--max-runs) were not enough to place P(A faster) relative to the band {band}", outcome.wins.n),
    };
    let ratios: Vec<f64> = times_a.iter().zip(&times_b).map(|(a, b)| a / b).collect();
    let ratio = quantile_interval(&ratios, 0.5, args.eps.ln()).expect("at least one pair");
    let side = |cmd: &CommandLine, t: &[f64]| Side {
        command: cmd.display(),
        median_s: quantile_interval(t, 0.5, -1.0)
            .map(|q| q.estimate)
            .unwrap_or(f64::NAN),
        min_s: t.iter().copied().fold(f64::INFINITY, f64::min),
    };
    let report = CompareReport {
        verdict,
        exit_code: code,
        reason,
        a: side(&args.a, &times_a),
        b: side(&args.b, &times_b),
        pairs: times_a.len() as u64,
        ties: outcome.ties,
        p_a_faster: outcome.wins.estimate,
        p_a_faster_interval: [outcome.wins.confidence.0, outcome.wins.confidence.1],
        interval_level: 1.0 - outcome.wins.config.confidence_eps(),
        p_a_faster_credible: [outcome.wins.credible.0, outcome.wins.credible.1],
        band: args.band,
        eps: args.eps,
        median_ratio_a_over_b: ratio.estimate,
        median_ratio_interval: [ratio.lower, ratio.upper],
        wall_s: started.elapsed().as_secs_f64(),
    };
    output::emit(args.json, &report, print_report);
    match error {
        Some(e) => Err(e),
        None => Ok(code),
    }
}

fn pair_run(first: &CommandLine, second: &CommandLine) -> CliResult<(f64, f64)> {
    let x = first.run(None)?;
    check(first, x)?;
    let y = second.run(None)?;
    check(second, y)?;
    Ok((x.elapsed.as_secs_f64(), y.elapsed.as_secs_f64()))
}

fn check(cmd: &CommandLine, run: crate::exec::Run) -> CliResult<()> {
    if run.exited_zero() {
        Ok(())
    } else {
        Err(CliError::Execution(format!(
            "`{}` failed ({}); compare only times commands that succeed",
            cmd.display(),
            run.end
        )))
    }
}

fn print_report(r: &CompareReport) {
    println!("{}: {}.", capitalise(r.verdict), r.reason);
    println!(
        "  P(A faster) ≈ {} ({} confidence interval [{}, {}]) over {} pairs ({} ties)",
        format_percent(r.p_a_faster),
        format_percent(r.interval_level),
        format_percent(r.p_a_faster_interval[0]),
        format_percent(r.p_a_faster_interval[1]),
        r.pairs,
        r.ties
    );
    let fmt_opt = |x: Option<f64>| x.map(|v| format!("{v:.3}")).unwrap_or_else(|| "?".into());
    println!(
        "  median time ratio A/B: {:.3} (interval [{}, {}])",
        r.median_ratio_a_over_b,
        fmt_opt(r.median_ratio_interval[0]),
        fmt_opt(r.median_ratio_interval[1])
    );
    println!(
        "  A: {}  median {}  min {}",
        r.a.command,
        format_seconds(r.a.median_s),
        format_seconds(r.a.min_s)
    );
    println!(
        "  B: {}  median {}  min {}",
        r.b.command,
        format_seconds(r.b.median_s),
        format_seconds(r.b.min_s)
    );
    println!(
        "  false-positive rate of this verdict: at most {}",
        format_probability(r.eps)
    );
}

fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn splits_on_the_separator() {
        let (a, b) = split_commands(&words("sleep 0.1 ::: sleep 0.2")).unwrap();
        assert_eq!(a, words("sleep 0.1"));
        assert_eq!(b, words("sleep 0.2"));
    }

    #[test]
    fn bad_separators_are_usage_errors() {
        for bad in ["true false", "::: true", "true :::", "a ::: b ::: c"] {
            let err = split_commands(&words(bad)).unwrap_err();
            assert_eq!(err.code(), exit::USAGE, "{bad}");
        }
    }
}
