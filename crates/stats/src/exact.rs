//! The CSM post's exact (permutation) test, stopped by the CSM.
//!
//! Two independent samples `X₀`, `Y₀` and a statistic `f`. Under the null hypothesis that both
//! come from one distribution (possibly after a known transformation, such as `X` shifted by Δ),
//! the labels are exchangeable: shuffle the pooled data, split it into groups of the original
//! sizes, and check whether `f` of the shuffled split is at least as extreme as `f(X₀, Y₀)`.
//! Each check is an i.i.d. Bernoulli trial whose success rate is the p-value of the observed
//! statistic, so a [`Driver`] decides when there are enough resamples and on which side of the
//! significance threshold(s) the p-value lies, with its false-positive rate ε. The whole procedure
//! is wrong with probability at most `α + ε` ("an Atlantic City procedure", in the post's words).
//!
//! The post's example uses two thresholds, 0.005 and 0.01, with the first-rejection rule: it
//! stops as soon as the p-value is known to be below 0.01 or above 0.005. With ε = 10⁻⁹ and no
//! resample ever as extreme as the data, that happens after 2967 resamples, with the credible
//! interval [0, 0.00756] (tested in `tests/khuong_2018.rs`).
//!
//! Two entry points:
//!
//! * [`location_test`]: the common case, a difference of locations (means, medians or any
//!   quantile), one- or two-sided, with a shift Δ. It never sorts: a resample costs a partial
//!   shuffle of the first group plus a sum or a selection.
//! * [`exact_test`]: any statistic `f(X, Y)`, seeing each group sorted.
//!
//! [`Resampler`] is the generator behind [`location_test`], for callers that drive the test
//! themselves (to print progress, or stop on a signal).

use crate::driver::{Decision, Driver, DriverConfig, Outcome, Step};
use crate::rng::SplitMix64;
use crate::StatsError;

/// Parameters of the sequential decision about the p-value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ExactConfig {
    /// Significance threshold: the difference is significant when the p-value is below it. With
    /// `alpha_hi > alpha`, the p-value is tested against both with the post's first-rejection
    /// rule ("significant at `alpha_hi`" or "not significant at `alpha`").
    pub alpha: f64,
    /// Upper significance threshold (equal to `alpha` for a single threshold).
    pub alpha_hi: f64,
    /// False-positive rate of the sequential decision about the p-value.
    pub eps: f64,
    /// Most resamples.
    pub max_resamples: u64,
    /// Seed of the resampling.
    pub seed: u64,
}

impl Default for ExactConfig {
    fn default() -> Self {
        Self {
            alpha: 0.01,
            alpha_hi: 0.01,
            eps: 1e-6,
            max_resamples: 1_000_000,
            seed: 1,
        }
    }
}

impl ExactConfig {
    /// The driver that decides the p-value.
    pub fn driver_config(&self) -> DriverConfig {
        DriverConfig::band(self.alpha, self.alpha_hi, self.eps).max_count(self.max_resamples)
    }
}

/// The result of an exact test.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ExactOutcome {
    /// `f(X₀, Y₀)`: the statistic on the data as observed (after any shift).
    pub observed: f64,
    /// The driver's view of the p-value: `estimate`, `confidence` and `credible` intervals, the
    /// number of resamples `n`, and which threshold each side refers to.
    pub p_value: Outcome,
    /// `Some(true)`: the p-value is below a threshold (the difference is real);
    /// `Some(false)`: above one; `None`: undecided within the budget, or between the thresholds.
    pub significant: Option<bool>,
}

impl ExactOutcome {
    fn new(observed: f64, p_value: Outcome) -> Self {
        let significant = match p_value.decision {
            Decision::Below => Some(true),
            Decision::Above => Some(false),
            Decision::Within | Decision::Undecided => None,
        };
        Self {
            observed,
            p_value,
            significant,
        }
    }
}

