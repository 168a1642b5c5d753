//! `spindle compare`: a CI gate. Paired runs of two commands until the tolerance gate
//! ([`spindle_stats::ToleranceGate`]) can say whether A is slower than B by more than the
//! tolerance, faster by more, or neither; or a verdict from two sets of samples that other tools
//! exported.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::Serialize;
use spindle_stats::csm::confidence_sequence;
use spindle_stats::rng::SplitMix64;
use spindle_stats::round::{ln_down, next_down, next_up};
use spindle_stats::{quantile_interval, GateKnowledge, GateVerdict, ToleranceGate};

use crate::exec::CommandLine;
use crate::exit::{self, CliError, CliResult};
use crate::interrupt;
use crate::output;
use crate::samples::{self, Accept, Unit};
use crate::slo::progress_bar;
use crate::units::{format_percent, format_probability, format_seconds};

pub struct CompareArgs {
    pub eps: f64,
    pub tolerance: f64,
    pub max_pairs: u64,
    pub max_time: Option<Duration>,
    pub warmup: u64,
    pub seed: Option<u64>,
    pub json: bool,
    pub quiet: bool,
    pub a: CommandLine,
    pub b: CommandLine,
}

pub struct SamplesArgs {
    pub eps: f64,
    pub tolerance: f64,
    pub json: bool,
    pub a: PathBuf,
    pub b: PathBuf,
}

/// Splits `CMD_A ::: CMD_B`.
pub fn split_commands(words: &[OsString]) -> CliResult<(Vec<OsString>, Vec<OsString>)> {
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
    samples: u64,
}

/// What the gate knows, in the report's words.
#[derive(Serialize)]
struct Known {
    /// Median ratio A/B > 1 + tolerance.
    slower: bool,
    /// Median ratio A/B < 1 / (1 + tolerance).
    faster: bool,
    /// Median ratio A/B <= 1 + tolerance.
    not_slower: bool,
    /// Median ratio A/B >= 1 / (1 + tolerance).
    not_faster: bool,
}

impl From<GateKnowledge> for Known {
    fn from(k: GateKnowledge) -> Self {
        Self {
            slower: k.above_tolerance,
            faster: k.below_tolerance,
            not_slower: k.not_slower,
            not_faster: k.not_faster,
        }
    }
}

#[derive(Serialize)]
struct CompareReport {
    verdict: &'static str,
    exit_code: u8,
    reason: String,
    /// "paired runs" or "unpaired samples".
    mode: &'static str,
    /// What the verdict is a claim about, and how it was decided.
    method: &'static str,
    tolerance: f64,
    /// The "no difference" band for the ratio A/B: [1/(1 + tolerance), 1 + tolerance].
    band: [f64; 2],
    eps: f64,
    /// Median of the per-pair ratios t_A/t_B (paired), or median(A)/median(B) (unpaired).
    median_ratio: f64,
    /// Its confidence interval (null where too few samples bound it).
    median_ratio_interval: [Option<f64>; 2],
    interval_level: f64,
    known: Known,
    /// Pairs measured (paired), or samples in A (unpaired).
    pairs: u64,
    /// P(A faster in a pair), a secondary statistic: estimate and confidence interval (at ε)
    /// over the untied pairs.
    p_a_faster: Option<f64>,
    p_a_faster_interval: Option<[f64; 2]>,
    ties: u64,
    a: Side,
    b: Side,
    interrupted: bool,
    /// Seconds from the start to the verdict (including warm-up).
    wall_s: f64,
}

#[derive(Clone, Copy, PartialEq)]
enum Stop {
    Verdict,
    MaxPairs,
    MaxTime,
    Interrupted,
    Failed,
}

