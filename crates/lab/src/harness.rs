//! The measurement harness: run threads together, run interleaved trials, decide claims.
//!
//! An experiment is a set of *variants* (ours and peers) measured in *trials*. One trial runs
//! every variant once, in a fresh random order, so that slow drifts of the machine (frequency,
//! other tenants, cache state) hit all variants alike. Claims compare variants *within* a trial —
//! "in this trial, was A at most 1.2× B?" — and each claim's stream of yes/no answers is fed to
//! a CSM [`Driver`]. Trials continue until every claim is decided (and the profile's minimum
//! number of trials is reached), or the budget runs out; a claim the budget cannot decide is
//! reported undecided.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use serde::Serialize;
use spindle_stats::rng::SplitMix64;
use spindle_stats::{quantile_interval, Decision, Driver, DriverConfig};

use crate::machine::Machine;
use crate::sys;

/// How much work the lab does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Profile {
    /// Tiny sizes: checks that everything runs (tests and CI); figures are meaningless.
    Smoke,
    /// The default: the whole lab in a few minutes on two cores.
    Quick,
    /// Larger samples and budgets.
    Full,
}

/// Limits on the number of trials.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Budget {
    /// Always run at least this many trials (summaries need data even when claims are easy).
    pub min_trials: u64,
    /// Never run more.
    pub max_trials: u64,
    /// Stop starting new trials after this long.
    #[serde(serialize_with = "as_secs")]
    pub max_time: Duration,
}

fn as_secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// What an experiment gets from the lab.
pub struct Ctx<'a> {
    pub profile: Profile,
    /// False-positive rate of each claim.
    pub eps: f64,
    pub machine: &'a Machine,
    /// This experiment's progress bar (its length and message are the experiment's to set).
    pub progress: ProgressBar,
    pub rng: SplitMix64,
}

/// The time a group of threads took, from the first start to the last finish.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    pub elapsed: Duration,
    /// TSC ticks over the same span.
    pub ticks: u64,
}

/// Runs `body(i)` on `threads` new threads released together; thread `i` is pinned to
/// `cpus[i % cpus.len()]` when `cpus` is given. Thread start-up is not timed: each thread
/// records its own start after the release and its own end, and the result spans the earliest
/// start to the latest end.
pub fn run_together(threads: usize, cpus: Option<&[usize]>, body: impl Fn(usize) + Sync) -> Timing {
    let ready = AtomicUsize::new(0);
    let go = AtomicBool::new(false);
    let spans: Vec<(Instant, u64, Instant, u64)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let (ready, go, body) = (&ready, &go, &body);
                scope.spawn(move || {
                    if let Some(cpus) = cpus.filter(|c| !c.is_empty()) {
                        sys::pin_current_thread(cpus[i % cpus.len()]);
                    }
                    ready.fetch_add(1, Ordering::AcqRel);
                    let mut spins = 0u32;
                    while !go.load(Ordering::Acquire) {
                        spins += 1;
                        if spins.is_multiple_of(64) {
                            std::thread::yield_now();
                        } else {
                            std::hint::spin_loop();
                        }
                    }
                    let (t0, c0) = (Instant::now(), sys::rdtsc());
                    body(i);
                    let (c1, t1) = (sys::rdtsc(), Instant::now());
                    (t0, c0, t1, c1)
                })
            })
            .collect();
        while ready.load(Ordering::Acquire) < threads {
            std::thread::yield_now();
        }
        go.store(true, Ordering::Release);
        handles
            .into_iter()
            .map(|h| h.join().expect("benchmark thread panicked"))
            .collect()
    });
    let start = spans
        .iter()
        .map(|s| s.0)
        .min()
        .expect("at least one thread");
    let end = spans
        .iter()
        .map(|s| s.2)
        .max()
        .expect("at least one thread");
    let c_start = spans.iter().map(|s| s.1).min().unwrap_or(0);
    let c_end = spans.iter().map(|s| s.3).max().unwrap_or(0);
    Timing {
        elapsed: end - start,
        ticks: c_end.saturating_sub(c_start),
    }
}