/// Which location of each sample the test compares.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Location {
    /// The arithmetic mean.
    Mean,
    /// The median (the mean of the two middle values for an even count).
    Median,
    /// The `q`-quantile, `q` in [0, 1]: the sample of rank `ceil(q n)` (at least 1) in sorted
    /// order, as [`crate::quantile_interval`] estimates it.
    Quantile(f64),
}

/// Which differences count as "at least as extreme" as the observed one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Alternative {
    /// `loc(X) − loc(Y)` at least as large as observed: is X's location greater than Y's?
    Greater,
    /// At most as large as observed: is X's location smaller?
    Less,
    /// At least as large in absolute value: do they differ?
    TwoSided,
}

/// A difference-of-locations test: `loc(X − Δ) − loc(Y)`, X shifted by `shift` before pooling
/// (so the null hypothesis is "X − Δ and Y have one distribution").
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LocationTest {
    /// The location compared.
    pub location: Location,
    /// The direction of the alternative.
    pub alternative: Alternative,
    /// Δ, subtracted from every value of X.
    pub shift: f64,
}

impl Default for LocationTest {
    fn default() -> Self {
        Self {
            location: Location::Mean,
            alternative: Alternative::Greater,
            shift: 0.0,
        }
    }
}

/// One resample after another of a [`LocationTest`]: each call to [`Resampler::sample`] is one
/// Bernoulli trial whose success rate is the p-value.
///
/// Rounding: a difference of means depends on the order of summation, so a resample whose exact
/// difference equals the observed one could compute a few ULPs lower and not count. Every
/// comparison therefore allows the observed value a tolerance that bounds the rounding error of
/// both computations (for `n` values summed naively, `n·u·Σ|x|` per sum, `u = 2⁻⁵³`, doubled and
/// then some); counting a few more resamples as extreme can only raise the p-value estimate, so
/// the test stays conservative.
#[derive(Clone, Debug)]
pub struct Resampler {
    pool: Vec<f64>,
    x_len: usize,
    spec: LocationTest,
    observed: f64,
    tolerance: f64,
    rng: SplitMix64,
}

impl Resampler {
    /// A resampler for `x` against `y`, or an error for an empty sample, a value that is not
    /// finite, or a quantile outside [0, 1].
    pub fn new(x: &[f64], y: &[f64], spec: LocationTest, seed: u64) -> Result<Self, StatsError> {
        if x.is_empty() || y.is_empty() {
            return Err(StatsError::Invalid(
                "the exact test needs two non-empty samples".into(),
            ));
        }
        if let Location::Quantile(q) = spec.location {
            if !(0.0..=1.0).contains(&q) {
                return Err(StatsError::OutOfRange {
                    name: "quantile",
                    value: q,
                    range: "[0, 1]",
                });
            }
        }
        if !spec.shift.is_finite() {
            return Err(StatsError::Invalid(format!(
                "the shift must be finite, not {}",
                spec.shift
            )));
        }
        let mut pool: Vec<f64> = x.iter().map(|v| v - spec.shift).collect();
        pool.extend_from_slice(y);
        if let Some(bad) = pool.iter().find(|v| !v.is_finite()) {
            return Err(StatsError::Invalid(format!(
                "the exact test needs finite values, not {bad}"
            )));
        }
        let max_abs = pool.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let sum_abs: f64 = pool.iter().map(|v| v.abs()).sum();
        if spec.location == Location::Mean && !sum_abs.is_finite() {
            // A mean would be inf or NaN, and NaN compares as a difference beyond every bound.
            return Err(StatsError::Invalid(format!(
                "values this large (up to {max_abs:e}) overflow their sum: the mean cannot be computed; rescale them or use the median"
            )));
        }
        let (n, small) = (pool.len() as f64, x.len().min(y.len()) as f64);
        const U: f64 = f64::EPSILON / 2.0;
        // Bounds on |computed − exact| of one difference, with room to spare: means are naive
        // sums divided by the count; quantiles are values picked exactly, averaged at most once.
        let one = match spec.location {
            Location::Mean => 2.0 * (n + 4.0) * U * sum_abs / small,
            Location::Median | Location::Quantile(_) => 4.0 * U * max_abs,
        };
        let mut resampler = Self {
            pool,
            x_len: x.len(),
            spec,
            observed: 0.0,
            // Two computations (the observed and the resampled difference) can each be off.
            tolerance: 2.0 * one * (1.0 + 1e-6),
            rng: SplitMix64::new(seed),
        };
        resampler.observed = resampler.difference();
        Ok(resampler)
    }