pub fn run(args: CompareArgs) -> CliResult<u8> {
    let mut gate = ToleranceGate::new(args.tolerance, args.eps)?;
    let mut rng = args
        .seed
        .map(SplitMix64::new)
        .unwrap_or_else(SplitMix64::from_entropy);
    interrupt::install();
    let progress = progress_bar(args.quiet);
    let started = Instant::now();

    for i in 0..args.warmup {
        progress.set_message(format!("warm-up {}/{}", i + 1, args.warmup));
        for cmd in [&args.a, &args.b] {
            let run = cmd.run(None)?;
            if interrupt::requested() {
                progress.finish_and_clear();
                eprintln!("spindle: interrupted during the warm-up; nothing measured");
                return Ok(interrupt::INTERRUPTED);
            }
            check(cmd, run)?;
        }
    }

    let (mut times_a, mut times_b) = (Vec::new(), Vec::new());
    let mut error = None;
    let stop = loop {
        if interrupt::requested() {
            break Stop::Interrupted;
        }
        // Randomise the order within each pair so that "runs first" is not a hidden variable.
        let a_first = rng.next_u64() & 1 == 1;
        let result = if a_first {
            pair_run(&args.a, &args.b)
        } else {
            pair_run(&args.b, &args.a).map(|(b, a)| (a, b))
        };
        let (ta, tb) = match result {
            // Ctrl-C reaches the commands too: a run it killed is not a failure of theirs.
            Err(_) if interrupt::requested() => break Stop::Interrupted,
            Ok(_) if interrupt::requested() => break Stop::Interrupted,
            Ok(times) => times,
            Err(e) => {
                error = Some(e);
                break Stop::Failed;
            }
        };
        times_a.push(ta);
        times_b.push(tb);
        let decided = gate.observe(ta / tb).is_some();
        progress.set_message(format!(
            "pairs {} · ratio A/B {:.3} (last pair) · A {} / B {}",
            gate.pairs(),
            ta / tb,
            format_seconds(ta),
            format_seconds(tb)
        ));
        if decided {
            break Stop::Verdict;
        }
        if gate.pairs() >= args.max_pairs {
            break Stop::MaxPairs;
        }
        if args.max_time.is_some_and(|t| started.elapsed() >= t) {
            break Stop::MaxTime;
        }
    };
    progress.finish_and_clear();

    if times_a.is_empty() {
        return match error {
            Some(e) => Err(e),
            None if stop == Stop::Interrupted => {
                eprintln!("spindle: interrupted before the first pair completed; nothing measured");
                Ok(interrupt::INTERRUPTED)
            }
            None => Err(CliError::Execution("no pair of runs completed".into())),
        };
    }

    let ratios: Vec<f64> = times_a.iter().zip(&times_b).map(|(a, b)| a / b).collect();
    let q = quantile_interval(&ratios, 0.5, gate.log_eps()).expect("at least one pair");
    let (lo, hi) = gate.clamp((q.lower.unwrap_or(0.0), q.upper.unwrap_or(f64::INFINITY)));
    let interval = [q.lower.map(|_| lo), q.upper.map(|_| hi)];

    let wins = times_a.iter().zip(&times_b).filter(|(a, b)| a < b).count() as u64;
    let ties = times_a.iter().zip(&times_b).filter(|(a, b)| a == b).count() as u64;
    let untied = times_a.len() as u64 - ties;
    let (p_a_faster, p_a_faster_interval) = if untied > 0 {
        let (l, h) = confidence_sequence(untied, wins, ln_down(args.eps));
        (Some(wins as f64 / untied as f64), Some([l, h]))
    } else {
        (None, None)
    };

    let verdict = gate.verdict();
    let n = gate.pairs();
    let why_stopped = match stop {
        Stop::Verdict => String::new(),
        Stop::MaxPairs => format!("no verdict within {n} pairs (--max-runs)"),
        Stop::MaxTime => format!("no verdict before --max-time, after {n} pairs"),
        Stop::Interrupted => format!("stopped by Ctrl-C after {n} pairs"),
        Stop::Failed => format!("stopped by a failed run after {n} pairs"),
    };
    let report = CompareReport {
        verdict: verdict_name(verdict),
        exit_code: exit_code(verdict),
        reason: reason(verdict, &gate.knowledge(), args.tolerance, &why_stopped),
        mode: "paired runs",
        method: "median of the per-pair time ratios A/B; Robbins' confidence sequence for the median (order statistics), valid at any stopping time",
        tolerance: args.tolerance,
        band: [gate.lower_ratio(), gate.upper_ratio()],
        eps: args.eps,
        median_ratio: q.estimate,
        median_ratio_interval: interval,
        interval_level: 1.0 - args.eps,
        known: gate.knowledge().into(),
        pairs: gate.pairs(),
        p_a_faster,
        p_a_faster_interval,
        ties,
        a: side(args.a.display(), &times_a),
        b: side(args.b.display(), &times_b),
        interrupted: stop == Stop::Interrupted,
        wall_s: started.elapsed().as_secs_f64(),
    };
    output::emit(args.json, &report, print_report);
    match (stop, error) {
        (_, Some(e)) => Err(e),
        (Stop::Interrupted, None) => Ok(interrupt::INTERRUPTED),
        (_, None) => Ok(report.exit_code),
    }
}

