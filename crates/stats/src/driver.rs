//! The sequential test that decides every claim: feed it Bernoulli outcomes one at a time, stop
//! when it says so.
//!
//! A [`Driver`] tests the unknown success rate `p` of an i.i.d. Bernoulli stream against one
//! threshold α, or against two thresholds `α_lo <= α_hi` (an *indifference band*). For each
//! threshold it runs Robbins' confidence sequence ([`crate::csm()`]); the first time a test
//! rejects "p = α", the side of α on which `p` lies is read from the running estimate (Ding, Gandy
//! and Hahn) and never revisited. The decision combines the two sides:
//!
//! | lower test says | upper test says | decision |
//! |---|---|---|
//! | anything        | p > α_hi        | [`Decision::Above`] |
//! | p < α_lo        | anything        | [`Decision::Below`] |
//! | p > α_lo        | p < α_hi        | [`Decision::Within`] (only with a band) |
//!
//! With one threshold only `Above` and `Below` exist, and a rate very close to α can keep the
//! driver busy for a long time. A band guarantees a decision eventually for every rate strictly
//! inside or outside it: inside, both tests reject and the driver reports `Within`. (A rate
//! exactly on a threshold is never distinguished from it.) Partial knowledge (say "p > α_lo" but
//! nothing yet about α_hi) is not a decision: the driver keeps sampling, and at its `max_count`
//! reports [`Decision::Undecided`] with the partial sides in [`Outcome`].
//!
//! `min_count` observations are collected before any test looks at the data, so a slow start
//! (cold caches, a first run that pays for page faults) cannot fix a side on its own. Robbins'
//! bound holds for every `n`, so starting later keeps the guarantee.
//!
//! # Error budget
//!
//! The caller's ε is split with Bonferroni's inequality between the tests and the confidence
//! interval: one threshold, ε/2 each; two thresholds, ε/3 each. The confidence interval is
//! Robbins' confidence sequence ([`crate::csm::confidence_sequence`]), valid at any stopping time.
//! So the probability that the decision or the confidence interval is wrong is at most ε, however
//! the number of observations was chosen.
//!
//! [`Outcome::credible`] is the seed's Bayesian summary: the equal-tailed interval of the
//! posterior Beta(s + 1, n − s + 1) under a uniform prior, cutting half the interval's share from
//! each end. It is narrower, it says where the rate probably is *given the data*, and it is not
//! part of the frequentist guarantee: at a data-dependent stopping time its coverage can fall
//! short of its nominal level.

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

/// The driver's decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The rate is above `alpha_hi` (with one threshold: above it).
    Above,
    /// The rate is below `alpha_lo` (with one threshold: below it).
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
}

impl DriverConfig {
    /// A test of the success rate against one threshold `alpha`, with false-positive rate `eps`.
    pub fn new(alpha: f64, eps: f64) -> Self {
        Self::band(alpha, alpha, eps)
    }

    /// A test against an indifference band `[lo, hi]`.
    pub fn band(lo: f64, hi: f64, eps: f64) -> Self {
        Self {
            alpha_lo: lo,
            alpha_hi: hi,
            eps,
            min_count: 1,
            max_count: MAX_OBSERVATIONS,
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

    /// ε for each CSM test.
    fn test_eps(&self) -> f64 {
        let parts = if self.has_band() { 3.0 } else { 2.0 };
        // Rounded down: a smaller ε is always safe.
        next_down(self.eps / parts).max(0.0)
    }

    /// False-positive rate of the confidence interval (the same share as each test).
    pub fn confidence_eps(&self) -> f64 {
        self.test_eps()
    }

    /// Probability cut from each end of the credible interval.
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
    /// Confidence interval for the rate (Robbins' confidence sequence): it excludes the true rate
    /// with probability at most [`DriverConfig::confidence_eps`], at any stopping time.
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
        if self.lower_side == Side::Unknown && csm(n, self.config.alpha_lo, s, log_eps).stop {
            self.lower_side = side_of(self.config.alpha_lo);
        }
        if !self.config.has_band() {
            self.upper_side = self.lower_side;
        } else if self.upper_side == Side::Unknown && csm(n, self.config.alpha_hi, s, log_eps).stop
        {
            self.upper_side = side_of(self.config.alpha_hi);
        }

        match self.current_decision() {
            Some(decision) if self.n >= self.config.min_count => {
                self.finished = Some(decision);
                Step::Done(decision)
            }
            _ if self.n >= self.config.max_count => {
                self.finished = Some(Decision::Undecided);
                Step::Done(Decision::Undecided)
            }
            _ => Step::Continue,
        }
    }

    fn current_decision(&self) -> Option<Decision> {
        match (self.lower_side, self.upper_side) {
            (_, Side::Above) => Some(Decision::Above),
            (Side::Below, _) => Some(Decision::Below),
            (Side::Above, Side::Below) => Some(Decision::Within),
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

    /// The smallest current log level among the tests that have not rejected yet: how far the
    /// driver is from its next conclusion (it concludes when this drops below `ln(ε/k)`).
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

    /// The confidence interval (confidence sequence) for the success rate: a few dozen CSM
    /// evaluations.
    pub fn confidence_interval(&self) -> (f64, f64) {
        confidence_sequence(
            self.n,
            self.successes,
            ln_down(self.config.confidence_eps()),
        )
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
    fn band_decides_within_for_a_rate_inside_it() {
        let mut rng = SplitMix64::new(11);
        let out = drive(
            DriverConfig::band(0.4, 0.6, 1e-3).max_count(100_000),
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
        let out = drive(DriverConfig::band(0.4, 0.6, 1e-3).max_count(3000), || {
            rng.bernoulli(0.6)
        })
        .unwrap();
        assert_eq!(out.decision, Decision::Undecided);
        assert_eq!(out.n, 3000);
        assert_eq!(out.lower_side, Side::Above);
        assert_eq!(out.upper_side, Side::Unknown);
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
