//! The sequential test that decides every claim: feed it Bernoulli outcomes one at a time, stop
//! when it says so.
//!
//! A [`Driver`] tests the unknown success rate `p` of an i.i.d. Bernoulli stream against one
//! threshold α, or against two thresholds `α_lo <= α_hi`. For each threshold it runs Robbins'
//! confidence sequence ([`crate::csm()`]); when a test rejects "p = α", the side of α on which `p`
//! lies is read from the running estimate (Ding, Gandy and Hahn) and never revisited.
//!
//! # When to stop: two rules
//!
//! With two thresholds the band between them is an *indifference zone*, and there are two
//! sensible moments to stop ([`StopRule`]):
//!
//! * [`StopRule::FirstRejection`] (the default): stop as soon as **either** test rejects. This is
//!   the CSM post's `csm-driver` ("the CSM will stop whenever it's likely that the underlying
//!   success rate differs from either of them"): the band is "don't care", so knowing that `p`
//!   is above α_lo is enough to say "not below the band". Every rate, even one exactly in the
//!   middle of the band, is decided eventually, and quickly: the post's power example (thresholds
//!   96% and 98%, true rate 97%, ε = 0.1%) decides correctly within 10 000 observations more than
//!   99% of the time.
//! * [`StopRule::FullDecision`]: keep sampling until the three-way decision is known: above α_hi,
//!   below α_lo, or strictly inside the band (both tests rejected, towards each other). This is
//!   what a claim with a borderline verdict needs (the lab's claims), and it costs more: a rate in
//!   the middle of the band must be told apart from *both* thresholds.
//!
//! The decision, by what the two tests have said so far:
//!
//! | lower test (α_lo) | upper test (α_hi) | `FirstRejection` | `FullDecision` |
//! |---|---|---|---|
//! | p > α_lo  | unknown   | [`Decision::Above`] (p > α_lo) | keep going |
//! | anything  | p > α_hi  | [`Decision::Above`] (p > α_hi) | [`Decision::Above`] |
//! | p < α_lo  | anything  | [`Decision::Below`] (p < α_lo) | [`Decision::Below`] |
//! | unknown   | p < α_hi  | [`Decision::Below`] (p < α_hi) | keep going |
//! | p > α_lo  | p < α_hi  | [`Decision::Within`] | [`Decision::Within`] |
//!
//! So `Above` always means "above a threshold" and `Below` "below a threshold";
//! [`Outcome::lower_side`] and [`Outcome::upper_side`] say which, and [`Outcome::known_range`]
//! turns them into the range of rates the tests allow. With one threshold both rules are the same
//! test and only `Above` and `Below` exist. At `max_count` without a decision the driver reports
//! [`Decision::Undecided`], with whatever partial sides it has.
//!
//! `min_count` observations are collected before any test looks at the data, so a slow start
//! (cold caches, a first run that pays for page faults) cannot fix a side on its own. Robbins'
//! bound holds for every `n`, so starting later keeps the guarantee.
//!
//! # Error budget (the post's split)
//!
//! The caller's ε is split with Bonferroni's inequality as the CSM post does: with two
//! thresholds, ε/3 for each test and ε/6 for each end of the credible interval; with one, ε/2 for
//! the test and ε/4 for each end. Both tests are rounded down (`next_down(ε/k)`).
//!
//! [`Outcome::confidence`] is Robbins' confidence sequence ([`crate::csm::confidence_sequence`])
//! at the same level as each test, intersected with [`Outcome::known_range`]. It needs no budget of
//! its own: a test that rejects α at time `m` with the estimate on the wrong side of α implies
//! that the confidence sequence at time `m` (the rates *not* rejected, an interval around the
//! estimate that excludes α) excludes the true rate, and Robbins bounds the probability that the
//! sequence *ever* excludes it. So the decision, both sides and the confidence interval are all
//! right together except with probability at most ε/3 (two thresholds) or ε/2 (one), at whatever
//! time the driver stops; the intersection keeps the interval consistent with the decision.
//!
//! [`Outcome::credible`] is the post's Bayesian summary: the equal-tailed interval of the
//! posterior Beta(s + 1, n − s + 1) under a uniform prior, cutting ε/6 (ε/4) of posterior
//! probability from each end. It is narrower, it says where the rate probably is *given the
//! data*, and it is not part of the frequentist guarantee: at a data-dependent stopping time its
//! coverage can fall short of its nominal level.