    /// The observed difference `loc(X₀ − Δ) − loc(Y₀)`.
    pub fn observed(&self) -> f64 {
        self.observed
    }

    /// The difference of locations of the current split of the pool.
    fn difference(&mut self) -> f64 {
        let (x, y) = self.pool.split_at_mut(self.x_len);
        location(x, self.spec.location) - location(y, self.spec.location)
    }

    /// Draws one uniformly random split and says whether its difference is at least as extreme
    /// as the observed one.
    pub fn sample(&mut self) -> bool {
        self.rng.partial_shuffle(&mut self.pool, self.x_len);
        let d = self.difference();
        let (d0, tol) = (self.observed, self.tolerance);
        match self.spec.alternative {
            Alternative::Greater => d >= d0 - tol,
            Alternative::Less => d <= d0 + tol,
            Alternative::TwoSided => d.abs() >= d0.abs() - tol,
        }
    }
}

/// The location of `values` (reordered in place by the selection).
fn location(values: &mut [f64], which: Location) -> f64 {
    let n = values.len();
    let mut select = |rank: usize| *values.select_nth_unstable_by(rank, f64::total_cmp).1;
    match which {
        Location::Mean => values.iter().sum::<f64>() / n as f64,
        Location::Median if n % 2 == 1 => select(n / 2),
        Location::Median => {
            let hi = select(n / 2);
            // After the selection, everything before n/2 is <= hi: the lower middle is their max.
            let lo = values[..n / 2]
                .iter()
                .copied()
                .fold(f64::NEG_INFINITY, f64::max);
            lo + (hi - lo) / 2.0
        }
        Location::Quantile(q) => {
            let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
            select(rank - 1)
        }
    }
}

/// The exact test of a difference of locations; see [`LocationTest`] and [`Resampler`].
///
/// ```
/// use spindle_stats::{location_test, ExactConfig, LocationTest};
/// let old = [10.1, 10.3, 9.9, 10.0, 10.2, 10.4, 10.1, 9.8, 10.0, 10.2];
/// let new = [11.0, 11.2, 10.9, 11.1, 11.3, 10.8, 11.0, 11.1, 10.9, 11.2];
/// // Is new's mean greater than old's? (X = new, Y = old)
/// let out = location_test(&new, &old, LocationTest::default(), &ExactConfig::default()).unwrap();
/// assert_eq!(out.significant, Some(true));
/// ```
pub fn location_test(
    x: &[f64],
    y: &[f64],
    spec: LocationTest,
    config: &ExactConfig,
) -> Result<ExactOutcome, StatsError> {
    let mut resampler = Resampler::new(x, y, spec, config.seed)?;
    let mut driver = Driver::new(config.driver_config())?;
    while driver.observe(resampler.sample()) == Step::Continue {}
    Ok(ExactOutcome::new(resampler.observed(), driver.outcome()))
}

