//! Conservative credible-interval ends for a Beta(a, b) distribution with integer parameters.
//!
//! After `s` successes in `n` Bernoulli trials, a uniform prior on the success rate updates to the
//! posterior Beta(s + 1, n − s + 1). An equal-tailed credible interval cuts α of probability from
//! each end; its lower end is the α-quantile, the largest `x` with `I_x(a, b) <= α`, where `I` is
//! the regularised incomplete Beta function (the Beta CDF). We only ever need small tails
//! (α <= 0.05), which allows a simple series with easy error control.
//!
//! # The series
//!
//! For integer `a, b >= 1` (DLMF 8.17.8 with Γ(a+b) / (Γ(a+1) Γ(b)) = C(a+b−1, a)):
//!
//! ```text
//!   I_x(a, b) = C(a+b−1, a) · x^a (1−x)^b · Σ_{k>=0} π_k,
//!   π_0 = 1,   π_k = π_{k−1} · r_k,   r_k = x · (1 + (b−1)/(a+k)).
//! ```
//!
//! The ratios `r_k` decrease towards `x`, so once we have summed up to term `k` the rest of the
//! series is squeezed between two geometric series:
//!
//! ```text
//!   π_k · x/(1−x)  <=  Σ_{j>k} π_j  <=  π_k · r_k/(1−r_k)      (when r_k < 1).
//! ```
//!
//! For `x < a/(a+b)`, `r_1 < 1`, the terms shrink from the start and the series converges.
//!
//! # Directed rounding
//!
//! The prefactor is computed in the log domain (with [`log_choose_upper`]) and every factor and
//! product is rounded up, and the partial sums use [`UpSum`]. So the partial sums are upper bounds
//! on the exact partial sums, and the evaluation stops as soon as it can tell on which side of a
//! threshold the *upper bound* of `I_x(a, b)` lies; when the tail bounds are used, they must clear
//! the threshold by a factor of two, which absorbs the few rounding errors of the tail estimate
//! itself. If it cannot tell within its iteration budget, it says so.
//!
//! # Inversion
//!
//! Bisection on `x ∈ (0, a/(a+b))`: `lo` only moves to points where the upper bound of `I_x` is
//! below α, so the true α-quantile is above `lo`: `lo` is a conservative lower end. When the series
//! declines to answer, the point is treated as "too high" (never a reason to move `lo`). The upper
//! end uses `I_x(a, b) = 1 − I_{1−x}(b, a)`.

use crate::csm::log_choose_upper;
use crate::round::{exp_up, ln_1p_down, ln_1p_up, ln_down, ln_up, next_up, sum_up, UpSum};

/// Largest Beta parameter we accept (the counts behind them must be exact in an f64 mantissa).
pub const MAX_BETA_PARAM: u64 = 1 << 44;

/// Never search for more relative precision than this.
const SEARCH_PRECISION: f64 = 1e-10;
/// Keep halving towards 0 down to here, so that tiny quantiles (the failure rate after a
/// million successes, say) come out as themselves rather than as 0.
const SEARCH_FLOOR: f64 = f64::MIN_POSITIVE;
/// Once the bracket is this tight (relative), a point where the series is slow ends the search.
const SEARCH_GOAL: f64 = 1e-3;
/// The series' iteration budget once the search is close to its goal.
const GOAL_ITERATIONS: u64 = 1000;

/// How an upper bound of `I_x(a, b)` compares to a threshold.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Side {
    /// Certainly below: the value returned is an upper bound on `I_x(a, b)`'s partial evaluation
    /// that is itself below the threshold.
    Below,
    /// Possibly at or above the threshold.
    NotBelow,
    /// The iteration budget ran out first.
    Unknown,
}

