//! Comparing two commands (or two builds) from paired measurements.
//!
//! * [`ToleranceGate`]: the question a CI job asks — "is A slower than B by more than a
//!   tolerance τ?" — answered from the per-pair time ratio `r = t_A / t_B` in few pairs.
//! * [`SignTest`]: "does A beat B in more than half of the pairs?", tested against a band around
//!   ½: a secondary statistic, since a 0.1% win counts as much as a 2× one.
//!
//! * [`median_ratio_verdict`]: the same three verdicts from two *unpaired* samples (another
//!   tool's exports, say), about the ratio of the two medians instead of the median of a
//!   per-pair ratio.
//!
//! For permutation tests of two unpaired samples, see [`crate::exact`].
//!
//! # The tolerance gate
//!
//! Pairs of runs `(t_A, t_B)` are i.i.d. (the caller randomises the order within each pair), so
//! the ratios `r_i` are i.i.d. with some median `m` (if a whole interval of medians exists, read
//! every statement below as "every median"). Three verdicts:
//!
//! | verdict | claim |
//! |---|---|
//! | [`GateVerdict::Slower`] | `m > 1 + τ`: in the typical pair A takes more than τ longer than B |
//! | [`GateVerdict::Faster`] | `m < 1 / (1 + τ)`: in the typical pair B takes more than τ longer than A |
//! | [`GateVerdict::Within`] | `1 / (1 + τ) <= m <= 1 + τ`: no difference beyond the tolerance |
//!
//! Each is read off **one** confidence sequence: Robbins' order-statistic interval for the median
//! of `r` ([`crate::quantile_bounds`] with q = ½, ε/2 for each end), intersected over all pair
//! counts so far. (Intersecting is allowed: the sequence covers `m` at *every* `n` at once with
//! probability at least 1 − ε, so it covers it in the intersection too.) The gate says "slower" as
//! soon as the intersection lies above `1 + τ`, "faster" when it lies below `1/(1 + τ)`, and
//! "within" when it lies inside `[1/(1 + τ), 1 + τ]`. Hence, whatever the distributions and
//! whenever the gate (or the user, or a clock) stops:
//!
//! * P(some verdict is wrong, or the reported median interval misses `m`) <= ε;
//! * P(verdict "slower" while `m <= 1 + τ`) <= ε/2 — only the interval's lower end can cause it —
//!   and likewise P("faster" while `m >= 1/(1 + τ)`) <= ε/2.
//!
//! In counting terms, with `c` = #{i: r_i <= 1 + τ}, `d` = #{i: r_i < 1/(1 + τ)} and `L`, `U` the
//! ranks of the interval's ends after `n` pairs, the interval's lower end exceeds `1 + τ` iff
//! `c < L`, its upper end is at most `1 + τ` iff `c >= U`, and symmetrically for `d`: each check
//! is a CSM test of the Bernoulli stream `1[r_i > 1 + τ]` (or `1[r_i < 1/(1 + τ)]`) against ½,
//! which is why the gate needs no sorting and costs O(1) per pair once the ranks for `n` are
//! known (they depend on `n` only and are memoised).
//!
//! How fast: two identical commands with a few percent of noise have `P(r > 1 + τ)` and
//! `P(r < 1/(1 + τ))` well below ½ at τ = 5%, and both tests reject within a few dozen pairs; a
//! 2× difference puts every pair beyond the tolerance, and at ε = 10⁻³ the lower end of the
//! interval passes 1.05 after 15 pairs (`n ln 2 − ln(n + 1) > ln(2/ε)`). A true median ratio
//! close to `1 + τ` takes long, as it must: it is the hard case for any test.

//!
//! # Unpaired samples: the ratio of medians
//!
//! Samples of A and of B taken apart (two hyperfine exports, two criterion baselines) have no
//! pairs, so no per-pair ratio: [`median_ratio_verdict`] compares the medians `m_A` and `m_B`
//! instead. Each median gets Robbins' order-statistic interval at ε/2 (ε/4 for each end), so
//! both intervals cover their medians at once with probability at least 1 − ε. Times are
//! positive, so `m_A / m_B` then lies in `[lo_A / hi_B, hi_A / lo_B]` (each quotient rounded
//! outwards), and the verdict is read off that interval against the tolerance band exactly as
//! the gate reads its own: wrong with probability at most ε. A wrong "slower" needs `lo_A`
//! above `m_A` or `hi_B` below `m_B`, at most ε/4 each, so it has probability at most ε/2, as
//! with the gate. This is a claim about the typical run of each command, not about the typical
//! pair, and it needs more samples: the intervals of two medians are wider than one.