use crate::beta::{rate_interval, MAX_BETA_PARAM};
use crate::csm::{confidence_sequence, csm};
use crate::round::{ln_down, next_down};
use crate::StatsError;

/// Most observations a driver accepts: its credible interval needs Beta(s + 1, n − s + 1) with
/// parameters of at most 2^44.
pub const MAX_OBSERVATIONS: u64 = MAX_BETA_PARAM - 2;

/// What a driver has concluded about one threshold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// Not (yet) distinguishable from the threshold.
    Unknown,
    /// The rate is above the threshold.
    Above,
    /// The rate is below the threshold.
    Below,
}

/// The driver's decision; see the module documentation for what each means under each
/// [`StopRule`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The rate is above a threshold: above `alpha_hi` under [`StopRule::FullDecision`], above at
    /// least `alpha_lo` under [`StopRule::FirstRejection`] ([`Outcome::upper_side`] says whether
    /// it is also above `alpha_hi`).
    Above,
    /// The rate is below a threshold: below `alpha_lo` under [`StopRule::FullDecision`], below at
    /// least `alpha_hi` under [`StopRule::FirstRejection`].
    Below,
    /// The rate lies strictly inside the band (`alpha_lo`, `alpha_hi`).
    Within,
    /// No decision before `max_count` observations.
    Undecided,
}

impl Decision {
    /// Lower-case name, for reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Above => "above",
            Decision::Below => "below",
            Decision::Within => "within",
            Decision::Undecided => "undecided",
        }
    }
}

/// When a driver with two thresholds stops; see the module documentation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StopRule {
    /// Stop as soon as either threshold's test rejects (the CSM post's `csm-driver`): the band
    /// between the thresholds is "don't care".
    #[default]
    FirstRejection,
    /// Stop only when the three-way decision is known: above `alpha_hi`, below `alpha_lo`, or
    /// within the band (both tests rejected).
    FullDecision,
}

impl StopRule {
    /// Lower-case name, for reports.
    pub fn as_str(self) -> &'static str {
        match self {
            StopRule::FirstRejection => "first-rejection",
            StopRule::FullDecision => "full-decision",
        }
    }
}

/// Parameters of a [`Driver`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DriverConfig {
    /// Lower threshold (equal to `alpha_hi` for a single-threshold test).
    pub alpha_lo: f64,
    /// Upper threshold.
    pub alpha_hi: f64,
    /// Total false-positive budget, split across the tests and the interval ends.
    pub eps: f64,
    /// Never decide before this many observations.
    pub min_count: u64,
    /// Give up (undecided) after this many observations.
    pub max_count: u64,
    /// When to stop with two thresholds (irrelevant with one).
    pub rule: StopRule,
}

impl DriverConfig {
    /// A test of the success rate against one threshold `alpha`, with false-positive rate `eps`.
    pub fn new(alpha: f64, eps: f64) -> Self {
        Self::band(alpha, alpha, eps)
    }

    /// A test against two thresholds `lo <= hi`, stopping at the first rejection (the post's
    /// rule); add `.rule(StopRule::FullDecision)` for the three-way decision.
    pub fn band(lo: f64, hi: f64, eps: f64) -> Self {
        Self {
            alpha_lo: lo,
            alpha_hi: hi,
            eps,
            min_count: 1,
            max_count: MAX_OBSERVATIONS,
            rule: StopRule::FirstRejection,
        }
    }

    /// Do not decide before `n` observations.
    pub fn min_count(mut self, n: u64) -> Self {
        self.min_count = n;
        self
    }

    /// Report undecided after `n` observations.
    pub fn max_count(mut self, n: u64) -> Self {
        self.max_count = n;
        self
    }