/// Time `body`, which performs `n` operations: ns and TSC ticks per operation.
pub fn per_op(n: u64, body: impl FnOnce()) -> Measurement {
    let (t0, c0) = (Instant::now(), sys::rdtsc());
    body();
    let (c1, t1) = (sys::rdtsc(), Instant::now());
    Measurement {
        value: (t1 - t0).as_nanos() as f64 / n as f64,
        ticks: Some(c1.wrapping_sub(c0) as f64 / n as f64),
    }
}

/// One measurement of one variant: a value in the experiment's unit, and the TSC ticks per
/// operation when that makes sense.
#[derive(Clone, Copy, Debug)]
pub struct Measurement {
    pub value: f64,
    pub ticks: Option<f64>,
}

/// A contestant.
pub struct Variant<'a> {
    /// Short stable name, used in claims and JSON.
    pub id: &'static str,
    /// What it is, for people.
    pub label: String,
    /// Threads it uses.
    pub threads: usize,
    /// Runs it once.
    pub run: Box<dyn FnMut() -> Measurement + 'a>,
}

/// Whether a claim bounds a ratio from above or from below.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Relation {
    AtMost(f64),
    AtLeast(f64),
}

impl Relation {
    fn holds(self, ratio: f64) -> bool {
        match self {
            Relation::AtMost(b) => ratio <= b,
            Relation::AtLeast(b) => ratio >= b,
        }
    }

    pub fn bound(self) -> f64 {
        match self {
            Relation::AtMost(b) | Relation::AtLeast(b) => b,
        }
    }

    pub fn symbol(self) -> &'static str {
        match self {
            Relation::AtMost(_) => "≤",
            Relation::AtLeast(_) => "≥",
        }
    }
}

/// A claim about the ratio of two variants' values measured in the same trial.
///
/// Each trial is a Bernoulli outcome: did `numerator / denominator` satisfy `relation`? The
/// driver tests P(yes) against `band`: above `band.1` the claim holds, below `band.0` it is
/// violated, inside the band it is borderline (undecided). With the default band (0.4, 0.6),
/// "holds" says the relation held in more than 60% of trials, so the *median* ratio satisfies it.
#[derive(Clone, Debug)]
pub struct Claim {
    pub id: &'static str,
    pub statement: String,
    pub numerator: &'static str,
    pub denominator: &'static str,
    pub relation: Relation,
    pub band: (f64, f64),
}

impl Claim {
    pub fn ratio(
        id: &'static str,
        statement: impl Into<String>,
        numerator: &'static str,
        denominator: &'static str,
        relation: Relation,
    ) -> Self {
        Claim {
            id,
            statement: statement.into(),
            numerator,
            denominator,
            relation,
            band: (0.4, 0.6),
        }
    }
}

/// The data of a run of trials: `values[v][t]` is variant `v` in trial `t`.
pub struct Trials {
    pub ids: Vec<&'static str>,
    pub labels: Vec<String>,
    pub threads: Vec<usize>,
    pub values: Vec<Vec<f64>>,
    pub ticks: Vec<Vec<f64>>,
    pub claims: Vec<ClaimResult>,
    pub wall: Duration,
    /// Why the trials stopped.
    pub stop_reason: String,
}

impl Trials {
    pub fn count(&self) -> u64 {
        self.values.first().map_or(0, |v| v.len() as u64)
    }

    pub fn index(&self, id: &str) -> usize {
        self.ids
            .iter()
            .position(|&x| x == id)
            .unwrap_or_else(|| panic!("no variant {id}"))
    }