use crate::driver::{Decision, Driver, DriverConfig, Outcome, Step, StopRule};
use crate::quantile::{quantile_bounds, quantile_interval, QuantileInterval, QuantileRanks};
use crate::round::{ln_down, next_down, next_up};
use crate::StatsError;

/// What a [`ToleranceGate`] concluded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GateVerdict {
    /// The median ratio A/B exceeds 1 + τ.
    Slower,
    /// The median ratio A/B is below 1 / (1 + τ).
    Faster,
    /// The median ratio lies within [1/(1 + τ), 1 + τ].
    Within,
    /// Not decided (yet).
    Undecided,
}

impl GateVerdict {
    /// Lower-case name, for reports.
    pub fn as_str(self) -> &'static str {
        match self {
            GateVerdict::Slower => "slower",
            GateVerdict::Faster => "faster",
            GateVerdict::Within => "within",
            GateVerdict::Undecided => "undecided",
        }
    }
}

/// What the running confidence sequence of the median ratio has established so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GateKnowledge {
    /// The median exceeds 1 + τ (A slower).
    pub above_tolerance: bool,
    /// The median is below 1/(1 + τ) (A faster).
    pub below_tolerance: bool,
    /// The median is at most 1 + τ (A is not slower beyond the tolerance).
    pub not_slower: bool,
    /// The median is at least 1/(1 + τ) (A is not faster beyond the tolerance).
    pub not_faster: bool,
}

impl GateKnowledge {
    fn verdict(&self) -> Option<GateVerdict> {
        if self.above_tolerance {
            Some(GateVerdict::Slower)
        } else if self.below_tolerance {
            Some(GateVerdict::Faster)
        } else if self.not_slower && self.not_faster {
            Some(GateVerdict::Within)
        } else {
            None
        }
    }
}

/// Sequential test of "A slower than B beyond a tolerance" from per-pair time ratios; see the
/// module documentation for the claim and its guarantee.
///
/// ```
/// use spindle_stats::{GateVerdict, ToleranceGate};
/// // A takes twice as long as B in every pair: decided in 15 pairs at ε = 10⁻³.
/// let mut gate = ToleranceGate::new(0.05, 1e-3).unwrap();
/// let mut pairs = 0;
/// while gate.observe(2.0).is_none() {
///     pairs += 1;
/// }
/// assert_eq!(gate.verdict(), GateVerdict::Slower);
/// assert_eq!(gate.pairs(), 15);
/// ```
#[derive(Clone, Debug)]
pub struct ToleranceGate {
    tolerance: f64,
    eps: f64,
    log_eps: f64,
    /// Ranks of the median's interval ends, by number of pairs (index 0 unused).
    ranks: Vec<QuantileRanks>,
    n: u64,
    /// Ratios at most 1 + τ.
    at_most_hi: u64,
    /// Ratios below 1 / (1 + τ).
    below_lo: u64,
    known: GateKnowledge,
    verdict: Option<GateVerdict>,
}

impl ToleranceGate {
    /// A gate with tolerance `tolerance` (τ: 0.05 for 5%; at least 0) and false-verdict rate
    /// `eps` (in (0, 1)). With τ = 0 "within" can only be shown for a median of exactly 1.
    pub fn new(tolerance: f64, eps: f64) -> Result<Self, StatsError> {
        if !(tolerance >= 0.0 && tolerance.is_finite()) {
            return Err(StatsError::OutOfRange {
                name: "tolerance",
                value: tolerance,
                range: "[0, ∞)",
            });
        }
        if !(1e-300..1.0).contains(&eps) {
            return Err(StatsError::OutOfRange {
                name: "eps",
                value: eps,
                range: "[1e-300, 1)",
            });
        }
        Ok(Self {
            tolerance,
            eps,
            log_eps: ln_down(eps),
            ranks: Vec::new(),
            n: 0,
            at_most_hi: 0,
            below_lo: 0,
            known: GateKnowledge::default(),
            verdict: None,
        })
    }

    /// Forgets every pair (keeps the memoised ranks): for simulations.
    pub fn restart(&mut self) {
        self.n = 0;
        self.at_most_hi = 0;
        self.below_lo = 0;
        self.known = GateKnowledge::default();
        self.verdict = None;
    }

    /// `1 + τ`: a ratio above it is a pair where A is slower beyond the tolerance.
    pub fn upper_ratio(&self) -> f64 {
        1.0 + self.tolerance
    }

    /// `1 / (1 + τ)`: a ratio below it is a pair where A is faster beyond the tolerance.
    pub fn lower_ratio(&self) -> f64 {
        1.0 / (1.0 + self.tolerance)
    }

    /// The tolerance τ.
    pub fn tolerance(&self) -> f64 {
        self.tolerance
    }