    /// When to stop with two thresholds.
    ///
    /// ```
    /// use spindle_stats::{Decision, DriverConfig, StopRule, drive};
    /// // Every observation a success: 0.98 is rejected long before "inside the band" could be.
    /// let first = drive(DriverConfig::band(0.4, 0.6, 1e-3), || true).unwrap();
    /// let full = drive(DriverConfig::band(0.4, 0.6, 1e-3).rule(StopRule::FullDecision), || true).unwrap();
    /// assert_eq!((first.decision, full.decision), (Decision::Above, Decision::Above));
    /// assert!(first.n < full.n); // the first rejection (of 0.4) comes before that of 0.6
    /// ```
    pub fn rule(mut self, rule: StopRule) -> Self {
        self.rule = rule;
        self
    }

    /// Whether the thresholds differ.
    pub fn has_band(&self) -> bool {
        self.alpha_lo != self.alpha_hi
    }

    /// Checks every parameter, with an error that says which one is wrong.
    pub fn validate(&self) -> Result<(), StatsError> {
        for (name, value) in [("alpha_lo", self.alpha_lo), ("alpha_hi", self.alpha_hi)] {
            if !(value > 0.0 && value < 1.0) {
                return Err(StatsError::OutOfRange {
                    name,
                    value,
                    range: "(0, 1)",
                });
            }
        }
        if self.alpha_lo > self.alpha_hi {
            return Err(StatsError::Invalid(format!(
                "the lower threshold {} exceeds the upper threshold {}",
                self.alpha_lo, self.alpha_hi
            )));
        }
        if !(self.eps >= 1e-300 && self.eps < 1.0) {
            return Err(StatsError::OutOfRange {
                name: "eps",
                value: self.eps,
                range: "[1e-300, 1)",
            });
        }
        if self.max_count == 0 || self.max_count > MAX_OBSERVATIONS {
            return Err(StatsError::Invalid(format!(
                "the maximum number of observations must be between 1 and 2^44 - 2, not {}",
                self.max_count
            )));
        }
        if self.min_count > self.max_count {
            return Err(StatsError::Invalid(format!(
                "the minimum number of observations ({}) exceeds the maximum ({})",
                self.min_count, self.max_count
            )));
        }
        Ok(())
    }

    /// ε for each CSM test: ε/3 with two thresholds, ε/2 with one, rounded down (a smaller ε is
    /// always safe).
    pub fn test_eps(&self) -> f64 {
        let parts = if self.has_band() { 3.0 } else { 2.0 };
        next_down(self.eps / parts).max(0.0)
    }

    /// False-positive rate of the confidence interval: the same as each test's, because the
    /// tests' errors are among the interval's (see the module documentation).
    pub fn confidence_eps(&self) -> f64 {
        self.test_eps()
    }

    /// Posterior probability cut from each end of the credible interval: ε/6 with two thresholds,
    /// ε/4 with one.
    pub fn interval_alpha(&self) -> f64 {
        0.5 * self.test_eps()
    }
}

/// Whether to keep feeding the driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// No decision yet; observe more.
    Continue,
    /// Finished, with this decision (possibly [`Decision::Undecided`] at `max_count`).
    Done(Decision),
}

/// A snapshot of what a driver knows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Outcome {
    /// The decision (undecided while running).
    pub decision: Decision,
    /// Observations so far.
    pub n: u64,
    /// Successes so far.
    pub successes: u64,
    /// `successes / n` (0 when `n == 0`).
    pub estimate: f64,
    /// Confidence interval for the rate: Robbins' confidence sequence intersected with
    /// [`Outcome::known_range`]. It excludes the true rate with probability at most
    /// [`DriverConfig::confidence_eps`], at any stopping time, and never contradicts the decision.
    pub confidence: (f64, f64),
    /// Bayesian credible interval (uniform prior), [`DriverConfig::interval_alpha`] of posterior
    /// probability cut from each end; a summary, not part of the ε guarantee.
    pub credible: (f64, f64),
    /// What the test against `alpha_lo` concluded.
    pub lower_side: Side,
    /// What the test against `alpha_hi` concluded (the same test as `lower_side` when there is
    /// only one threshold).
    pub upper_side: Side,
    /// The thresholds and budget the driver ran with.
    pub config: DriverConfig,
}

impl Outcome {
    /// The range of rates that the tests' conclusions allow: `(α_hi, 1)` after "p > α_hi",
    /// `(α_lo, α_hi)` after both "p > α_lo" and "p < α_hi", `(0, 1)` while nothing is known.
    /// This is what the post's `report` prints as `p > α` / `α < p < α_hi` / `p < α_hi`.
    pub fn known_range(&self) -> (f64, f64) {
        known_range(&self.config, self.lower_side, self.upper_side)
    }

