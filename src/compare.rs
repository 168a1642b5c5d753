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
use spindle_stats::round::ln_down;
use spindle_stats::{
    median_ratio_verdict, quantile_interval, GateKnowledge, GateVerdict, QuantileInterval,
    ToleranceGate,
};

use crate::exec::CommandLine;
use crate::exit::{self, CliError, CliResult};
use crate::interrupt;
use crate::output;
use crate::samples::{self, Accept, Unit};
use crate::slo::progress_bar;
use crate::units::{count, format_percent, format_probability, format_seconds, format_value};

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
    /// Null when no pair was measured.
    median_s: Option<f64>,
    min_s: Option<f64>,
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

/// The report of paired runs (`--json`): times in seconds.
#[derive(Serialize)]
struct CompareReport {
    verdict: &'static str,
    exit_code: u8,
    reason: String,
    /// "paired runs" (the "unpaired samples" of `--samples` have a report of their own).
    mode: &'static str,
    /// What the verdict is a claim about, and how it was decided.
    method: &'static str,
    tolerance: f64,
    /// The "no difference" band for the ratio A/B: [1/(1 + tolerance), 1 + tolerance].
    band: [f64; 2],
    eps: f64,
    /// Median of the per-pair ratios t_A/t_B (null when no pair was measured).
    median_ratio: Option<f64>,
    /// Its confidence interval (null where too few samples bound it).
    median_ratio_interval: [Option<f64>; 2],
    interval_level: f64,
    known: Known,
    /// Pairs measured.
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

/// One side of `--samples`: the values are times in seconds when `unit` says so, otherwise
/// numbers in whatever unit the file was written in.
#[derive(Serialize)]
struct SampleSide {
    /// The file as given (with its `#N`).
    file: String,
    /// What the file held: "hyperfine: CMD", "criterion sample.json (time per iteration)",
    /// "plain numbers".
    source: String,
    samples: u64,
    median: f64,
    /// The median's confidence interval at eps/2 (null where too few samples bound it).
    median_interval: [Option<f64>; 2],
    min: f64,
}

/// The report of `--samples` (`--json`). Unpaired: no pairs, no per-pair statistics.
#[derive(Serialize)]
struct SamplesReport {
    verdict: &'static str,
    exit_code: u8,
    reason: String,
    /// "unpaired samples".
    mode: &'static str,
    method: &'static str,
    tolerance: f64,
    /// The "no difference" band for the ratio A/B: [1/(1 + tolerance), 1 + tolerance].
    band: [f64; 2],
    eps: f64,
    /// median(A) / median(B).
    median_ratio: f64,
    /// Its confidence interval (null where too few samples bound it).
    median_ratio_interval: [Option<f64>; 2],
    interval_level: f64,
    known: Known,
    /// "s" when both files hold times (converted to seconds); null for plain numbers, whose
    /// unit only their author knows.
    unit: Option<&'static str>,
    a: SampleSide,
    b: SampleSide,
    /// Seconds spent reading and deciding.
    wall_s: f64,
}

/// What a verdict sentence is about.
#[derive(Clone, Copy, PartialEq)]
enum Subject {
    /// The typical pair of paired runs.
    Pairs,
    /// The medians of two samples of times.
    MedianTimes,
    /// The medians of two samples of numbers of unknown unit.
    Medians,
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
    // --max-time is a bound, not a point to stop after: a pair, warm-up or measured, that would
    // end past it if it took as long as the longest pair so far is not started. The first pair
    // always runs, or there would be nothing to judge by.
    let mut longest_pair = Duration::ZERO;
    let no_time_for_a_pair = |longest: Duration| {
        args.max_time
            .is_some_and(|limit| !longest.is_zero() && started.elapsed() + longest > limit)
    };

    for i in 0..args.warmup {
        if no_time_for_a_pair(longest_pair) {
            break;
        }
        progress.set_message(format!("warm-up {}/{}", i + 1, args.warmup));
        let pair_started = Instant::now();
        for cmd in [&args.a, &args.b] {
            let run = cmd.run(None)?;
            if interrupt::requested() {
                progress.finish_and_clear();
                errln!("spindle: interrupted during the warm-up; nothing measured");
                return Ok(interrupt::INTERRUPTED);
            }
            check(cmd, run)?;
        }
        longest_pair = longest_pair.max(pair_started.elapsed());
    }