/// Evaluates the series for an upper bound of `I_x(a, b)` just far enough to compare it with
/// `threshold`. `limit` is the iteration budget (rounded up to a multiple of 128, so that the
/// expensive tail test always runs on the last iteration); `None` means `10 (a + b + 1000)`.
fn incbeta_side(a: u64, b: u64, x: f64, threshold: f64, limit: Option<u64>) -> Side {
    debug_assert!(x > 0.0 && x < a as f64 / (a + b) as f64);
    let limit = limit.unwrap_or_else(|| 10u64.saturating_mul(a + b + 1000));
    let iterations = limit.div_ceil(128).saturating_mul(128);

    let log_prefactor = sum_up(&[
        log_choose_upper(a + b - 1, a),
        next_up(a as f64 * ln_up(x)),
        next_up(b as f64 * ln_1p_up(-x)),
    ]);
    // Current term (prefactor included), rounded up.
    let mut term = exp_up(log_prefactor);
    let mut sum = UpSum::starting_at(term);
    let b_minus_1 = (b - 1) as f64;
    let mut a_plus_k = a as f64;

    for k in 1..=iterations {
        a_plus_k += 1.0;
        let ratio = (next_up(x * next_up(1.0 + next_up(b_minus_1 / a_plus_k)))).min(1.0);
        term = next_up(term * ratio);
        let before = sum.leading();
        sum.add_ordered(term);
        if sum.leading() > threshold {
            return Side::NotBelow;
        }
        // The tail test costs two logs and two exps: run it when the sum stopped moving, and
        // every 128 terms.
        if before == sum.leading() || k % 128 == 0 {
            let tail_hi = term * (ln_up(ratio) - ln_1p_down(-ratio)).exp();
            let tail_lo = term * (ln_down(x) - ln_1p_up(-x)).exp();
            let room = (threshold - sum.leading()) - sum.compensation();
            if tail_lo > 2.0 * room {
                return Side::NotBelow;
            }
            if tail_hi < 0.5 * room {
                return if sum.leading() < threshold {
                    Side::Below
                } else {
                    Side::NotBelow
                };
            }
        }
    }
    Side::Unknown
}

/// Bisection for the largest x with `I_x(a, b) < alpha` (alpha < 0.5). Returns the bracket
/// `(lo, hi)`: `lo` is a conservative lower bound on the alpha-quantile.
fn quantile_bracket(a: u64, b: u64, alpha: f64) -> (f64, f64) {
    let mut lo = 0.0f64;
    let mut hi = a as f64 / (a + b) as f64;
    while hi > lo + lo * SEARCH_PRECISION && hi > SEARCH_FLOOR {
        let x = 0.5 * (hi + lo);
        let close = hi < lo + lo * SEARCH_GOAL;
        let limit = if close { Some(GOAL_ITERATIONS) } else { None };
        match incbeta_side(a, b, x, alpha, limit) {
            Side::Unknown if close => break,
            Side::Below => lo = x,
            // Not known to be below: assume the worst, the quantile is below x.
            Side::NotBelow | Side::Unknown => hi = x,
        }
    }
    (lo, hi)
}

/// A credible-interval end together with the width of the search bracket it came from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BetaBound {
    /// The conservative bound.
    pub value: f64,
    /// The width of the final search bracket: a measure of how tight `value` is, not a bound on
    /// the distance to the exact quantile (the bracket also closes on points where the series
    /// could not decide).
    pub slack: f64,
}

/// Conservative end of an equal-tailed credible interval of Beta(a, b).
///
/// With `upper == false`, a value `x` such that `P(X < x) <= alpha` (the exact α-quantile is at
/// least `x`). With `upper == true`, a value `x` with `P(X > x) <= alpha`. `alpha` above 0.05 is
/// treated as 0.05 (a wider, still valid interval); `alpha <= 0` gives 0 or 1.
///
/// ```
/// // The CSM post's example: 3972 successes, 28 failures, 99.9% interval.
/// assert_eq!(spindle_stats::beta_icdf(3972, 28, 0.001, false), 0.9882119750976562);
/// assert_eq!(spindle_stats::beta_icdf(3972, 28, 0.001, true), 0.9963832682169742);
/// ```
///
/// Precision: ends are searched to about 1e-10 relative. An upper end close to 1 comes from
/// `1 − (lower end of Beta(b, a))`, so it cannot resolve distances to 1 below about 1e-10: the
/// upper end of a tiny rate is valid but may be loose at that scale.
///
/// # Panics
/// If `a` or `b` is 0 or above 2^44, or `alpha` is NaN.
pub fn beta_icdf(a: u64, b: u64, alpha: f64, upper: bool) -> f64 {
    beta_bound(a, b, alpha, upper).value
}