    /// The report figure every experiment shows: each claim's per-trial ratios against its
    /// bound, with the verdict.
    pub fn claims_figure(&self) -> crate::report::Figure {
        crate::report::Figure::Strips {
            title: "Claims: every trial's ratio against the claimed bound (black line)".into(),
            axis: "ratio (log scale)".into(),
            log: true,
            strips: self
                .claims
                .iter()
                .map(|c| crate::report::Strip {
                    label: format!("{} ({} / {})", c.id, c.numerator, c.denominator),
                    values: self.ratios(c.numerator, c.denominator),
                    bound: c.bound,
                    verdict: c.verdict.as_str().into(),
                })
                .collect(),
        }
    }

    /// Per-trial ratios of two variants.
    pub fn ratios(&self, numerator: &str, denominator: &str) -> Vec<f64> {
        let (n, d) = (self.index(numerator), self.index(denominator));
        self.values[n]
            .iter()
            .zip(&self.values[d])
            .map(|(a, b)| a / b)
            .collect()
    }
}

/// The verdict on a claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Holds,
    Violated,
    Undecided,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Holds => "holds",
            Verdict::Violated => "violated",
            Verdict::Undecided => "undecided",
        }
    }
}

/// A claim and what the driver made of it.
#[derive(Clone, Debug, Serialize)]
pub struct ClaimResult {
    pub id: &'static str,
    pub statement: String,
    pub numerator: &'static str,
    pub denominator: &'static str,
    pub relation: &'static str,
    pub bound: f64,
    pub verdict: Verdict,
    /// One sentence on why.
    pub explanation: String,
    /// Trials the driver consumed before deciding.
    pub trials: u64,
    /// Trials in which the relation held.
    pub successes: u64,
    /// Confidence interval of P(relation holds in a trial), valid at the stopping time.
    pub success_interval: [f64; 2],
    pub band: [f64; 2],
    pub eps: f64,
    /// The per-trial ratio over all trials of the experiment: median and its interval.
    pub ratio: Summary,
}

/// Order statistics of a sample, with a confidence interval for the median.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Summary {
    pub n: u64,
    pub min: f64,
    pub p10: f64,
    pub median: f64,
    /// Median's confidence interval ends (None: too few samples), at the lab's ε.
    pub median_lo: Option<f64>,
    pub median_hi: Option<f64>,
    pub p90: f64,
    pub max: f64,
    pub mean: f64,
}

impl Summary {
    pub fn of(values: &[f64], eps: f64) -> Summary {
        let at = |q: f64| quantile_interval(values, q, eps.ln());
        let median = at(0.5);
        Summary {
            n: values.len() as u64,
            min: values.iter().copied().fold(f64::INFINITY, f64::min),
            p10: at(0.1).map_or(f64::NAN, |q| q.estimate),
            median: median.map_or(f64::NAN, |q| q.estimate),
            median_lo: median.and_then(|q| q.lower),
            median_hi: median.and_then(|q| q.upper),
            p90: at(0.9).map_or(f64::NAN, |q| q.estimate),
            max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            mean: values.iter().sum::<f64>() / values.len().max(1) as f64,
        }
    }
}