    /// The false-verdict budget ε.
    pub fn eps(&self) -> f64 {
        self.eps
    }

    /// `ln ε` rounded down, as passed to [`quantile_bounds`] (which gives each end ε/2): use it
    /// for the median interval that goes with the verdict.
    pub fn log_eps(&self) -> f64 {
        self.log_eps
    }

    /// Records the ratio `t_A / t_B` of one pair and returns the verdict once there is one.
    /// After that, further pairs are ignored. A NaN ratio is ignored.
    pub fn observe(&mut self, ratio: f64) -> Option<GateVerdict> {
        if self.verdict.is_some() || ratio.is_nan() {
            return self.verdict;
        }
        self.n += 1;
        self.at_most_hi += (ratio <= self.upper_ratio()) as u64;
        self.below_lo += (ratio < self.lower_ratio()) as u64;
        let ranks = self.ranks_at(self.n);
        let (c, d) = (self.at_most_hi, self.below_lo);
        if let Some(lower) = ranks.lower {
            // The lower end is the lower-th smallest ratio.
            self.known.above_tolerance |= c < lower;
            self.known.not_faster |= d < lower;
        }
        if let Some(upper) = ranks.upper {
            self.known.not_slower |= c >= upper;
            self.known.below_tolerance |= d >= upper;
        }
        self.verdict = self.known.verdict();
        self.verdict
    }

    fn ranks_at(&mut self, n: u64) -> QuantileRanks {
        let index = n as usize;
        while self.ranks.len() <= index {
            let m = self.ranks.len() as u64;
            let ranks = if m == 0 {
                QuantileRanks {
                    estimate: 0,
                    lower: None,
                    upper: None,
                }
            } else {
                quantile_bounds(m, 0.5, self.log_eps)
            };
            self.ranks.push(ranks);
        }
        self.ranks[index]
    }

    /// Pairs observed.
    pub fn pairs(&self) -> u64 {
        self.n
    }

    /// The verdict (undecided while running).
    pub fn verdict(&self) -> GateVerdict {
        self.verdict.unwrap_or(GateVerdict::Undecided)
    }

    /// What is known so far, verdict or not.
    pub fn knowledge(&self) -> GateKnowledge {
        self.known
    }

    /// Narrows an interval for the median ratio computed from the same pairs (with
    /// [`crate::quantile_interval`] and [`Self::log_eps`]) to what the running
    /// intersection has established, so that the interval shown never contradicts the verdict.
    pub fn clamp(&self, (mut lo, mut hi): (f64, f64)) -> (f64, f64) {
        if self.known.above_tolerance {
            lo = lo.max(self.upper_ratio());
        }
        if self.known.not_faster {
            lo = lo.max(self.lower_ratio());
        }
        if self.known.below_tolerance {
            hi = hi.min(self.lower_ratio());
        }
        if self.known.not_slower {
            hi = hi.min(self.upper_ratio());
        }
        (lo, hi.max(lo))
    }
}

/// Two unpaired samples compared by the ratio of their medians: see the module documentation
/// ("Unpaired samples") for the claim and its guarantee.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct UnpairedMedians {
    /// The median of A, with its interval at ε/2 (ε/4 for each end; `None` where too few samples
    /// bound it).
    pub a: QuantileInterval,
    /// The median of B, likewise.
    pub b: QuantileInterval,
    /// The point estimate median(A) / median(B).
    pub ratio: f64,
    /// The interval of the ratio of the true medians, `lo_A / hi_B` rounded down and
    /// `hi_A / lo_B` rounded up (`None` where a median is unbounded on the side it needs).
    pub interval: (Option<f64>, Option<f64>),
    /// What the interval establishes about the tolerance band.
    pub knowledge: GateKnowledge,
    /// The verdict ([`GateVerdict::Undecided`] when the interval straddles a band edge, or is
    /// open).
    pub verdict: GateVerdict,
}

