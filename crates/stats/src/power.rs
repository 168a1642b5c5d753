//! How likely is a driver to reach a correct decision within its budget?
//!
//! The CSM is conservative: it hedges against a false positive at any time in an infinite
//! stream, so with a finite `max_count` it may run out of observations before deciding. Before
//! committing a CI job to a budget, ask [`power`] (the CSM post's `csm-power`): it simulates the
//! driver on Bernoulli data with a chosen true rate and feeds "did the simulated driver decide,
//! and is every side it reported true?" ([`Outcome::is_correct_for`]) into an outer driver that
//! tests that success rate against a target (0.99 by default) with a tiny ε (1e-9 by default),
//! after at least 100 simulations. The answer is itself a CSM verdict: `Above` means "more than
//! 99% of runs would decide correctly", `Below` the opposite.
//!
//! The simulated driver uses whatever [`crate::StopRule`] its configuration names, so the same
//! question can be asked of the post's first-rejection rule and of the full three-way decision.

use crate::driver::{drive, Decision, DriverConfig, Outcome};
use crate::rng::SplitMix64;
use crate::StatsError;

/// Options of the outer (simulation) test.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PowerOptions {
    /// The success rate the inner driver should reach (default 0.99).
    pub target: f64,
    /// False-positive rate of the outer test (default 1e-9).
    pub eps: f64,
    /// Fewest simulations (default 100).
    pub min_simulations: u64,
    /// Most simulations (default 100 000).
    pub max_simulations: u64,
    /// Seed of the simulated data.
    pub seed: u64,
}

impl Default for PowerOptions {
    fn default() -> Self {
        Self {
            target: 0.99,
            eps: 1e-9,
            min_simulations: 100,
            max_simulations: 100_000,
            seed: 1,
        }
    }
}

/// The answer of [`power`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PowerReport {
    /// The outer test: its estimate is the fraction of simulated drivers that decided correctly;
    /// its decision says whether that fraction is above or below the target.
    pub outer: Outcome,
    /// The largest number of observations a simulated driver needed to decide (`max_count` if
    /// none decided).
    pub max_inner_n: u64,
}

/// Estimates the probability that a driver configured as `inner` (which must have a finite
/// `max_count`) reaches a correct decision on data with success rate `rate`.
pub fn power(
    rate: f64,
    inner: &DriverConfig,
    options: &PowerOptions,
) -> Result<PowerReport, StatsError> {
    power_with_progress(rate, inner, options, |_| {})
}

/// How far [`power_with_progress`] has got: after each simulated driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PowerProgress {
    /// Simulated drivers so far.
    pub simulations: u64,
    /// Of them, those that decided correctly.
    pub correct: u64,
    /// Observations the simulated drivers have drawn so far, all together.
    pub observations: u64,
}