/// Runs trials of `variants` until `claims` are decided or `budget` runs out.
pub fn run_trials(
    ctx: &mut Ctx,
    variants: &mut [Variant],
    claims: &[Claim],
    budget: Budget,
) -> Trials {
    let started = Instant::now();
    let ids: Vec<_> = variants.iter().map(|v| v.id).collect();
    for c in claims {
        assert!(
            ids.contains(&c.numerator) && ids.contains(&c.denominator),
            "claim {} names an unknown variant",
            c.id
        );
    }
    let index = |id: &str| ids.iter().position(|&x| x == id).expect("checked above");
    let mut drivers: Vec<Driver> = claims
        .iter()
        .map(|c| {
            Driver::new(
                DriverConfig::band(c.band.0, c.band.1, ctx.eps).max_count(budget.max_trials),
            )
            .expect("claim bands and the lab's eps are validated")
        })
        .collect();

    // Warm-up: one unrecorded run of each variant (page faults, lazy initialisation).
    ctx.progress.set_message("warming up");
    for v in variants.iter_mut() {
        (v.run)();
    }

    let mut values = vec![Vec::new(); variants.len()];
    let mut ticks = vec![Vec::new(); variants.len()];
    let mut order: Vec<usize> = (0..variants.len()).collect();
    ctx.progress.set_length(budget.max_trials);
    ctx.progress.set_position(0);
    let stop_reason;
    loop {
        ctx.rng.shuffle(&mut order);
        let mut trial = vec![0.0; variants.len()];
        for &i in &order {
            let m = (variants[i].run)();
            trial[i] = m.value;
            if let Some(t) = m.ticks {
                ticks[i].push(t);
            }
        }
        for (i, v) in trial.iter().enumerate() {
            values[i].push(*v);
        }
        for (claim, driver) in claims.iter().zip(drivers.iter_mut()) {
            let ratio = trial[index(claim.numerator)] / trial[index(claim.denominator)];
            driver.observe(claim.relation.holds(ratio));
        }
        let done_claims = drivers.iter().filter(|d| d.finished().is_some()).count();
        let n = values[0].len() as u64;
        ctx.progress.set_position(n);
        ctx.progress.set_message(format!(
            "trial {n} · {done_claims}/{} claims decided",
            claims.len()
        ));
        if n >= budget.min_trials && done_claims == claims.len() {
            stop_reason = format!("every claim decided after {n} trials");
            break;
        }
        if n >= budget.max_trials {
            stop_reason = format!("trial budget ({n}) reached");
            break;
        }
        if started.elapsed() >= budget.max_time {
            stop_reason = format!(
                "time budget ({:.0} s) reached after {n} trials",
                budget.max_time.as_secs_f64()
            );
            break;
        }
    }

    let mut trials = Trials {
        ids,
        labels: variants.iter().map(|v| v.label.clone()).collect(),
        threads: variants.iter().map(|v| v.threads).collect(),
        values,
        ticks,
        claims: Vec::new(),
        wall: Duration::ZERO,
        stop_reason,
    };
    trials.claims = claims
        .iter()
        .zip(&drivers)
        .map(|(c, d)| judge(c, d, &trials, ctx.eps, budget))
        .collect();
    trials.wall = started.elapsed();
    trials
}