/// Decides whether A is slower than B by more than `tolerance` (τ, at least 0) from two
/// unpaired samples of positive costs (times, say), by the ratio of their medians, with a wrong
/// verdict at most `eps` likely (a wrong [`GateVerdict::Slower`] at most `eps`/2).
///
/// Errors: an empty sample, a value that is not finite and above zero, or `tolerance`/`eps`
/// outside the ranges of [`ToleranceGate::new`].
///
/// ```
/// use spindle_stats::{median_ratio_verdict, GateVerdict};
/// // 40 runs of each; every run of A takes twice as long as the runs of B around it.
/// let b: Vec<f64> = (0..40).map(|i| 1.0 + 0.001 * i as f64).collect();
/// let a: Vec<f64> = b.iter().map(|t| 2.0 * t).collect();
/// let m = median_ratio_verdict(&a, &b, 0.05, 1e-3).unwrap();
/// assert_eq!(m.verdict, GateVerdict::Slower);
/// assert!(m.interval.0.unwrap() > 1.05);
/// ```
pub fn median_ratio_verdict(
    a: &[f64],
    b: &[f64],
    tolerance: f64,
    eps: f64,
) -> Result<UnpairedMedians, StatsError> {
    // The same parameter checks as the gate's, so that both modes refuse the same input.
    let gate = ToleranceGate::new(tolerance, eps)?;
    for (name, sample) in [("A", a), ("B", b)] {
        if sample.is_empty() {
            return Err(StatsError::Invalid(format!("sample {name} is empty")));
        }
        if let Some(v) = sample.iter().find(|v| !(v.is_finite() && **v > 0.0)) {
            return Err(StatsError::Invalid(format!(
                "sample {name} holds {v}: values must be finite and above zero"
            )));
        }
    }
    // ε/2 per median (one ULP less, so that no rounding can enlarge it); quantile_interval
    // gives each end half of that.
    let log_eps = ln_down(next_down(eps / 2.0));
    let qa = quantile_interval(a, 0.5, log_eps).expect("checked non-empty");
    let qb = quantile_interval(b, 0.5, log_eps).expect("checked non-empty");
    let lo = match (qa.lower, qb.upper) {
        (Some(la), Some(ub)) => Some(next_down(la / ub)),
        _ => None,
    };
    let hi = match (qa.upper, qb.lower) {
        (Some(ua), Some(lb)) => Some(next_up(ua / lb)),
        _ => None,
    };
    let (upper, lower) = (gate.upper_ratio(), gate.lower_ratio());
    let knowledge = GateKnowledge {
        above_tolerance: lo.is_some_and(|l| l > upper),
        below_tolerance: hi.is_some_and(|h| h < lower),
        not_slower: hi.is_some_and(|h| h <= upper),
        not_faster: lo.is_some_and(|l| l >= lower),
    };
    Ok(UnpairedMedians {
        a: qa,
        b: qb,
        ratio: qa.estimate / qb.estimate,
        interval: (lo, hi),
        knowledge,
        verdict: knowledge.verdict().unwrap_or(GateVerdict::Undecided),
    })
}

/// Who won a [`SignTest`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Winner {
    /// A beats B in more than ½ + band of the pairs.
    A,
    /// A beats B in fewer than ½ − band of the pairs.
    B,
    /// A beats B in between ½ − band and ½ + band of the pairs.
    Indistinguishable,
    /// The budget ran out first.
    Undecided,
}

impl Winner {
    fn from_decision(d: Decision) -> Self {
        match d {
            Decision::Above => Winner::A,
            Decision::Below => Winner::B,
            Decision::Within => Winner::Indistinguishable,
            Decision::Undecided => Winner::Undecided,
        }
    }
}

/// Sequential paired sign test; see the module documentation.
#[derive(Clone, Debug)]
pub struct SignTest {
    driver: Driver,
    ties: u64,
}

/// The state of a [`SignTest`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SignOutcome {
    /// The verdict.
    pub winner: Winner,
    /// The driver's view: `estimate` is the fraction of untied pairs that A won, `confidence` its
    /// confidence interval, `n` the number of untied pairs.
    pub wins: Outcome,
    /// Pairs that were ties (not counted in `wins.n`).
    pub ties: u64,
}

impl SignTest {
    /// A sign test with indifference band `band` (in [0, 0.5)) around ½ and false-positive rate
    /// `eps`, deciding after at most `max_pairs` untied pairs.
    pub fn new(band: f64, eps: f64, max_pairs: u64) -> Result<Self, StatsError> {
        if !(0.0..0.5).contains(&band) {
            return Err(StatsError::OutOfRange {
                name: "band",
                value: band,
                range: "[0, 0.5)",
            });
        }
        let config = DriverConfig::band(0.5 - band, 0.5 + band, eps)
            .max_count(max_pairs)
            .rule(StopRule::FullDecision);
        Ok(Self {
            driver: Driver::new(config)?,
            ties: 0,
        })
    }

    /// Records a pair of costs where lower is better (times, say): A wins when `a < b`.
    pub fn observe_costs(&mut self, a: f64, b: f64) -> Step {
        self.observe(if a < b {
            Some(true)
        } else if b < a {
            Some(false)
        } else {
            None
        })
    }

    /// Records one pair: `Some(true)` if A won, `Some(false)` if B won, `None` for a tie.
    pub fn observe(&mut self, a_won: Option<bool>) -> Step {
        if let Some(d) = self.driver.finished() {
            return Step::Done(d);
        }
        match a_won {
            Some(won) => self.driver.observe(won),
            None => {
                self.ties += 1;
                Step::Continue
            }
        }
    }