/// [`beta_icdf`] with the search bracket's width.
pub fn beta_bound(a: u64, b: u64, alpha: f64, upper: bool) -> BetaBound {
    assert!(
        (1..=MAX_BETA_PARAM).contains(&a),
        "beta_icdf: a = {a} must be in [1, 2^44]"
    );
    assert!(
        (1..=MAX_BETA_PARAM).contains(&b),
        "beta_icdf: b = {b} must be in [1, 2^44]"
    );
    assert!(!alpha.is_nan(), "beta_icdf: alpha is NaN");
    if alpha <= 0.0 {
        return BetaBound {
            value: if upper { 1.0 } else { 0.0 },
            slack: 0.0,
        };
    }
    let alpha = alpha.min(0.05);
    if upper {
        let (lo, hi) = quantile_bracket(b, a, alpha);
        BetaBound {
            value: next_up(1.0 - lo).min(1.0),
            slack: next_up(hi - lo).min(1.0),
        }
    } else {
        let (lo, hi) = quantile_bracket(a, b, alpha);
        BetaBound {
            value: lo.max(0.0),
            slack: next_up(hi - lo).min(1.0),
        }
    }
}

/// A credible interval for a Bernoulli success rate after `successes` out of `n`: the posterior
/// Beta(s + 1, n − s + 1) with `alpha` of probability cut from *each* end.
pub fn rate_interval(n: u64, successes: u64, alpha: f64) -> (f64, f64) {
    assert!(
        successes <= n,
        "rate_interval: {successes} successes exceed {n} trials"
    );
    let (a, b) = (successes + 1, n - successes + 1);
    (beta_icdf(a, b, alpha, false), beta_icdf(a, b, alpha, true))
}

/// `ln(x^a (1 − x)^b)`: the logarithm of the unnormalised posterior proportion after `a`
/// successes and `b` failures (uniform prior), i.e. of the Beta(a + 1, b + 1) density up to a
/// constant. The CSM post's `proportion` function: `a ln x + b ln_1p(−x)`, where `ln_1p` keeps
/// the precision that `ln(1 − x)` would round away for small `x`.
///
/// Computing `x^a (1 − x)^b` directly underflows for the counts of any real experiment
/// (`0.4^901 · 0.6^101` is 0.0 in double precision): the log domain does not.
pub fn log_proportion(a: u64, b: u64, x: f64) -> f64 {
    a as f64 * x.ln() + b as f64 * (-x).ln_1p()
}