    /// Whether every side the tests concluded is a true statement about a stream whose success
    /// rate is `rate`, and there is a decision: the post's `csm-power` criterion of success.
    pub fn is_correct_for(&self, rate: f64) -> bool {
        let true_side = |alpha: f64, side: Side| match side {
            Side::Unknown => true,
            Side::Above => rate > alpha,
            Side::Below => rate < alpha,
        };
        self.decision != Decision::Undecided
            && true_side(self.config.alpha_lo, self.lower_side)
            && true_side(self.config.alpha_hi, self.upper_side)
    }
}

fn known_range(config: &DriverConfig, lower: Side, upper: Side) -> (f64, f64) {
    let lo = match (lower, upper) {
        (_, Side::Above) => config.alpha_hi,
        (Side::Above, _) => config.alpha_lo,
        _ => 0.0,
    };
    let hi = match (lower, upper) {
        (Side::Below, _) => config.alpha_lo,
        (_, Side::Below) => config.alpha_hi,
        _ => 1.0,
    };
    (lo, hi)
}

/// Sequential CSM test of a Bernoulli stream; see the module documentation.
///
/// ```
/// use spindle_stats::{Decision, Driver, DriverConfig, Step};
/// // Is a command's success rate above 99%? (false positives at most one in a million)
/// let mut driver = Driver::new(DriverConfig::new(0.99, 1e-6)).unwrap();
/// let mut step = Step::Continue;
/// while step == Step::Continue {
///     step = driver.observe(true); // every run succeeds
/// }
/// assert_eq!(step, Step::Done(Decision::Above));
/// assert!(driver.n() > 1000 && driver.n() < 3000);
/// ```
#[derive(Clone, Debug)]
pub struct Driver {
    config: DriverConfig,
    log_eps: f64,
    /// `(ln α, ln(1 − α))` of each threshold, for [`may_reject`].
    ln_lo: (f64, f64),
    ln_hi: (f64, f64),
    n: u64,
    successes: u64,
    lower_side: Side,
    upper_side: Side,
    finished: Option<Decision>,
}

impl Driver {
    /// A driver for `config`, or an error naming the parameter that is out of range.
    pub fn new(config: DriverConfig) -> Result<Self, StatsError> {
        config.validate()?;
        Ok(Self {
            log_eps: ln_down(config.test_eps()),
            ln_lo: logs(config.alpha_lo),
            ln_hi: logs(config.alpha_hi),
            config,
            n: 0,
            successes: 0,
            lower_side: Side::Unknown,
            upper_side: Side::Unknown,
            finished: None,
        })
    }

    /// Records one observation and says whether to continue. Observations after the driver has
    /// finished are ignored, so that each decision depends only on the data before its stopping
    /// time (several drivers fed from one stream finish independently).
    pub fn observe(&mut self, success: bool) -> Step {
        if let Some(decision) = self.finished {
            return Step::Done(decision);
        }
        self.n += 1;
        self.successes += success as u64;
        if self.n < self.config.min_count {
            return Step::Continue;
        }
        let estimate = self.estimate();
        let side_of = |alpha: f64| {
            if estimate > alpha {
                Side::Above
            } else {
                Side::Below
            }
        };
        let (n, s, log_eps) = (self.n, self.successes, self.log_eps);
        let (ln_p, ln_q) = (estimate.ln(), (-estimate).ln_1p());
        let rejects = |alpha: f64, ln_alpha: (f64, f64)| {
            may_reject(n, estimate, ln_p, ln_q, ln_alpha, log_eps) && csm(n, alpha, s, log_eps).stop
        };
        if self.lower_side == Side::Unknown && rejects(self.config.alpha_lo, self.ln_lo) {
            self.lower_side = side_of(self.config.alpha_lo);
        }
        if !self.config.has_band() {
            self.upper_side = self.lower_side;
        } else if self.upper_side == Side::Unknown && rejects(self.config.alpha_hi, self.ln_hi) {
            self.upper_side = side_of(self.config.alpha_hi);
        }

        match self.current_decision() {
            Some(decision) => {
                self.finished = Some(decision);
                Step::Done(decision)
            }
            None if self.n >= self.config.max_count => {
                self.finished = Some(Decision::Undecided);
                Step::Done(Decision::Undecided)
            }
            None => Step::Continue,
        }
    }