fn judge(claim: &Claim, driver: &Driver, trials: &Trials, eps: f64, budget: Budget) -> ClaimResult {
    let out = driver.outcome();
    let ratios = trials.ratios(claim.numerator, claim.denominator);
    let ratio = Summary::of(&ratios, eps);
    let relation_words = format!(
        "{} {} {}",
        "ratio",
        claim.relation.symbol(),
        claim.relation.bound()
    );
    let (lo, hi) = claim.band;
    let (verdict, explanation) = match out.decision {
        Decision::Above => (
            Verdict::Holds,
            format!(
                "{relation_words} in {} of {} trials: P > {hi} (median ratio {:.3})",
                out.successes, out.n, ratio.median
            ),
        ),
        Decision::Below => (
            Verdict::Violated,
            format!(
                "{relation_words} in only {} of {} trials: P < {lo} (median ratio {:.3})",
                out.successes, out.n, ratio.median
            ),
        ),
        Decision::Within => (
            Verdict::Undecided,
            format!(
                "borderline: {relation_words} in between {:.0}% and {:.0}% of trials (median ratio {:.3} ≈ bound)",
                lo * 100.0,
                hi * 100.0,
                ratio.median
            ),
        ),
        Decision::Undecided => (
            Verdict::Undecided,
            format!(
                "not decided within the profile's budget ({} trials, at most {} / {:.0} s): {relation_words} in {} of {}",
                trials.count(),
                budget.max_trials,
                budget.max_time.as_secs_f64(),
                out.successes,
                out.n
            ),
        ),
    };
    ClaimResult {
        id: claim.id,
        statement: claim.statement.clone(),
        numerator: claim.numerator,
        denominator: claim.denominator,
        relation: match claim.relation {
            Relation::AtMost(_) => "at_most",
            Relation::AtLeast(_) => "at_least",
        },
        bound: claim.relation.bound(),
        verdict,
        explanation,
        trials: out.n,
        successes: out.successes,
        success_interval: [out.confidence.0, out.confidence.1],
        band: [lo, hi],
        eps,
        ratio,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_together_times_all_threads() {
        let t = run_together(2, Some(&sys::allowed_cpus()), |_| {
            std::thread::sleep(Duration::from_millis(20))
        });
        assert!(t.elapsed >= Duration::from_millis(20));
        assert!(t.ticks > 0);
    }

    #[test]
    fn summary_of_known_values() {
        let v: Vec<f64> = (1..=101).map(|x| x as f64).collect();
        let s = Summary::of(&v, 1e-3);
        assert_eq!((s.n, s.min, s.median, s.max), (101, 1.0, 51.0, 101.0));
        assert_eq!(s.mean, 51.0);
        assert!(s.median_lo.unwrap() < 51.0 && s.median_hi.unwrap() > 51.0);
    }

    fn ctx(machine: &Machine) -> Ctx<'_> {
        Ctx {
            profile: Profile::Smoke,
            eps: 1e-3,
            machine,
            progress: ProgressBar::hidden(),
            rng: SplitMix64::new(1),
        }
    }

    /// Two synthetic variants whose ratio is exactly 3 every trial: a claim "≥ 2" must hold,
    /// "≤ 2" must be violated, and trials stop once both are decided.
    #[test]
    fn claims_are_decided_by_the_driver() {
        let machine = crate::machine::Machine::detect();
        let mut ctx = ctx(&machine);
        let mut variants = vec![
            Variant {
                id: "a",
                label: "a".into(),
                threads: 1,
                run: Box::new(|| Measurement {
                    value: 3.0,
                    ticks: None,
                }),
            },
            Variant {
                id: "b",
                label: "b".into(),
                threads: 1,
                run: Box::new(|| Measurement {
                    value: 1.0,
                    ticks: None,
                }),
            },
        ];
        let claims = vec![
            Claim::ratio("ge", "a ≥ 2 b", "a", "b", Relation::AtLeast(2.0)),
            Claim::ratio("le", "a ≤ 2 b", "a", "b", Relation::AtMost(2.0)),
        ];
        let budget = Budget {
            min_trials: 5,
            max_trials: 1000,
            max_time: Duration::from_secs(60),
        };
        let trials = run_trials(&mut ctx, &mut variants, &claims, budget);
        assert_eq!(trials.claims[0].verdict, Verdict::Holds);
        assert_eq!(trials.claims[1].verdict, Verdict::Violated);
        assert!(
            trials.count() < 100,
            "stopped once decided: {}",
            trials.count()
        );
        assert_eq!(trials.claims[0].ratio.median, 3.0);
    }

    /// A ratio that satisfies the bound in exactly half the trials is borderline, never a verdict.
    #[test]
    fn borderline_claims_stay_undecided() {
        let machine = crate::machine::Machine::detect();
        let mut ctx = ctx(&machine);
        let flip = std::cell::Cell::new(false);
        let mut variants = vec![
            Variant {
                id: "a",
                label: "a".into(),
                threads: 1,
                run: Box::new(|| {
                    flip.set(!flip.get());
                    Measurement {
                        value: if flip.get() { 3.0 } else { 1.0 },
                        ticks: None,
                    }
                }),
            },
            Variant {
                id: "b",
                label: "b".into(),
                threads: 1,
                run: Box::new(|| Measurement {
                    value: 1.0,
                    ticks: None,
                }),
            },
        ];
        let claims = vec![Claim::ratio(
            "half",
            "a ≥ 2 b",
            "a",
            "b",
            Relation::AtLeast(2.0),
        )];
        let budget = Budget {
            min_trials: 5,
            max_trials: 200,
            max_time: Duration::from_secs(60),
        };
        let trials = run_trials(&mut ctx, &mut variants, &claims, budget);
        assert_eq!(trials.claims[0].verdict, Verdict::Undecided);
    }
}