/// [`power`], calling `progress` after each simulated driver (a long simulation, with a large
/// `max_count`, can then show how far it has got).
pub fn power_with_progress(
    rate: f64,
    inner: &DriverConfig,
    options: &PowerOptions,
    mut progress: impl FnMut(PowerProgress),
) -> Result<PowerReport, StatsError> {
    if !(0.0..=1.0).contains(&rate) {
        return Err(StatsError::OutOfRange {
            name: "rate",
            value: rate,
            range: "[0, 1]",
        });
    }
    inner.validate()?;
    let outer = DriverConfig::new(options.target, options.eps)
        .min_count(options.min_simulations)
        .max_count(options.max_simulations);
    outer.validate()?;

    let mut rng = SplitMix64::new(options.seed);
    let mut max_inner_n = 0;
    let mut so_far = PowerProgress {
        simulations: 0,
        correct: 0,
        observations: 0,
    };
    let outer = drive(outer, || {
        let out = drive(*inner, || rng.bernoulli(rate)).expect("validated above");
        if out.decision != Decision::Undecided {
            max_inner_n = max_inner_n.max(out.n);
        }
        let correct = out.is_correct_for(rate);
        so_far.simulations += 1;
        so_far.correct += u64::from(correct);
        so_far.observations = so_far.observations.saturating_add(out.n);
        progress(so_far);
        correct
    })?;
    if max_inner_n == 0 {
        max_inner_n = inner.max_count;
    }
    Ok(PowerReport { outer, max_inner_n })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::{Side, StopRule};

    #[test]
    fn seed_example_with_a_small_budget_is_underpowered() {
        // The CSM post: thresholds 96% and 98%, true rate 97%, ε = 1e-3, only 1000 observations:
        // "we can expect the CSM success rate to be less than 99%".
        let inner = DriverConfig::band(0.96, 0.98, 1e-3).max_count(1000);
        let report = power(0.97, &inner, &PowerOptions::default()).unwrap();
        assert_eq!(report.outer.decision, Decision::Below);
        assert!(report.outer.estimate < 0.2, "{:?}", report.outer);
    }

    /// The progress calls count every simulated driver, and their last call agrees with the
    /// report.
    #[test]
    fn progress_counts_every_simulation() {
        let inner = DriverConfig::band(0.4, 0.6, 1e-3).max_count(500);
        let mut calls = Vec::new();
        let report =
            power_with_progress(0.7, &inner, &PowerOptions::default(), |p| calls.push(p)).unwrap();
        assert_eq!(calls.len() as u64, report.outer.n);
        let last = calls.last().unwrap();
        assert_eq!(last.simulations, report.outer.n);
        assert_eq!(last.correct, report.outer.successes);
        assert!(calls
            .windows(2)
            .all(|w| w[1].simulations == w[0].simulations + 1
                && w[1].observations > w[0].observations));
        assert_eq!(
            report,
            power(0.7, &inner, &PowerOptions::default()).unwrap()
        );
    }

    #[test]
    fn easy_settings_have_high_power() {
        let inner = DriverConfig::band(0.4, 0.6, 1e-3).max_count(5000);
        let options = PowerOptions {
            eps: 1e-6,
            ..PowerOptions::default()
        };
        let report = power(0.9, &inner, &options).unwrap();
        assert_eq!(report.outer.decision, Decision::Above, "{:?}", report.outer);
        assert!(report.max_inner_n < 200);
    }

    /// The full decision needs both thresholds rejected: in the middle of the band that takes
    /// about twice as long as the first rejection, so a budget the post's rule finds ample is
    /// not enough for it.
    #[test]
    fn the_full_decision_needs_more_observations() {
        let inner = DriverConfig::band(0.4, 0.6, 1e-3).max_count(700);
        let options = PowerOptions {
            eps: 1e-6,
            ..PowerOptions::default()
        };
        let first = power(0.5, &inner, &options).unwrap();
        assert_eq!(first.outer.decision, Decision::Above, "{:?}", first.outer);
        let full = power(0.5, &inner.rule(StopRule::FullDecision), &options).unwrap();
        assert_eq!(full.outer.decision, Decision::Below, "{:?}", full.outer);
    }

    #[test]
    fn correctness_is_judged_against_the_true_rate() {
        let c = DriverConfig::band(0.4, 0.6, 0.01);
        let out = |decision, lower_side, upper_side| Outcome {
            decision,
            n: 1,
            successes: 0,
            estimate: 0.0,
            confidence: (0.0, 1.0),
            credible: (0.0, 1.0),
            lower_side,
            upper_side,
            config: c,
        };
        let above_hi = out(Decision::Above, Side::Unknown, Side::Above);
        assert!(above_hi.is_correct_for(0.7) && !above_hi.is_correct_for(0.5));
        let above_lo = out(Decision::Above, Side::Above, Side::Unknown);
        assert!(above_lo.is_correct_for(0.5) && !above_lo.is_correct_for(0.3));
        let within = out(Decision::Within, Side::Above, Side::Below);
        assert!(within.is_correct_for(0.5) && !within.is_correct_for(0.6));
        let below = out(Decision::Below, Side::Below, Side::Below);
        assert!(below.is_correct_for(0.1) && !below.is_correct_for(0.5));
        assert!(!out(Decision::Undecided, Side::Unknown, Side::Unknown).is_correct_for(0.1));
    }

    #[test]
    fn bad_rates_are_errors() {
        let inner = DriverConfig::new(0.5, 0.01).max_count(10);
        assert!(power(1.5, &inner, &PowerOptions::default()).is_err());
        assert!(power(f64::NAN, &inner, &PowerOptions::default()).is_err());
    }
}
