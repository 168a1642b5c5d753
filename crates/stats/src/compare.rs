//! Comparing two things with the CSM: the paired sign test and the exact (permutation) test.
//!
//! Both reduce a comparison to a Bernoulli stream and let a [`Driver`] decide, so both inherit
//! its guarantee: the probability of a wrong verdict is at most ε, whenever the test stops.
//!
//! * [`SignTest`]: paired observations `(a_i, b_i)` (say, the run times of two builds measured
//!   back to back). Success = "A beats B" (`a_i < b_i`). If A and B are exchangeable within a
//!   pair, P(success | not a tie) = ½ exactly, whatever the distribution; ties carry no
//!   information and are counted but not fed to the driver. The driver tests that rate against
//!   the band `[½ − band, ½ + band]`: above it, A wins; below it, B wins; inside it, A and B are
//!   indistinguishable at that resolution. Running the same program on both sides makes the
//!   rate exactly ½, so naming a winner is a false positive, bounded by ε.
//! * [`exact_test`]: two independent samples and any statistic `f(X, Y)`. Under the null
//!   hypothesis that every sample comes from the same distribution, the labels are exchangeable:
//!   shuffle the pooled data, split it into groups of the original sizes, and count how often the
//!   shuffled statistic reaches the observed one. That frequency is the p-value of the observed
//!   difference, and the driver decides whether it is below the significance level.

use crate::driver::{Decision, Driver, DriverConfig, Outcome, Step};
use crate::rng::SplitMix64;
use crate::StatsError;

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
        let config = DriverConfig::band(0.5 - band, 0.5 + band, eps).max_count(max_pairs);
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

/// Parameters of an [`exact_test`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ExactConfig {
    /// Significance level: the observed statistic is significant when its p-value is below this.
    pub significance: f64,
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
            significance: 0.01,
            eps: 1e-6,
            max_resamples: 1_000_000,
            seed: 1,
        }
    }
}

/// The result of an [`exact_test`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ExactOutcome {
    /// `f(X, Y)` on the data as observed.
    pub observed: f64,
    /// The driver's view of the p-value `P(f(X*, Y*) >= observed)` under the null: `estimate`,
    /// `confidence` interval, and the number of resamples `n`.
    pub p_value: Outcome,
    /// `Some(true)`: the p-value is below the significance level (the difference is real);
    /// `Some(false)`: above it; `None`: undecided within the budget.
    pub significant: Option<bool>,
}

/// One-sided permutation test: how unlikely is `statistic(x, y) >= statistic(x0, y0)` if `x` and
/// `y` came from the same distribution? For a two-sided test, return an absolute value from
/// `statistic`.
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
    let driver_config =
        DriverConfig::new(config.significance, config.eps).max_count(config.max_resamples);
    let mut driver = Driver::new(driver_config)?;
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
    let p_value = driver.outcome();
    let significant = match p_value.decision {
        Decision::Below => Some(true),
        Decision::Above => Some(false),
        _ => None,
    };
    Ok(ExactOutcome {
        observed,
        p_value,
        significant,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mean(v: &[f64]) -> f64 {
        v.iter().sum::<f64>() / v.len() as f64
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
    fn exact_test_detects_a_shift_and_accepts_the_null() {
        let mut rng = SplitMix64::new(42);
        let x: Vec<f64> = (0..200).map(|_| rng.next_f64()).collect();
        let shifted: Vec<f64> = (0..200).map(|_| rng.next_f64() + 0.2).collect();
        let same: Vec<f64> = (0..200).map(|_| rng.next_f64()).collect();
        let diff = |a: &[f64], b: &[f64]| mean(b) - mean(a);
        let cfg = ExactConfig {
            significance: 0.01,
            eps: 1e-6,
            max_resamples: 100_000,
            seed: 9,
        };
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
    /// lower).
    #[test]
    fn exact_test_counts_resamples_equal_to_the_observation() {
        let x = [0.7, 0.4, 0.1];
        let y = [0.0, 0.0, 0.0];
        let diff = |a: &[f64], b: &[f64]| mean(a) - mean(b);
        let cfg = ExactConfig {
            significance: 0.04,
            eps: 1e-3,
            max_resamples: 200_000,
            seed: 3,
        };
        let out = exact_test(&x, &y, diff, &cfg).unwrap();
        assert_ne!(out.significant, Some(true), "{out:?}");
        assert!((out.p_value.estimate - 0.05).abs() < 0.01, "{out:?}");
    }
}