    fn current_decision(&self) -> Option<Decision> {
        match (self.lower_side, self.upper_side, self.config.rule) {
            (Side::Above, Side::Below, _) => Some(Decision::Within),
            (_, Side::Above, _) | (Side::Above, _, StopRule::FirstRejection) => {
                Some(Decision::Above)
            }
            (Side::Below, _, _) | (_, Side::Below, StopRule::FirstRejection) => {
                Some(Decision::Below)
            }
            _ => None,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &DriverConfig {
        &self.config
    }

    /// Observations so far.
    pub fn n(&self) -> u64 {
        self.n
    }

    /// Successes so far.
    pub fn successes(&self) -> u64 {
        self.successes
    }

    /// `successes / n`, or 0 before the first observation.
    pub fn estimate(&self) -> f64 {
        if self.n == 0 {
            0.0
        } else {
            self.successes as f64 / self.n as f64
        }
    }

    /// The final decision, once finished.
    pub fn finished(&self) -> Option<Decision> {
        self.finished
    }

    /// What the test against `alpha_lo` has concluded so far.
    pub fn lower_side(&self) -> Side {
        self.lower_side
    }

    /// What the test against `alpha_hi` has concluded so far.
    pub fn upper_side(&self) -> Side {
        self.upper_side
    }

    /// The smallest current log level among the tests that have not rejected yet: how far the
    /// driver is from its next conclusion (it concludes when this drops below `ln(ε/k)`). This is
    /// the last column of the post's progress log, before division by `−ln 10`.
    pub fn log_level(&self) -> f64 {
        let (n, s) = (self.n, self.successes);
        if n == 0 {
            return 0.0;
        }
        let mut level = f64::INFINITY;
        if self.lower_side == Side::Unknown {
            level = level.min(csm(n, self.config.alpha_lo, s, 0.0).log_level);
        }
        if self.upper_side == Side::Unknown {
            level = level.min(csm(n, self.config.alpha_hi, s, 0.0).log_level);
        }
        if level.is_infinite() {
            self.log_eps
        } else {
            level
        }
    }

    /// The confidence interval for the success rate: Robbins' confidence sequence (a few dozen
    /// CSM evaluations) intersected with what the tests have concluded.
    pub fn confidence_interval(&self) -> (f64, f64) {
        let (lo, hi) = confidence_sequence(
            self.n,
            self.successes,
            ln_down(self.config.confidence_eps()),
        );
        let (known_lo, known_hi) = known_range(&self.config, self.lower_side, self.upper_side);
        let (clamped_lo, clamped_hi) = (lo.max(known_lo), hi.min(known_hi));
        if clamped_lo <= clamped_hi {
            (clamped_lo, clamped_hi)
        } else {
            // A side fixed earlier (full-decision rule) and today's sequence disagree: one of
            // them is among the errors of probability at most ε, and nothing tells which. Report
            // the sequence, which describes the data as they are now.
            (lo, hi)
        }
    }

    /// The Bayesian credible interval for the success rate (a few bisections of the incomplete
    /// Beta function: not free, not slow).
    pub fn credible_interval(&self) -> (f64, f64) {
        rate_interval(self.n, self.successes, self.config.interval_alpha())
    }

    /// Everything the driver knows, including both intervals.
    pub fn outcome(&self) -> Outcome {
        Outcome {
            decision: self.finished.unwrap_or(Decision::Undecided),
            n: self.n,
            successes: self.successes,
            estimate: self.estimate(),
            confidence: self.confidence_interval(),
            credible: self.credible_interval(),
            lower_side: self.lower_side,
            upper_side: self.upper_side,
            config: self.config,
        }
    }
}

/// A cheap necessary condition for `csm(n, alpha, s, log_eps).stop`, so that simulations do not
/// pay for a full CSM evaluation (seven logarithms) at every observation.
///
/// With `p̂ = s/n`, the binomial probability of `s` at rate `α` is its probability at rate `p̂`
/// times `exp(−n KL(p̂ ‖ α))` (KL the Kullback–Leibler divergence of Bernoulli(p̂) from
/// Bernoulli(α)), and its probability at `p̂` — the mode of that binomial — is at least
/// `1/(n+1)`, the average over its `n + 1` outcomes. So the exact log level is at least
/// `−n KL(p̂ ‖ α)`, and the computed level, an upper bound of the exact one, cannot be below
/// `ln ε` while `n KL < −ln ε`. The divergence is computed in plain floating point; the margin
/// (10^-9 per observation plus 10^-6) dwarfs its rounding error, and erring here only costs a
/// CSM evaluation.
fn may_reject(n: u64, p: f64, ln_p: f64, ln_q: f64, ln_alpha: (f64, f64), log_eps: f64) -> bool {
    let xlogy = |x: f64, ln_x: f64, ln_y: f64| if x == 0.0 { 0.0 } else { x * (ln_x - ln_y) };
    let kl = xlogy(p, ln_p, ln_alpha.0) + xlogy(1.0 - p, ln_q, ln_alpha.1);
    let nf = n as f64;
    nf * kl.max(0.0) + 1e-9 * nf + 1e-6 >= -log_eps
}

fn logs(alpha: f64) -> (f64, f64) {
    (alpha.ln(), (-alpha).ln_1p())
}

/// Runs a driver over a generator of outcomes until it finishes.
pub fn drive(config: DriverConfig, mut next: impl FnMut() -> bool) -> Result<Outcome, StatsError> {
    let mut driver = Driver::new(config)?;
    while driver.observe(next()) == Step::Continue {}
    Ok(driver.outcome())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;

    #[test]
    fn all_successes_decide_above_quickly_and_all_failures_below() {
        let up = drive(DriverConfig::new(0.99, 1e-6), || true).unwrap();
        assert_eq!(up.decision, Decision::Above);
        assert_eq!(up.successes, up.n);
        // ln(n+1) + n ln 0.99 < ln(5e-7) first holds around n = 2270.
        assert!((2000..2600).contains(&up.n), "{}", up.n);
        let down = drive(DriverConfig::new(0.99, 1e-6), || false).unwrap();
        assert_eq!(down.decision, Decision::Below);
        assert!(down.n <= 5, "{}", down.n);
        assert!(down.confidence.1 < 0.99 && down.credible.1 < 0.99);
        assert!(up.confidence.0 > 0.98 && up.credible.0 > 0.98);
    }

    #[test]
    fn full_decision_decides_within_for_a_rate_inside_the_band() {
        let mut rng = SplitMix64::new(11);
        let out = drive(
            DriverConfig::band(0.4, 0.6, 1e-3)
                .max_count(100_000)
                .rule(StopRule::FullDecision),
            || rng.bernoulli(0.5),
        )
        .unwrap();
        assert_eq!(out.decision, Decision::Within);
        assert_eq!((out.lower_side, out.upper_side), (Side::Above, Side::Below));
        assert!(out.confidence.0 < 0.5 && 0.5 < out.confidence.1);
        // The credible interval is the narrower of the two.
        assert!(out.confidence.0 <= out.credible.0 && out.credible.1 <= out.confidence.1);
    }

    #[test]
    fn max_count_gives_undecided_with_partial_sides() {
        // A rate exactly at the upper threshold: the lower test rejects, the upper never should.
        let mut rng = SplitMix64::new(5);
        let config = DriverConfig::band(0.4, 0.6, 1e-3)
            .max_count(3000)
            .rule(StopRule::FullDecision);
        let out = drive(config, || rng.bernoulli(0.6)).unwrap();
        assert_eq!(out.decision, Decision::Undecided);
        assert_eq!(out.n, 3000);
        assert_eq!(out.lower_side, Side::Above);
        assert_eq!(out.upper_side, Side::Unknown);
    }

    /// The post's rule: a rate in the middle of the band stops at the first rejection, on either
    /// side, and every side it reports is true; the full decision takes longer on the same data.
    #[test]
    fn first_rejection_stops_at_either_threshold_and_tells_which() {
        let mut sides = [0u32; 2];
        for seed in 0..200 {
            let config = DriverConfig::band(0.4, 0.6, 1e-3).max_count(100_000);
            let mut rng = SplitMix64::new(seed);
            let first = drive(config, || rng.bernoulli(0.5)).unwrap();
            let mut rng = SplitMix64::new(seed);
            let full = drive(config.rule(StopRule::FullDecision), || rng.bernoulli(0.5)).unwrap();
            assert!(first.is_correct_for(0.5), "{first:?}");
            assert!(first.n <= full.n);
            match (first.decision, first.lower_side, first.upper_side) {
                (Decision::Above, Side::Above, Side::Unknown) => sides[0] += 1,
                (Decision::Below, Side::Unknown, Side::Below) => sides[1] += 1,
                (Decision::Within, Side::Above, Side::Below) => {}
                other => panic!("{other:?}"),
            }
            // The interval agrees with what is known.
            let (lo, hi) = first.known_range();
            assert!(
                lo <= first.confidence.0 && first.confidence.1 <= hi,
                "{first:?}"
            );
        }
        assert!(sides[0] > 50 && sides[1] > 50, "{sides:?}");
    }

    /// The shortcut never hides a stop: wherever the CSM stops, `may_reject` says it may.
    #[test]
    fn the_divergence_shortcut_never_hides_a_stop() {
        let mut checked = 0;
        for n in 1..=400u64 {
            for s in 0..=n {
                let p = s as f64 / n as f64;
                for &alpha in &[1e-3, 0.05, 0.3, 0.5, 0.9, 0.98, 0.999] {
                    for &log_eps in &[-1e-3, -3.0, -15.0] {
                        if csm(n, alpha, s, log_eps).stop {
                            checked += 1;
                            assert!(
                                may_reject(n, p, p.ln(), (-p).ln_1p(), logs(alpha), log_eps),
                                "n {n} s {s} alpha {alpha} log_eps {log_eps}"
                            );
                        }
                    }
                }
            }
        }
        assert!(checked > 100_000, "{checked}");
    }

    #[test]
    fn known_range_follows_the_sides() {
        let c = DriverConfig::band(0.4, 0.6, 0.01);
        let range = |lower, upper| known_range(&c, lower, upper);
        assert_eq!(range(Side::Unknown, Side::Unknown), (0.0, 1.0));
        assert_eq!(range(Side::Above, Side::Unknown), (0.4, 1.0));
        assert_eq!(range(Side::Above, Side::Above), (0.6, 1.0));
        assert_eq!(range(Side::Above, Side::Below), (0.4, 0.6));
        assert_eq!(range(Side::Unknown, Side::Below), (0.0, 0.6));
        assert_eq!(range(Side::Below, Side::Below), (0.0, 0.4));
    }

    /// The printed interval never contradicts the verdict (it used to, when a side was fixed
    /// before the final count: "inside [40%, 60%]" beside [40.01%, 60.95%]).
    #[test]
    fn confidence_interval_never_contradicts_the_decision() {
        for seed in 0..100 {
            let mut rng = SplitMix64::new(seed);
            let config = DriverConfig::band(0.4, 0.6, 1e-2).rule(StopRule::FullDecision);
            let out = drive(config, || rng.bernoulli(0.55)).unwrap();
            if out.decision == Decision::Within {
                assert!(
                    0.4 <= out.confidence.0 && out.confidence.1 <= 0.6,
                    "{out:?}"
                );
            }
        }
    }

    #[test]
    fn min_count_delays_the_decision() {
        let out = drive(DriverConfig::new(0.5, 1e-3).min_count(500), || false).unwrap();
        assert_eq!(out.decision, Decision::Below);
        assert_eq!(out.n, 500);
    }

    /// Eight failures and then only successes: with `min_count` 1000 the early failures must not
    /// fix the verdict on their own.
    #[test]
    fn early_observations_cannot_fix_a_side_before_min_count() {
        let mut i = 0;
        let out = drive(DriverConfig::new(0.9, 1e-6).min_count(1000), || {
            i += 1;
            i > 8
        })
        .unwrap();
        assert_eq!(out.decision, Decision::Above, "{out:?}");
        assert_eq!(out.n, 1000);
    }

    /// The confidence interval must cover the true rate at the driver's stopping time at least as
    /// often as promised (ε/2 of misses at most), including where a Bayesian interval does not.
    #[test]
    fn confidence_interval_covers_the_truth_at_the_stopping_time() {
        let (p, alpha, eps) = (0.999, 0.99, 0.01);
        let mut rng = SplitMix64::new(77);
        let runs = 4000u64;
        let mut misses = 0u64;
        for _ in 0..runs {
            let out = drive(DriverConfig::new(alpha, eps).max_count(3000), || {
                rng.bernoulli(p)
            })
            .unwrap();
            if !(out.confidence.0 <= p && p <= out.confidence.1) {
                misses += 1;
            }
        }
        let (lo, _) = confidence_sequence(runs, misses, 1e-6f64.ln());
        assert!(lo < eps / 2.0, "{misses} misses in {runs} runs");
    }

    #[test]
    fn observations_after_the_end_are_ignored() {
        let mut d = Driver::new(DriverConfig::new(0.5, 0.01)).unwrap();
        let mut steps = 0;
        while d.observe(false) == Step::Continue {
            steps += 1;
        }
        let n = d.n();
        assert_eq!(d.observe(true), Step::Done(Decision::Below));
        assert_eq!(d.n(), n);
        assert!(steps > 0);
    }

    #[test]
    fn invalid_parameters_are_errors_not_panics() {
        assert!(Driver::new(DriverConfig::new(0.0, 0.1)).is_err());
        assert!(Driver::new(DriverConfig::new(1.0, 0.1)).is_err());
        assert!(Driver::new(DriverConfig::new(0.5, 0.0)).is_err());
        assert!(Driver::new(DriverConfig::new(0.5, f64::NAN)).is_err());
        assert!(Driver::new(DriverConfig::band(0.6, 0.4, 0.1)).is_err());
        assert!(Driver::new(DriverConfig::new(0.5, 0.1).min_count(10).max_count(5)).is_err());
        assert!(Driver::new(DriverConfig::new(0.5, 0.1).max_count(0)).is_err());
        let msg = Driver::new(DriverConfig::new(1.5, 0.1))
            .unwrap_err()
            .to_string();
        assert!(msg.contains("alpha_lo") && msg.contains("1.5"), "{msg}");
    }

    /// A/A: data whose success rate is exactly the threshold. Robbins' bound says the test
    /// rejects (falsely) at most ε of the time over an infinite horizon; over a finite one it
    /// must be rarer still. The driver gives the test ε/2 of its budget (the interval gets the
    /// rest). We run 3000 drivers at ε = 0.05 for 2000 observations each, then ask the CSM's own
    /// confidence sequence whether the false-stop rate could be at most ε/2: its lower end (at a
    /// 1e-6 miss rate) must be below ε/2. An anti-conservative implementation (one that stopped,
    /// say, 5% of the time) fails this.
    #[test]
    fn a_a_simulation_stops_falsely_no_more_often_than_eps() {
        let eps = 0.05;
        for &alpha in &[0.5f64, 0.9, 0.05] {
            let mut rng = SplitMix64::new(0x5eed ^ alpha.to_bits());
            let runs = 3000u64;
            let mut false_stops = 0u64;
            for _ in 0..runs {
                let out = drive(DriverConfig::new(alpha, eps).max_count(2000), || {
                    rng.bernoulli(alpha)
                })
                .unwrap();
                if out.decision != Decision::Undecided {
                    false_stops += 1;
                }
            }
            // A frequentist question, so a frequentist interval: the confidence sequence.
            let (lo, _) = confidence_sequence(runs, false_stops, 1e-6f64.ln());
            assert!(
                lo < eps / 2.0,
                "alpha {alpha}: {false_stops} false stops in {runs} runs; rate surely above eps"
            );
        }
    }

    /// The direction is right: for rates clearly off the threshold, the decision matches.
    #[test]
    fn decisions_point_the_right_way() {
        let mut rng = SplitMix64::new(99);
        for &(p, expected) in &[(0.3, Decision::Below), (0.7, Decision::Above)] {
            for _ in 0..50 {
                let out = drive(DriverConfig::new(0.5, 1e-3), || rng.bernoulli(p)).unwrap();
                assert_eq!(out.decision, expected, "rate {p}");
            }
        }
    }
}