/// `compare --samples A B`: unpaired samples from files. Each median gets an order-statistic
/// confidence interval at ε/2 (ε/4 per end), and the verdict compares the ratio of medians with
/// the tolerance band: wrong with probability at most ε.
pub fn run_samples(args: SamplesArgs) -> CliResult<u8> {
    let started = Instant::now();
    let a = samples::read(&args.a, Accept::PositiveTimes)?;
    let b = samples::read(&args.b, Accept::PositiveTimes)?;
    if a.unit != b.unit {
        return Err(exit::usage(format!(
            "{} is a JSON export (seconds) and {} plain numbers (unknown unit): give two plain files in one unit, or two exports",
            if a.unit == Unit::Seconds { args.a.display() } else { args.b.display() },
            if a.unit == Unit::Seconds { args.b.display() } else { args.a.display() },
        )));
    }
    let (upper, lower) = (1.0 + args.tolerance, 1.0 / (1.0 + args.tolerance));
    let log_eps = ln_down(next_down(args.eps / 2.0));
    let qa = quantile_interval(&a.values, 0.5, log_eps).expect("not empty");
    let qb = quantile_interval(&b.values, 0.5, log_eps).expect("not empty");
    let ratio_lo = match (qa.lower, qb.upper) {
        (Some(la), Some(ub)) => Some(next_down(la / ub)),
        _ => None,
    };
    let ratio_hi = match (qa.upper, qb.lower) {
        (Some(ua), Some(lb)) => Some(next_up(ua / lb)),
        _ => None,
    };
    let known = GateKnowledge {
        above_tolerance: ratio_lo.is_some_and(|l| l > upper),
        below_tolerance: ratio_hi.is_some_and(|h| h < lower),
        not_slower: ratio_hi.is_some_and(|h| h <= upper),
        not_faster: ratio_lo.is_some_and(|l| l >= lower),
    };
    let verdict = if known.above_tolerance {
        GateVerdict::Slower
    } else if known.below_tolerance {
        GateVerdict::Faster
    } else if known.not_slower && known.not_faster {
        GateVerdict::Within
    } else {
        GateVerdict::Undecided
    };
    let mut why = String::new();
    if verdict == GateVerdict::Undecided {
        let (na, nb) = (a.values.len(), b.values.len());
        why = if ratio_lo.is_none() || ratio_hi.is_none() {
            format!(
                "{na} and {nb} samples are too few to bound each median at eps = {} (see spindle stats quantile N 0.5 {})",
                format_probability(args.eps),
                format_probability(args.eps / 2.0)
            )
        } else {
            format!("{na} and {nb} samples do not place the ratio of medians relative to the tolerance band")
        };
    }
    let unit_note =
        |s: &samples::Samples, path: &PathBuf| format!("{} ({})", path.display(), s.source);
    let report = CompareReport {
        verdict: verdict_name(verdict),
        exit_code: exit_code(verdict),
        reason: reason(verdict, &known, args.tolerance, &why),
        mode: "unpaired samples",
        method: "ratio of the medians median(A)/median(B); order-statistic confidence interval of each median (CSM, eps/2 each); not the per-pair ratio, since the samples are not paired",
        tolerance: args.tolerance,
        band: [lower, upper],
        eps: args.eps,
        median_ratio: qa.estimate / qb.estimate,
        median_ratio_interval: [ratio_lo, ratio_hi],
        interval_level: 1.0 - args.eps,
        known: known.into(),
        pairs: a.values.len() as u64,
        p_a_faster: None,
        p_a_faster_interval: None,
        ties: 0,
        a: side(unit_note(&a, &args.a), &a.values),
        b: side(unit_note(&b, &args.b), &b.values),
        interrupted: false,
        wall_s: started.elapsed().as_secs_f64(),
    };
    let seconds = a.unit == Unit::Seconds;
    output::emit(args.json, &report, |r| {
        print_report_with(r, if seconds { Some(format_seconds) } else { None })
    });
    Ok(report.exit_code)
}

fn verdict_name(v: GateVerdict) -> &'static str {
    match v {
        GateVerdict::Slower => "A slower",
        GateVerdict::Faster => "A faster",
        GateVerdict::Within => "within tolerance",
        GateVerdict::Undecided => "undecided",
    }
}

fn exit_code(v: GateVerdict) -> u8 {
    match v {
        GateVerdict::Faster => exit::HOLDS,
        GateVerdict::Slower => exit::VIOLATED,
        GateVerdict::Within | GateVerdict::Undecided => exit::UNDECIDED,
    }
}