    let (mut times_a, mut times_b) = (Vec::new(), Vec::new());
    let mut error = None;
    let stop = loop {
        if interrupt::requested() {
            break Stop::Interrupted;
        }
        if no_time_for_a_pair(longest_pair) {
            break Stop::MaxTime;
        }
        // Randomise the order within each pair so that "runs first" is not a hidden variable.
        let a_first = rng.next_u64() & 1 == 1;
        let pair_started = Instant::now();
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
        longest_pair = longest_pair.max(pair_started.elapsed());
        times_a.push(ta);
        times_b.push(tb);
        let decided = gate.observe(ta / tb).is_some();
        progress.set_message(format!(
            "{} · ratio A/B {:.3} (last pair) · A {} / B {}",
            count(gate.pairs(), "pair", "pairs"),
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
    };
    progress.finish_and_clear();

    // Nothing measured: say why. (A warm-up that used up --max-time is reported below, as an
    // undecided verdict with no pairs.)
    if times_a.is_empty() && stop != Stop::MaxTime {
        return match error {
            Some(e) => Err(e),
            None if stop == Stop::Interrupted => {
                errln!("spindle: interrupted before the first pair completed; nothing measured");
                Ok(interrupt::INTERRUPTED)
            }
            None => Err(CliError::Execution("no pair of runs completed".into())),
        };
    }

    let ratios: Vec<f64> = times_a.iter().zip(&times_b).map(|(a, b)| a / b).collect();
    let (median_ratio, interval) = match quantile_interval(&ratios, 0.5, gate.log_eps()) {
        Some(q) => {
            let (lo, hi) = gate.clamp((q.lower.unwrap_or(0.0), q.upper.unwrap_or(f64::INFINITY)));
            (Some(q.estimate), [q.lower.map(|_| lo), q.upper.map(|_| hi)])
        }
        None => (None, [None, None]),
    };

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
    let pairs = count(gate.pairs(), "pair", "pairs");
    let why_stopped = match stop {
        Stop::Verdict => String::new(),
        Stop::MaxPairs => format!("no verdict within {pairs} (--max-runs)"),
        Stop::MaxTime if gate.pairs() == 0 => "no verdict within --max-time: the warm-up left no time for a pair (raise --max-time, or lower --warmup)".to_string(),
        Stop::MaxTime => format!(
            "no verdict within --max-time: {pairs}, and another would not have ended in time"
        ),
        Stop::Interrupted => format!("stopped by Ctrl-C after {pairs}"),
        Stop::Failed => format!("stopped by a failed run after {pairs}"),
    };
    let report = CompareReport {
        verdict: verdict_name(verdict),
        exit_code: exit_code(verdict),
        reason: reason(
            verdict,
            &gate.knowledge(),
            args.tolerance,
            Subject::Pairs,
            &why_stopped,
        ),
        mode: "paired runs",
        method: "median of the per-pair time ratios A/B; Robbins' confidence sequence for the median (order statistics), valid at any stopping time",
        tolerance: args.tolerance,
        band: [gate.lower_ratio(), gate.upper_ratio()],
        eps: args.eps,
        median_ratio,
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

/// `compare --samples A B`: unpaired samples from files, decided by the ratio of their medians
/// ([`spindle_stats::median_ratio_verdict`]: wrong with probability at most ε).
pub fn run_samples(args: SamplesArgs) -> CliResult<u8> {
    let started = Instant::now();
    if args.a.as_os_str() == "-" && args.b.as_os_str() == "-" {
        return Err(exit::usage("only one of A and B can be read from stdin"));
    }
    let a = samples::read(&args.a, Accept::PositiveTimes)?;
    let b = samples::read(&args.b, Accept::PositiveTimes)?;
    if a.unit != b.unit {
        return Err(exit::usage(format!(
            "{} is a JSON export (seconds) and {} plain numbers (unknown unit): give two plain files in one unit, or two exports",
            if a.unit == Unit::Seconds { args.a.display() } else { args.b.display() },
            if a.unit == Unit::Seconds { args.b.display() } else { args.a.display() },
        )));
    }
    let m = median_ratio_verdict(&a.values, &b.values, args.tolerance, args.eps)?;
    let seconds = a.unit == Unit::Seconds;
    let subject = if seconds {
        Subject::MedianTimes
    } else {
        Subject::Medians
    };
    let mut why = String::new();
    if m.verdict == GateVerdict::Undecided {
        let sizes = format!(
            "{} of A and {} of B",
            count(a.values.len() as u64, "sample", "samples"),
            count(b.values.len() as u64, "sample", "samples")
        );
        why = if m.interval.0.is_none() || m.interval.1.is_none() {
            format!(
                "{sizes} are too few to bound each median at eps = {} (see spindle stats quantile N 0.5 {})",
                format_probability(args.eps),
                format_probability(args.eps / 2.0)
            )
        } else {
            format!("{sizes} do not place the ratio of the medians relative to the tolerance band")
        };
    }
    let sample_side = |path: &PathBuf, s: &samples::Samples, q: QuantileInterval| SampleSide {
        file: path.display().to_string(),
        source: s.source.clone(),
        samples: s.values.len() as u64,
        median: q.estimate,
        median_interval: [q.lower, q.upper],
        min: s.values.iter().copied().fold(f64::INFINITY, f64::min),
    };
    let report = SamplesReport {
        verdict: verdict_name(m.verdict),
        exit_code: exit_code(m.verdict),
        reason: reason(m.verdict, &m.knowledge, args.tolerance, subject, &why),
        mode: "unpaired samples",
        method: "ratio of the medians median(A)/median(B); order-statistic confidence interval of each median (CSM, eps/2 each); not a per-pair ratio, since the samples are not paired",
        tolerance: args.tolerance,
        band: [1.0 / (1.0 + args.tolerance), 1.0 + args.tolerance],
        eps: args.eps,
        median_ratio: m.ratio,
        median_ratio_interval: [m.interval.0, m.interval.1],
        interval_level: 1.0 - args.eps,
        known: m.knowledge.into(),
        unit: seconds.then_some("s"),
        a: sample_side(&args.a, &a, m.a),
        b: sample_side(&args.b, &b, m.b),
        wall_s: started.elapsed().as_secs_f64(),
    };
    output::emit(args.json, &report, print_samples_report);
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

fn reason(
    v: GateVerdict,
    k: &GateKnowledge,
    tolerance: f64,
    subject: Subject,
    why_stopped: &str,
) -> String {
    let tol = percent(tolerance);
    // "A's median time is more than 5% longer than B's": the unpaired claims name the medians,
    // never a pair.
    let medians = |x: &str, y: &str, not: &str| match subject {
        Subject::MedianTimes => {
            format!("{x}'s median time is {not}more than {tol} longer than {y}'s")
        }
        _ => format!("{x}'s median is {not}more than {tol} higher than {y}'s"),
    };
    let noun = if subject == Subject::MedianTimes {
        "median time"
    } else {
        "median"
    };
    let cmp = if subject == Subject::MedianTimes {
        "longer"
    } else {
        "higher"
    };
    match (v, subject) {
        (GateVerdict::Slower, Subject::Pairs) => {
            format!("in the typical pair A takes more than {tol} longer than B")
        }
        (GateVerdict::Faster, Subject::Pairs) => {
            format!("in the typical pair B takes more than {tol} longer than A")
        }
        (GateVerdict::Within, Subject::Pairs) => {
            format!("in the typical pair neither takes more than {tol} longer than the other")
        }
        (GateVerdict::Slower, _) => medians("A", "B", ""),
        (GateVerdict::Faster, _) => medians("B", "A", ""),
        (GateVerdict::Within, _) => {
            format!("neither {noun} is more than {tol} {cmp} than the other")
        }
        (GateVerdict::Undecided, _) => {
            let known = match (k.not_slower, k.not_faster, subject) {
                (true, _, Subject::Pairs) => {
                    format!("; known so far: A is not slower than B by more than {tol}")
                }
                (_, true, Subject::Pairs) => {
                    format!("; known so far: A is not faster than B by more than {tol}")
                }
                (true, _, _) => format!("; known so far: {}", medians("A", "B", "not ")),
                (_, true, _) => format!("; known so far: {}", medians("B", "A", "not ")),
                _ => String::new(),
            };
            format!("{why_stopped}{known}")
        }
    }
}

fn side(command: String, t: &[f64]) -> Side {
    Side {
        command,
        median_s: quantile_interval(t, 0.5, -1.0).map(|q| q.estimate),
        min_s: t.iter().copied().reduce(f64::min),
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

fn headline(verdict: &str, interrupted: bool) -> &'static str {
    match verdict {
        "A slower" => "A slower",
        "A faster" => "A faster",
        "within tolerance" => "No difference beyond the tolerance",
        _ if interrupted => "Interrupted, undecided",
        _ => "Undecided",
    }
}

/// `1.234` for a ratio, `?` where no sample bounds it.
fn ratio(x: Option<f64>) -> String {
    x.map(|v| format!("{v:.3}")).unwrap_or_else(|| "?".into())
}

fn print_ratio_line(
    what: &str,
    estimate: f64,
    interval: [Option<f64>; 2],
    level: f64,
    band: [f64; 2],
    tolerance: f64,
) {
    outln!(
        "  {what}: {:.3}, {} confidence interval [{}, {}]; no-difference band [{:.3}, {:.3}] (tolerance {})",
        estimate,
        format_percent(level),
        ratio(interval[0]),
        ratio(interval[1]),
        band[0],
        band[1],
        percent(tolerance)
    );
}

fn print_eps_line(eps: f64) {
    outln!(
        "  probability of a wrong verdict: at most {} (of a wrong \"A slower\": at most {})",
        format_probability(eps),
        format_probability(eps / 2.0)
    );
}

fn print_report(r: &CompareReport) {
    outln!("{}: {}.", headline(r.verdict, r.interrupted), r.reason);
    if let Some(ratio) = r.median_ratio {
        print_ratio_line(
            "median time ratio A/B",
            ratio,
            r.median_ratio_interval,
            r.interval_level,
            r.band,
            r.tolerance,
        );
    }
    let p = match (r.p_a_faster, r.p_a_faster_interval) {
        (Some(p), Some([l, h])) => format!(
            "; A faster in {} of pairs (interval [{}, {}])",
            format_percent(p),
            format_percent(l),
            format_percent(h)
        ),
        _ => String::new(),
    };
    outln!(
        "  {} in {}{p}",
        count(r.pairs, "pair", "pairs"),
        format_seconds(r.wall_s)
    );
    for (name, s) in [("A", &r.a), ("B", &r.b)] {
        let times = match (s.median_s, s.min_s) {
            (Some(median), Some(min)) => {
                format!(
                    "  median {}  min {}",
                    format_seconds(median),
                    format_seconds(min)
                )
            }
            _ => String::new(),
        };
        outln!(
            "  {name}: {}{times}  ({})",
            s.command,
            count(s.samples, "sample", "samples")
        );
    }
    print_eps_line(r.eps);
}

fn print_samples_report(r: &SamplesReport) {
    outln!("{}: {}.", headline(r.verdict, false), r.reason);
    let (what, value): (&str, fn(f64) -> String) = match r.unit {
        Some(_) => ("ratio of the median times A/B", format_seconds),
        None => ("ratio of the medians A/B", format_value),
    };
    print_ratio_line(
        what,
        r.median_ratio,
        r.median_ratio_interval,
        r.interval_level,
        r.band,
        r.tolerance,
    );
    outln!(
        "  unpaired samples: the verdict is about median(A) / median(B), each median with a confidence interval at eps/2"
    );
    let bound = |x: Option<f64>| x.map(value).unwrap_or_else(|| "?".into());
    for (name, s) in [("A", &r.a), ("B", &r.b)] {
        outln!(
            "  {name}: {} ({})  median {} [{}, {}]  min {}  ({})",
            s.file,
            s.source,
            value(s.median),
            bound(s.median_interval[0]),
            bound(s.median_interval[1]),
            value(s.min),
            count(s.samples, "sample", "samples")
        );
    }
    print_eps_line(r.eps);
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

    /// Unpaired samples have no pairs: their sentences name the medians.
    #[test]
    fn unpaired_reasons_speak_of_medians() {
        let k = GateKnowledge::default();
        for v in [
            GateVerdict::Slower,
            GateVerdict::Faster,
            GateVerdict::Within,
        ] {
            for subject in [Subject::MedianTimes, Subject::Medians] {
                let r = reason(v, &k, 0.05, subject, "");
                assert!(r.contains("median") && !r.contains("pair"), "{r}");
            }
        }
        assert_eq!(
            reason(GateVerdict::Slower, &k, 0.05, Subject::Medians, ""),
            "A's median is more than 5% higher than B's"
        );
        assert_eq!(
            reason(GateVerdict::Within, &k, 0.05, Subject::MedianTimes, ""),
            "neither median time is more than 5% longer than the other"
        );
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
            Subject::Pairs,
            "stopped by Ctrl-C after 7 pairs",
        );
        assert!(r.contains("Ctrl-C") && r.contains("not slower"), "{r}");
        let r = reason(
            GateVerdict::Undecided,
            &k,
            0.05,
            Subject::MedianTimes,
            "too few",
        );
        assert!(
            r.ends_with("A's median time is not more than 5% longer than B's"),
            "{r}"
        );
        assert_eq!(exit_code(GateVerdict::Slower), exit::VIOLATED);
        assert_eq!(exit_code(GateVerdict::Faster), exit::HOLDS);
        assert_eq!(exit_code(GateVerdict::Within), exit::UNDECIDED);
        assert_eq!(percent(0.05), "5%");
        assert_eq!(percent(0.025), "2.5%");
        assert_eq!(percent(0.07), "7%");
    }
}
