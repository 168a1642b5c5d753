//! # spindle-stats: decide performance claims with a bounded false-positive rate
//!
//! Benchmarks usually run a fixed number of iterations and then eyeball a mean. This crate asks
//! a sharper question — "is the success rate of this Bernoulli process above or below α?" — and
//! answers it *sequentially*: you may look after every observation and stop as soon as the data
//! suffice, and the probability of ever answering wrongly stays below the ε you chose up front.
//! The method is Robbins' confidence sequence as used by Ding, Gandy and Hahn (the Confidence
//! Sequence Method, CSM), following Paul Khuong's safely-rounded implementation ("Testing
//! SLO-type properties with the Confidence Sequence Method", pvk.ca, 2018: "the CSM post" below).
//!
//! Almost any performance claim reduces to a Bernoulli stream:
//!
//! * an SLO ("p99 under 50 ms"): success = one request finished under 50 ms, α = 0.99;
//! * a comparison ("A is not slower than B by more than 5%"): success = A took more than 1.05×
//!   B's time in one paired trial, α = ½ (the claim is about the median time ratio);
//! * a ratio claim ("ours costs at most 1.25× the floor"): success = ratio ≤ 1.25 in one paired
//!   trial, α = ½ (the claim is about the median ratio).
//!
//! ## Map of the crate
//!
//! | item | what it does |
//! |---|---|
//! | [`round`] | directed rounding by ULP stepping; `ln`/`ln_1p` bounds; a Kahan sum that never rounds below the exact sum |
//! | [`log_choose_upper`] | an upper bound on ln C(n, k) from Robbins' factorial bounds |
//! | [`csm()`] | Robbins' stopping test for one threshold |
//! | [`confidence_sequence`] | the rates the CSM does not reject: a confidence interval valid at any stopping time |
//! | [`beta_icdf`] | conservative ends of Beta (Bayesian) credible intervals |
//! | [`log_proportion`], [`proportion_shape`] | the posterior's shape in the log domain, without underflow |
//! | [`Driver`], [`StopRule`] | the sequential test of a stream against one threshold or two (the post's `csm-driver`: stop at the first rejection; or the full three-way decision), with the post's ε split and both intervals |
//! | [`power()`] | probability that a driver decides within a budget (simulation, itself decided by CSM) |
//! | [`quantile_bounds`] | order-statistic ranks bounding a quantile, valid under peeking |
//! | [`ToleranceGate`] | paired A-vs-B comparison: "slower by more than τ?" from the median time ratio |
//! | [`median_ratio_verdict`] | the same question from two unpaired samples, by the ratio of their medians |
//! | [`SignTest`], [`sign_test`] | paired A-vs-B comparison: "does A win more than half the pairs?" |
//! | [`location_test`], [`exact_test`] | the post's permutation test of a difference of means, medians or quantiles (or any statistic), stopped by CSM |
//!
//! ## Conservative, to the last bit
//!
//! Every floating-point step that could move a verdict is rounded in the safe direction:
//! upper bounds up, lower bounds down, library `ln`/`exp` allowed a few ULPs of error. The point
//! is not that rounding is likely to matter, but that when a CI job fails nobody has to wonder
//! whether it was rounding. The results match the CSM post's published values bit for bit:
//!
//! ```
//! use spindle_stats::{beta_icdf, csm};
//! let check = csm(4000, 0.98, 3972, 0.001f64.ln());
//! assert!(check.stop && check.log_level == -17.238559826956475);
//! assert_eq!(beta_icdf(3972, 28, 0.001, false), 0.9882119750976562);
//! assert_eq!(beta_icdf(3972, 28, 0.001, true), 0.9963832682169742);
//! ```
//!
//! ## What the guarantee assumes
//!
//! Observations must be independent and identically distributed. Benchmarks drift (thermal
//! state, other tenants, frequency scaling), which is why Spindle's lab interleaves the variants
//! of one comparison within each trial and bases claims on ratios measured in the same trial.
//!
//! This crate has no dependencies.

use std::fmt;

// The README's examples are compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

pub mod beta;
pub mod compare;
pub mod csm;
pub mod driver;
pub mod exact;
pub mod power;
pub mod quantile;
pub mod rng;
pub mod round;

pub use beta::{beta_bound, beta_icdf, log_proportion, proportion_shape, rate_interval, BetaBound};
pub use compare::{
    median_ratio_verdict, sign_tail, sign_test, GateKnowledge, GateVerdict, SignOutcome, SignTest,
    ToleranceGate, UnpairedMedians, Winner,
};
pub use csm::{confidence_sequence, csm, log_choose_upper, CsmCheck};
pub use driver::{drive, Decision, Driver, DriverConfig, Outcome, Side, Step, StopRule};
pub use exact::{
    exact_test, location_test, Alternative, ExactConfig, ExactOutcome, Location, LocationTest,
    Resampler,
};
pub use power::{power, power_with_progress, PowerOptions, PowerProgress, PowerReport};
pub use quantile::{quantile_bounds, quantile_interval, QuantileInterval, QuantileRanks};

/// A parameter outside its domain.
#[derive(Clone, Debug, PartialEq)]
pub enum StatsError {
    /// `name` = `value` is outside `range`.
    OutOfRange {
        /// The parameter.
        name: &'static str,
        /// Its value.
        value: f64,
        /// The allowed range, in words.
        range: &'static str,
    },
    /// Any other inconsistency, described in a sentence.
    Invalid(String),
}

impl fmt::Display for StatsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StatsError::OutOfRange { name, value, range } => {
                // Scientific notation for values far from 1 (5e-324 printed plainly is 330
                // digits).
                if *value != 0.0 && !(1e-4..1e15).contains(&value.abs()) {
                    write!(f, "{name} = {value:e} is outside {range}")
                } else {
                    write!(f, "{name} = {value} is outside {range}")
                }
            }
            StatsError::Invalid(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for StatsError {}