/// `5%`, `2.5%`, `0.1%`: a tolerance as the user wrote it.
fn percent(fraction: f64) -> String {
    let text = format!("{:.6}", fraction * 100.0);
    format!("{}%", text.trim_end_matches('0').trim_end_matches('.'))
}

fn reason(v: GateVerdict, k: &GateKnowledge, tolerance: f64, why_stopped: &str) -> String {
    let tol = percent(tolerance);
    match v {
        GateVerdict::Slower => format!("in the typical pair A takes more than {tol} longer than B"),
        GateVerdict::Faster => format!("in the typical pair B takes more than {tol} longer than A"),
        GateVerdict::Within => {
            format!("in the typical pair neither takes more than {tol} longer than the other")
        }
        GateVerdict::Undecided => {
            let known = match (k.not_slower, k.not_faster) {
                (true, _) => format!("; known so far: A is not slower than B by more than {tol}"),
                (_, true) => format!("; known so far: A is not faster than B by more than {tol}"),
                _ => String::new(),
            };
            format!("{why_stopped}{known}")
        }
    }
}

fn side(command: String, t: &[f64]) -> Side {
    Side {
        command,
        median_s: quantile_interval(t, 0.5, -1.0)
            .map(|q| q.estimate)
            .unwrap_or(f64::NAN),
        min_s: t.iter().copied().fold(f64::INFINITY, f64::min),
        samples: t.len() as u64,
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
    print_report_with(r, Some(format_seconds));
}

fn print_report_with(r: &CompareReport, seconds: Option<fn(f64) -> String>) {
    let headline = match r.verdict {
        "A slower" => "A slower",
        "A faster" => "A faster",
        "within tolerance" => "No difference beyond the tolerance",
        _ if r.interrupted => "Interrupted, undecided",
        _ => "Undecided",
    };
    println!("{headline}: {}.", r.reason);
    let show = |x: Option<f64>| x.map(|v| format!("{v:.3}")).unwrap_or_else(|| "?".into());
    let what = if r.mode == "paired runs" {
        "median time ratio A/B"
    } else {
        "ratio of median times A/B"
    };
    println!(
        "  {what}: {:.3}, {} confidence interval [{}, {}]; no-difference band [{:.3}, {:.3}] (tolerance {})",
        r.median_ratio,
        format_percent(r.interval_level),
        show(r.median_ratio_interval[0]),
        show(r.median_ratio_interval[1]),
        r.band[0],
        r.band[1],
        percent(r.tolerance)
    );
    let time = |v: f64| match seconds {
        Some(f) => f(v),
        None => format!("{v}"),
    };
    if r.mode == "paired runs" {
        let p = match (r.p_a_faster, r.p_a_faster_interval) {
            (Some(p), Some([l, h])) => format!(
                "; A faster in {} of pairs (interval [{}, {}])",
                format_percent(p),
                format_percent(l),
                format_percent(h)
            ),
            _ => String::new(),
        };
        println!("  {} pairs in {}{p}", r.pairs, format_seconds(r.wall_s));
    } else {
        println!("  unpaired samples: {}", r.method);
    }
    for (name, s) in [("A", &r.a), ("B", &r.b)] {
        println!(
            "  {name}: {}  median {}  min {}  ({} samples)",
            s.command,
            time(s.median_s),
            time(s.min_s),
            s.samples
        );
    }
    println!(
        "  probability of a wrong verdict: at most {} (of a wrong \"A slower\": at most {})",
        format_probability(r.eps),
        format_probability(r.eps / 2.0)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<OsString> {
        s.split_whitespace().map(OsString::from).collect()
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

    #[test]
    fn undecided_reasons_say_what_is_known() {
        let k = GateKnowledge {
            not_slower: true,
            ..GateKnowledge::default()
        };
        let r = reason(
            GateVerdict::Undecided,
            &k,
            0.05,
            "stopped by Ctrl-C after 7 pairs",
        );
        assert!(r.contains("Ctrl-C") && r.contains("not slower"), "{r}");
        assert_eq!(exit_code(GateVerdict::Slower), exit::VIOLATED);
        assert_eq!(exit_code(GateVerdict::Faster), exit::HOLDS);
        assert_eq!(exit_code(GateVerdict::Within), exit::UNDECIDED);
        assert_eq!(percent(0.05), "5%");
        assert_eq!(percent(0.025), "2.5%");
        assert_eq!(percent(0.07), "7%");
    }
}