    /// The underlying driver (estimate, interval, …).
    pub fn driver(&self) -> &Driver {
        &self.driver
    }

    /// Pairs that were ties.
    pub fn ties(&self) -> u64 {
        self.ties
    }

    /// The verdict so far (final once `observe` returned `Done`).
    pub fn outcome(&self) -> SignOutcome {
        let wins = self.driver.outcome();
        SignOutcome {
            winner: Winner::from_decision(wins.decision),
            wins,
            ties: self.ties,
        }
    }
}

/// Runs a [`SignTest`] over pairs of costs until it decides or the pairs run out.
pub fn sign_test(
    pairs: impl IntoIterator<Item = (f64, f64)>,
    band: f64,
    eps: f64,
    max_pairs: u64,
) -> Result<SignOutcome, StatsError> {
    let mut test = SignTest::new(band, eps, max_pairs)?;
    for (a, b) in pairs {
        if let Step::Done(_) = test.observe_costs(a, b) {
            break;
        }
    }
    Ok(test.outcome())
}

/// P(X ≥ k) for X ~ Binomial(n, ½): the one-sided p-value of a sign test that saw `k` of `n`
/// observations on one side of a median hypothesised to lie between them. Summed exactly in
/// the log domain (relative error below 1e-11 for n in the thousands, as the tests check), in
/// O(n) steps.
///
/// ```
/// use spindle_stats::sign_tail;
/// assert_eq!(sign_tail(10, 10), 1.0 / 1024.0);
/// assert!((sign_tail(10, 9) - 11.0 / 1024.0).abs() < 1e-15);
/// assert_eq!(sign_tail(10, 0), 1.0);
/// ```
pub fn sign_tail(n: u64, k: u64) -> f64 {
    if k == 0 {
        return 1.0;
    }
    if k > n {
        return 0.0;
    }
    // ln C(n, j) for j = k, k+1, …, n by the ratio C(n, j+1) / C(n, j) = (n − j) / (j + 1),
    // starting from ln C(n, k) = Σ_{i<k} ln((n − i) / (i + 1)) (or from the symmetric end).
    let start: f64 = (0..k.min(n - k))
        .map(|i| ((n - i) as f64).ln() - ((i + 1) as f64).ln())
        .sum();
    let mut log_terms = Vec::with_capacity((n - k + 1) as usize);
    let mut log_c = start;
    for j in k..=n {
        log_terms.push(log_c);
        if j < n {
            log_c += ((n - j) as f64).ln() - ((j + 1) as f64).ln();
        }
    }
    let top = log_terms.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let sum: f64 = log_terms.iter().map(|&t| (t - top).exp()).sum();
    (top + sum.ln() - n as f64 * std::f64::consts::LN_2)
        .exp()
        .min(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quantile::quantile_interval;
    use crate::rng::SplitMix64;

    /// A standard normal deviate (Box–Muller).
    fn normal(rng: &mut SplitMix64) -> f64 {
        let u = 1.0 - rng.next_f64(); // in (0, 1]
        let v = rng.next_f64();
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }

    /// The run time of a command whose typical time is `base`: `noise` relative Gaussian jitter,
    /// and one run in twenty hit by a 20–70% outlier (a page-cache miss, another tenant).
    fn run_time(rng: &mut SplitMix64, base: f64, noise: f64) -> f64 {
        let outlier = if rng.bernoulli(0.05) {
            1.2 + 0.5 * rng.next_f64()
        } else {
            1.0
        };
        (base * (1.0 + noise * normal(rng)) * outlier).max(base * 0.5)
    }

    /// Runs a gate on simulated pairs until it decides or `max_pairs` pass.
    fn simulate(
        gate: &mut ToleranceGate,
        rng: &mut SplitMix64,
        slowdown: f64,
        noise: f64,
        max_pairs: u64,
    ) -> GateVerdict {
        gate.restart();
        while gate.pairs() < max_pairs {
            let ratio = run_time(rng, slowdown, noise) / run_time(rng, 1.0, noise);
            if let Some(v) = gate.observe(ratio) {
                return v;
            }
        }
        GateVerdict::Undecided
    }

    /// The gate is the running intersection of the median's confidence sequence: after every
    /// pair, what it knows matches the interval computed from scratch (and intersected).
    #[test]
    fn gate_reads_its_verdict_off_the_median_interval() {
        let mut rng = SplitMix64::new(3);
        for &(slowdown, noise) in &[(1.0, 0.03), (1.08, 0.05), (0.9, 0.02), (1.2, 0.1)] {
            let mut gate = ToleranceGate::new(0.05, 1e-2).unwrap();
            let (mut ratios, mut lo_max, mut hi_min) = (Vec::new(), 0.0f64, f64::INFINITY);
            for _ in 0..400 {
                let r = run_time(&mut rng, slowdown, noise) / run_time(&mut rng, 1.0, noise);
                ratios.push(r);
                let before = gate.verdict();
                gate.observe(r);
                if before != GateVerdict::Undecided {
                    break;
                }
                let q = quantile_interval(&ratios, 0.5, gate.log_eps()).unwrap();
                lo_max = lo_max.max(q.lower.unwrap_or(0.0));
                hi_min = hi_min.min(q.upper.unwrap_or(f64::INFINITY));
                let k = gate.knowledge();
                assert_eq!(
                    k.above_tolerance,
                    lo_max > 1.05,
                    "{slowdown} after {}",
                    ratios.len()
                );
                assert_eq!(k.not_faster, lo_max >= 1.0 / 1.05);
                assert_eq!(k.not_slower, hi_min <= 1.05);
                assert_eq!(k.below_tolerance, hi_min < 1.0 / 1.05);
            }
            assert_ne!(gate.verdict(), GateVerdict::Undecided, "{slowdown}");
            let (lo, hi) = gate.clamp((lo_max, hi_min));
            assert!(lo <= hi);
        }
    }

    /// The issue's A/A requirement: 10⁴ simulated runs of a command against itself (3% noise and
    /// outliers) at the default ε = 10⁻³. A false "A slower" must be at most ε/2 likely: we
    /// count them and ask the CSM's own confidence sequence (at 10⁻⁶) whether the rate could be
    /// that low. Every run must reach a verdict, and quickly.
    #[test]
    fn a_a_runs_rarely_say_slower_and_decide_in_a_few_dozen_pairs() {
        let mut rng = SplitMix64::new(0xa_a);
        let mut gate = ToleranceGate::new(0.05, 1e-3).unwrap();
        let runs = 10_000u64;
        let (mut slower, mut faster, mut within, mut pairs, mut longest) = (0, 0, 0, 0, 0);
        for _ in 0..runs {
            match simulate(&mut gate, &mut rng, 1.0, 0.03, 2000) {
                GateVerdict::Slower => slower += 1,
                GateVerdict::Faster => faster += 1,
                GateVerdict::Within => within += 1,
                GateVerdict::Undecided => {}
            }
            pairs += gate.pairs();
            longest = longest.max(gate.pairs());
        }
        let (lo, _) = crate::csm::confidence_sequence(runs, slower, 1e-6f64.ln());
        assert!(lo < 1e-3 / 2.0, "{slower} false 'A slower' in {runs}");
        assert_eq!(within + slower + faster, runs, "every run decides");
        assert!(
            pairs / runs < 100 && longest < 400,
            "{pairs} pairs, longest {longest}"
        );
    }

    /// The hardest case for the false-"slower" bound: A slower by exactly the tolerance, so that
    /// half the pairs exceed it (the median ratio is 1 + τ, and "slower" is false). At ε = 0.1
    /// the gate may say "slower" in at most 5% of runs, however long they go on.
    #[test]
    fn a_median_exactly_at_the_tolerance_is_rarely_called_slower() {
        let mut rng = SplitMix64::new(11);
        let mut gate = ToleranceGate::new(0.05, 0.1).unwrap();
        let runs = 2000u64;
        let mut slower = 0;
        for _ in 0..runs {
            gate.restart();
            while gate.pairs() < 1000 {
                // Symmetric around 1.05 on the log scale: P(r > 1.05) = ½ exactly.
                let r = 1.05 * (0.05 * normal(&mut rng)).exp();
                if gate.observe(r).is_some() {
                    break;
                }
            }
            slower += (gate.verdict() == GateVerdict::Slower) as u64;
        }
        let (lo, _) = crate::csm::confidence_sequence(runs, slower, 1e-6f64.ln());
        assert!(lo < 0.05, "{slower} 'slower' in {runs}");
    }

    /// Real differences are found, in the right direction, within the issue's budgets.
    #[test]
    fn gate_finds_real_differences_quickly() {
        let mut rng = SplitMix64::new(21);
        let mut gate = ToleranceGate::new(0.05, 1e-3).unwrap();
        for _ in 0..200 {
            assert_eq!(
                simulate(&mut gate, &mut rng, 2.0, 0.03, 20),
                GateVerdict::Slower
            );
            assert_eq!(
                simulate(&mut gate, &mut rng, 0.5, 0.03, 20),
                GateVerdict::Faster
            );
            assert_eq!(
                simulate(&mut gate, &mut rng, 1.10, 0.03, 300),
                GateVerdict::Slower
            );
            assert_eq!(
                simulate(&mut gate, &mut rng, 1.0, 0.03, 200),
                GateVerdict::Within
            );
        }
    }

    #[test]
    fn gate_rejects_bad_parameters_and_ignores_nan() {
        assert!(ToleranceGate::new(-0.1, 1e-3).is_err());
        assert!(ToleranceGate::new(f64::NAN, 1e-3).is_err());
        assert!(ToleranceGate::new(0.05, 0.0).is_err());
        assert!(ToleranceGate::new(0.05, 1.0).is_err());
        let mut gate = ToleranceGate::new(0.05, 1e-3).unwrap();
        assert_eq!(gate.observe(f64::NAN), None);
        assert_eq!(gate.pairs(), 0);
    }

    /// Reference values: at ε = 10⁻³ each median gets ε/2, and `spindle stats quantile N 0.5
    /// 5e-4` gives its ranks: none for 16 samples, the extremes (1 and 17) for 17, 7 and 34 for
    /// 40. The interval of the ratio is then a quotient of two samples, rounded outwards.
    #[test]
    fn median_ratio_reference_values() {
        let series =
            |base: f64, n: u64| -> Vec<f64> { (1..=n).rev().map(|i| base + i as f64).collect() };

        // 16 a side: no order statistic bounds a median, whatever the data say.
        let m = median_ratio_verdict(&series(200.0, 16), &series(100.0, 16), 0.05, 1e-3).unwrap();
        assert_eq!(m.interval, (None, None));
        assert_eq!(m.verdict, GateVerdict::Undecided);
        assert_eq!(m.knowledge, GateKnowledge::default());

        // 17 a side: the medians are bounded by the smallest and largest samples.
        let m = median_ratio_verdict(&series(200.0, 17), &series(100.0, 17), 0.05, 1e-3).unwrap();
        assert_eq!((m.a.estimate, m.b.estimate), (209.0, 109.0));
        assert_eq!(m.ratio, 209.0 / 109.0);
        assert_eq!(
            m.interval,
            (Some(next_down(201.0 / 117.0)), Some(next_up(217.0 / 101.0)))
        );
        assert_eq!(m.verdict, GateVerdict::Slower);

        // 40 a side: ranks 7, 20 (the estimate) and 34.
        let (a, b) = (series(200.0, 40), series(100.0, 40));
        let m = median_ratio_verdict(&a, &b, 0.05, 1e-3).unwrap();
        assert_eq!(
            (m.a.lower, m.a.estimate, m.a.upper),
            (Some(207.0), 220.0, Some(234.0))
        );
        assert_eq!(
            m.interval,
            (Some(next_down(207.0 / 134.0)), Some(next_up(234.0 / 107.0)))
        );
        assert_eq!(m.verdict, GateVerdict::Slower);
        assert!(m.knowledge.above_tolerance && m.knowledge.not_faster);
        let m = median_ratio_verdict(&b, &a, 0.05, 1e-3).unwrap();
        assert_eq!(m.verdict, GateVerdict::Faster);
        assert_eq!(m.interval.1, Some(next_up(134.0 / 207.0)));

        // The same 40 values on both sides: 1007/1034 and 1034/1007 lie inside [1/1.05, 1.05].
        let same = series(1000.0, 40);
        let m = median_ratio_verdict(&same, &same, 0.05, 1e-3).unwrap();
        assert_eq!(m.verdict, GateVerdict::Within);
        assert_eq!(m.ratio, 1.0);
        // 1.5% is too tight for the same data: 1034/1007 > 1.015 and 1007/1034 < 1/1.015.
        let m = median_ratio_verdict(&same, &same, 0.015, 1e-3).unwrap();
        assert_eq!(m.verdict, GateVerdict::Undecided);
        assert_eq!(m.knowledge, GateKnowledge::default());
    }

    /// The hardest case for a false "slower": A's median exactly 1 + τ times B's. At ε = 0.2 a
    /// wrong "slower" may come at most ε/2 = 10% of the time.
    #[test]
    fn median_ratio_exactly_at_the_tolerance_is_rarely_called_slower() {
        let mut rng = SplitMix64::new(5);
        let runs = 2000u64;
        let mut slower = 0;
        for _ in 0..runs {
            let b: Vec<f64> = (0..60).map(|_| (0.1 * normal(&mut rng)).exp()).collect();
            let a: Vec<f64> = (0..60)
                .map(|_| 1.05 * (0.1 * normal(&mut rng)).exp())
                .collect();
            let m = median_ratio_verdict(&a, &b, 0.05, 0.2).unwrap();
            slower += (m.verdict == GateVerdict::Slower) as u64;
        }
        let (lo, _) = crate::csm::confidence_sequence(runs, slower, 1e-6f64.ln());
        assert!(lo < 0.1, "{slower} 'slower' in {runs}");
    }

    #[test]
    fn median_ratio_refuses_what_it_cannot_divide() {
        let ok = [1.0, 2.0];
        assert!(median_ratio_verdict(&[], &ok, 0.05, 1e-3).is_err());
        assert!(median_ratio_verdict(&ok, &[1.0, 0.0], 0.05, 1e-3).is_err());
        assert!(median_ratio_verdict(&ok, &[1.0, f64::NAN], 0.05, 1e-3).is_err());
        assert!(median_ratio_verdict(&[-1.0], &ok, 0.05, 1e-3).is_err());
        assert!(median_ratio_verdict(&ok, &ok, -0.05, 1e-3).is_err());
        assert!(median_ratio_verdict(&ok, &ok, 0.05, 1.0).is_err());
    }

    #[test]
    fn sign_test_finds_the_faster_side() {
        let mut rng = SplitMix64::new(7);
        // A takes 10 ± 1, B takes 11 ± 1: A wins most pairs.
        let pairs = (0..10_000).map(|_| {
            (
                10.0 + rng.next_f64() * 2.0 - 1.0,
                11.0 + rng.next_f64() * 2.0 - 1.0,
            )
        });
        let out = sign_test(pairs, 0.1, 1e-6, 10_000).unwrap();
        assert_eq!(out.winner, Winner::A);
        let mut rng = SplitMix64::new(8);
        let pairs = (0..10_000).map(|_| (12.0 + rng.next_f64(), 10.0 + rng.next_f64()));
        assert_eq!(
            sign_test(pairs, 0.1, 1e-6, 10_000).unwrap().winner,
            Winner::B
        );
    }

    #[test]
    fn sign_test_counts_ties_apart() {
        let mut t = SignTest::new(0.1, 1e-3, 1000).unwrap();
        for _ in 0..10 {
            t.observe_costs(1.0, 1.0);
        }
        assert_eq!(t.ties(), 10);
        assert_eq!(t.driver().n(), 0);
    }

    /// A/A: both sides from one distribution. The sign test must name a winner at most ε of the
    /// time; with 2000 repetitions at ε = 0.05 we check that the confidence sequence of the
    /// winner-naming rate (at 1e-6) reaches below 2ε/3, the two tests' share of the budget.
    #[test]
    fn same_distribution_never_names_a_winner_beyond_eps() {
        let mut rng = SplitMix64::new(2024);
        let reps = 2000;
        let mut winners = 0;
        let mut indistinguishable = 0;
        for _ in 0..reps {
            let mut t = SignTest::new(0.1, 0.05, 2000).unwrap();
            while t.observe_costs(rng.next_f64(), rng.next_f64()) == Step::Continue {}
            match t.outcome().winner {
                Winner::A | Winner::B => winners += 1,
                Winner::Indistinguishable => indistinguishable += 1,
                Winner::Undecided => {}
            }
        }
        let (lo, _) = crate::csm::confidence_sequence(reps, winners, 1e-6f64.ln());
        assert!(
            lo < 0.05 / 3.0 * 2.0,
            "{winners} winners named in {reps} A/A runs"
        );
        // The band makes A/A terminate: most runs end "indistinguishable".
        assert!(indistinguishable > reps / 2, "{indistinguishable}");
    }

    #[test]
    fn bad_band_is_an_error() {
        assert!(SignTest::new(0.5, 0.01, 10).is_err());
        assert!(SignTest::new(-0.1, 0.01, 10).is_err());
        assert!(SignTest::new(0.1, 2.0, 10).is_err());
    }

    #[test]
    fn sign_tail_matches_exact_binomial_sums() {
        // Exact: Σ_{j ≥ k} C(n, j) / 2^n, in integers for n ≤ 60.
        for n in [1u64, 2, 7, 10, 38, 60] {
            let mut c = vec![1u128; 1];
            for i in 0..n {
                c.push(c[i as usize] * (n - i) as u128 / (i + 1) as u128);
            }
            for k in 0..=n + 1 {
                let exact: u128 = (k..=n).map(|j| c[j as usize]).sum();
                let want = exact as f64 / 2f64.powi(n as i32);
                let got = sign_tail(n, k);
                assert!(
                    (got - want).abs() <= 1e-12 * want.max(1e-300),
                    "n={n} k={k}: {got} vs {want}"
                );
            }
        }
        // Large odd n: the upper half of the outcomes has probability ½; far out it is tiny.
        let half = sign_tail(2001, 1001);
        assert!((half - 0.5).abs() < 1e-11, "{half}");
        assert!(sign_tail(2000, 1200) < 1e-18);
    }
}