/// The shape of the posterior on a grid: `x^a (1 − x)^b` at each point, divided by its largest
/// value on the grid, computed in the log domain (`exp(ln f(x) − max ln f)`) so that nothing
/// underflows before the division. Points must lie in (0, 1); an empty grid gives an empty shape.
pub fn proportion_shape(a: u64, b: u64, points: &[f64]) -> Vec<f64> {
    let logs: Vec<f64> = points.iter().map(|&x| log_proportion(a, b, x)).collect();
    let top = logs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    logs.iter().map(|&l| (l - top).exp()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reproduces_the_seed() {
        let lo = beta_bound(3972, 28, 0.001, false);
        let hi = beta_bound(3972, 28, 0.001, true);
        assert_eq!(lo.value, 0.9882119750976562);
        assert_eq!(lo.slack, 1.515197753898523e-5);
        assert_eq!(hi.value, 0.9963832682169742);
        assert_eq!(hi.slack, 2.0372679238045424e-13);
    }

    #[test]
    fn reference_values() {
        assert_eq!(beta_icdf(4, 4, 0.0, false), 0.0);
        assert_eq!(beta_icdf(4, 4, 0.0, true), 1.0);
        assert_eq!(beta_icdf(5, 5, 0.01, false), 0.1709400317777181);
        assert_eq!(beta_icdf(5, 5, 0.01, true), 0.829059968222282);
        assert_eq!(beta_icdf(10000, 10, 0.0001, false), 0.9973546960851649);
        assert_eq!(beta_icdf(10000, 10, 0.0001, true), 0.999780366628727);
        assert_eq!(beta_icdf(100, 1000000, 1e-8, false), 5.361735618111455e-05);
        assert_eq!(beta_icdf(100, 1000000, 1e-8, true), 0.0001686476860127684);
    }

    /// One success in 2^44 trials: the rate's lower end is tiny but not zero. For Beta(1, b),
    /// P(X < x) = 1 − (1 − x)^b, so the exact α-quantile is −expm1(ln(1 − α) / b) ≈ α / b.
    #[test]
    fn tiny_lower_quantiles_are_not_rounded_to_zero() {
        let b = 1u64 << 44;
        let alpha = 1e-6;
        let lo = beta_icdf(1, b, alpha, false);
        let exact = -((-alpha).ln_1p() / b as f64).exp_m1();
        assert!(lo <= exact * (1.0 + 1e-9), "{lo} above {exact}");
        assert!(lo > exact * 0.99, "{lo} much below {exact}");
    }

    /// Beta CDF for integer parameters, from the binomial identity
    /// I_x(a, b) = P(Binomial(a+b−1, x) >= a). Every term is positive and built from at most a few
    /// hundred correctly rounded operations, so the relative error is below 1e-12 for the small
    /// parameters used here; the checks below leave that much margin.
    fn beta_cdf(a: u64, b: u64, x: f64) -> f64 {
        let n = a + b - 1;
        let mut total = 0.0;
        for j in a..=n {
            let mut log_c = 0.0;
            for i in 0..j {
                log_c += ((n - i) as f64).ln() - ((i + 1) as f64).ln();
            }
            total += (log_c + j as f64 * x.ln() + (n - j) as f64 * (-x).ln_1p()).exp();
        }
        total
    }

    #[test]
    fn interval_ends_bracket_the_true_quantiles() {
        let params = [
            (1, 1),
            (1, 9),
            (9, 1),
            (2, 5),
            (5, 5),
            (12, 3),
            (20, 20),
            (40, 2),
            (3, 50),
        ];
        for &(a, b) in &params {
            for &alpha in &[0.05, 0.01, 1e-3, 1e-6] {
                let lo = beta_icdf(a, b, alpha, false);
                let hi = beta_icdf(a, b, alpha, true);
                assert!(
                    0.0 <= lo && lo < hi && hi <= 1.0,
                    "Beta({a},{b}) at {alpha}: [{lo}, {hi}]"
                );
                // Conservative: no more than alpha of the mass lies beyond either end.
                let below = beta_cdf(a, b, lo);
                let above = 1.0 - beta_cdf(a, b, hi);
                assert!(
                    below <= alpha * (1.0 + 1e-9),
                    "P(X < {lo}) = {below} > {alpha} for ({a},{b})"
                );
                assert!(
                    above <= alpha * (1.0 + 1e-9) + 1e-15,
                    "P(X > {hi}) = {above} > {alpha} for ({a},{b})"
                );
                // And useful: the ends are not absurdly loose (they give up at most half of alpha).
                if lo > 0.0 {
                    assert!(
                        below >= alpha * 0.5,
                        "lower end too loose: {below} vs {alpha} ({a},{b})"
                    );
                }
            }
        }
    }

    #[test]
    fn rate_interval_contains_the_posterior_mean() {
        // The interval is equal-tailed around the posterior Beta(s+1, n-s+1): with no successes
        // its lower end is above 0 (P(p < lo) = alpha), so it need not contain s/n, but it always
        // contains the posterior mean (s+1)/(n+2).
        for &(n, s) in &[(10u64, 0u64), (10, 10), (100, 50), (4000, 3972), (1, 1)] {
            let (lo, hi) = rate_interval(n, s, 1e-3);
            let mean = (s + 1) as f64 / (n + 2) as f64;
            assert!(lo < mean && mean < hi, "{s}/{n}: [{lo}, {hi}]");
            if 0 < s && s < n {
                let p = s as f64 / n as f64;
                assert!(lo < p && p < hi, "{s}/{n}: [{lo}, {hi}]");
            }
        }
    }
}