/// One-sided permutation test of any statistic: how unlikely is `statistic(x, y) >=
/// statistic(x₀, y₀)` if `x` and `y` came from the same distribution? For a two-sided test,
/// return an absolute value from `statistic`.
///
/// `statistic` always sees each group sorted in ascending order (NaNs last). A two-sample
/// statistic depends only on the two multisets, and sorting makes the same multiset give the
/// bit-identical floating-point result whatever order the shuffle produced: otherwise a
/// resample equal to the observed split could compare one ULP lower and not count as "at least
/// as extreme", which would make the test anti-conservative.
pub fn exact_test(
    x: &[f64],
    y: &[f64],
    mut statistic: impl FnMut(&[f64], &[f64]) -> f64,
    config: &ExactConfig,
) -> Result<ExactOutcome, StatsError> {
    if x.is_empty() || y.is_empty() {
        return Err(StatsError::Invalid(
            "exact_test needs two non-empty samples".into(),
        ));
    }
    let mut driver = Driver::new(config.driver_config())?;
    let sorted = |v: &mut Vec<f64>| v.sort_by(|a, b| a.total_cmp(b));
    let (mut xs, mut ys) = (x.to_vec(), y.to_vec());
    sorted(&mut xs);
    sorted(&mut ys);
    let observed = statistic(&xs, &ys);
    let mut pool: Vec<f64> = x.iter().chain(y.iter()).copied().collect();
    let mut rng = SplitMix64::new(config.seed);
    loop {
        // A uniformly random split: shuffle the first |x| positions into a random subset.
        rng.partial_shuffle(&mut pool, x.len());
        xs.clear();
        ys.clear();
        xs.extend_from_slice(&pool[..x.len()]);
        ys.extend_from_slice(&pool[x.len()..]);
        sorted(&mut xs);
        sorted(&mut ys);
        if let Step::Done(_) = driver.observe(statistic(&xs, &ys) >= observed) {
            break;
        }
    }
    Ok(ExactOutcome::new(observed, driver.outcome()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mean(v: &[f64]) -> f64 {
        v.iter().sum::<f64>() / v.len() as f64
    }

    fn config(alpha: f64, eps: f64, max_resamples: u64, seed: u64) -> ExactConfig {
        ExactConfig {
            alpha,
            alpha_hi: alpha,
            eps,
            max_resamples,
            seed,
        }
    }

    #[test]
    fn exact_test_detects_a_shift_and_accepts_the_null() {
        let mut rng = SplitMix64::new(42);
        let x: Vec<f64> = (0..200).map(|_| rng.next_f64()).collect();
        let shifted: Vec<f64> = (0..200).map(|_| rng.next_f64() + 0.2).collect();
        let same: Vec<f64> = (0..200).map(|_| rng.next_f64()).collect();
        let diff = |a: &[f64], b: &[f64]| mean(b) - mean(a);
        let cfg = config(0.01, 1e-6, 100_000, 9);
        let out = exact_test(&x, &shifted, diff, &cfg).unwrap();
        assert_eq!(out.significant, Some(true), "{out:?}");
        assert!(out.p_value.confidence.1 < 0.01);
        let out = exact_test(&x, &same, |a, b| (mean(b) - mean(a)).abs(), &cfg).unwrap();
        assert_eq!(out.significant, Some(false), "{out:?}");
        assert!(exact_test(&[], &same, diff, &cfg).is_err());
    }

    /// Three distinct values against three zeros: the exact one-sided p-value of the observed
    /// mean difference is 1/C(6,3) = 1/20 = 0.05 (only the observed split is as extreme). At a
    /// significance level of 0.04 the test must not call it significant, whatever order the
    /// shuffle leaves the values in (summing the same values in another order can round one ULP
    /// lower). Both entry points.
    #[test]
    fn exact_test_counts_resamples_equal_to_the_observation() {
        let x = [0.7, 0.4, 0.1];
        let y = [0.0, 0.0, 0.0];
        let diff = |a: &[f64], b: &[f64]| mean(a) - mean(b);
        let cfg = config(0.04, 1e-3, 200_000, 3);
        let out = exact_test(&x, &y, diff, &cfg).unwrap();
        assert_ne!(out.significant, Some(true), "{out:?}");
        assert!((out.p_value.estimate - 0.05).abs() < 0.01, "{out:?}");
        let out = location_test(&x, &y, LocationTest::default(), &cfg).unwrap();
        assert_ne!(out.significant, Some(true), "{out:?}");
        assert!((out.p_value.estimate - 0.05).abs() < 0.01, "{out:?}");
    }

    #[test]
    fn locations_are_the_usual_ones() {
        let mut v = [5.0, 1.0, 4.0, 2.0, 3.0];
        assert_eq!(location(&mut v, Location::Median), 3.0);
        assert_eq!(location(&mut v, Location::Mean), 3.0);
        assert_eq!(location(&mut v, Location::Quantile(0.0)), 1.0);
        assert_eq!(location(&mut v, Location::Quantile(0.2)), 1.0);
        assert_eq!(location(&mut v, Location::Quantile(0.21)), 2.0);
        assert_eq!(location(&mut v, Location::Quantile(1.0)), 5.0);
        let mut even = [4.0, 1.0, 3.0, 2.0];
        assert_eq!(location(&mut even, Location::Median), 2.5);
    }

    /// Every alternative, every location, with and without a shift: the test finds what is there
    /// and nothing else.
    #[test]
    fn location_tests_find_shifts_in_the_right_direction() {
        let mut rng = SplitMix64::new(5);
        let base: Vec<f64> = (0..300).map(|_| rng.next_f64()).collect();
        let up: Vec<f64> = (0..300).map(|_| rng.next_f64() + 0.3).collect();
        let cfg = config(0.01, 1e-6, 200_000, 1);
        for location in [Location::Mean, Location::Median, Location::Quantile(0.9)] {
            let spec = |alternative, shift| LocationTest {
                location,
                alternative,
                shift,
            };
            let test = |x: &[f64], y: &[f64], s| location_test(x, y, s, &cfg).unwrap();
            assert_eq!(
                test(&up, &base, spec(Alternative::Greater, 0.0)).significant,
                Some(true)
            );
            assert_eq!(
                test(&up, &base, spec(Alternative::TwoSided, 0.0)).significant,
                Some(true)
            );
            assert_eq!(
                test(&base, &up, spec(Alternative::Less, 0.0)).significant,
                Some(true)
            );
            assert_eq!(
                test(&base, &up, spec(Alternative::Greater, 0.0)).significant,
                Some(false)
            );
            // Shifted back by the true difference, nothing remains to find.
            assert_eq!(
                test(&up, &base, spec(Alternative::TwoSided, 0.3)).significant,
                Some(false),
                "{location:?}"
            );
        }
    }

    /// A/A: under the null the test calls a difference significant at most α + ε of the time.
    #[test]
    fn location_test_under_the_null_is_rarely_significant() {
        let mut rng = SplitMix64::new(77);
        let (runs, mut significant) = (300u64, 0u64);
        for seed in 0..runs {
            let x: Vec<f64> = (0..40).map(|_| rng.next_f64()).collect();
            let y: Vec<f64> = (0..40).map(|_| rng.next_f64()).collect();
            let out = location_test(
                &x,
                &y,
                LocationTest::default(),
                &config(0.05, 1e-3, 5000, seed),
            )
            .unwrap();
            significant += (out.significant == Some(true)) as u64;
        }
        let (lo, _) = crate::csm::confidence_sequence(runs, significant, 1e-6f64.ln());
        assert!(lo < 0.05 + 1e-3, "{significant} of {runs}");
    }

    #[test]
    fn bad_inputs_are_errors() {
        let cfg = ExactConfig::default();
        let spec = LocationTest::default();
        assert!(location_test(&[], &[1.0], spec, &cfg).is_err());
        assert!(location_test(&[f64::NAN], &[1.0], spec, &cfg).is_err());
        let q = LocationTest {
            location: Location::Quantile(1.5),
            ..spec
        };
        assert!(location_test(&[1.0], &[1.0], q, &cfg).is_err());
        let bad = ExactConfig {
            alpha: 0.02,
            alpha_hi: 0.01,
            ..cfg
        };
        assert!(location_test(&[1.0], &[2.0], spec, &bad).is_err());
        // Values whose sum overflows have no mean: an error, not a NaN difference that reads
        // as significant.
        let big = [1e306; 200];
        assert!(location_test(&big, &big, spec, &cfg).is_err());
        let median = LocationTest {
            location: Location::Median,
            ..spec
        };
        assert!(location_test(&big, &big, median, &cfg).is_ok());
    }
}
