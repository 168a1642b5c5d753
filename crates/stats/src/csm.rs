//! Robbins' confidence sequence for a Bernoulli success rate, conservatively rounded.
//!
//! # The criterion
//!
//! Let `x_1, x_2, …` be i.i.d. Bernoulli(p) and `S_n` the number of successes among the first
//! `n`. Robbins (1970, "Statistical methods related to the law of the iterated logarithm") shows
//! that, when `p = α`,
//!
//! ```text
//!   P( there is some n >= 1 with  C(n, S_n) α^S_n (1-α)^(n-S_n)  <=  ε / (n+1) )  <=  ε.
//! ```
//!
//! So we may look at the data after every observation and stop the first time the inequality
//! holds, concluding "p ≠ α", and the probability of ever concluding that wrongly is at most ε,
//! however long we keep looking. Ding, Gandy and Hahn (2017, "A simple method for implementing
//! Monte Carlo tests") add that, when it stops, `S_n / n` lies on the same side of α as p, except
//! with probability ε. This is the Confidence Sequence Method (CSM).
//!
//! In the log domain, with `s = S_n`, the *log level* is
//!
//! ```text
//!   L(n, s) = ln(n+1) + ln C(n, s) + s ln α + (n-s) ln(1-α)
//! ```
//!
//! and we stop when `L < ln ε`. We compute an upper bound on `L` and stop only when that bound is
//! below `ln ε`, so rounding can only delay a stop, never cause one.
//!
//! # ln C(n, k) from above, without a loop
//!
//! Robbins (1955, "A remark on Stirling's formula") brackets the factorial for `m >= 1`:
//!
//! ```text
//!   ln m! = ln √(2π) + (m + ½) ln m − m + r_m,    1/(12m+1) < r_m < 1/(12m).
//! ```
//!
//! With `m = n − k`, the `−n + k + m` terms cancel and one `ln √(2π)` survives with a minus sign:
//!
//! ```text
//!   ln C(n,k) = ln n! − ln k! − ln m!
//!             < −ln √(2π) + (n+½) ln n − (k+½) ln k − (m+½) ln m
//!               + 1/(12n) − 1/(12k+1) − 1/(12m+1).
//! ```
//!
//! Each of the seven terms is computed rounded up (see [`crate::round`]) and the terms are added
//! with [`crate::round::UpSum`], which never rounds below the exact sum. `n + ½`, `12n` and `12k + 1` are exact
//! for `n < 2^49`. `−ln √(2π) = −0.91893853320467274178…`; the double just above it is
//! `−0.9189385332046727` (= −8277062471433908 · 2^−53), which a test checks digit by digit.

use crate::round::{ln_1p_up, ln_down, ln_up, next_up, sum_up};

/// The smallest double above `−ln √(2π)`.
pub(crate) const MINUS_LN_SQRT_2PI_UP: f64 = -0.9189385332046727;

/// Counts must stay below this so that conversions to `f64` and `12n + 1` are exact.
pub const MAX_COUNT: u64 = 1 << 49;

/// An upper bound on `ln C(n, k)`, never below the exact value.
///
/// # Panics
/// If `k > n` or `n >= 2^49`.
pub fn log_choose_upper(n: u64, k: u64) -> f64 {
    assert!(
        n < MAX_COUNT,
        "log_choose_upper: n = {n} is too large (limit 2^49)"
    );
    assert!(k <= n, "log_choose_upper: k = {k} exceeds n = {n}");
    if k == 0 || k == n {
        return 0.0; // C(n, 0) = 1, exactly.
    }
    if k == 1 || k == n - 1 {
        return ln_up(n as f64); // C(n, 1) = n.
    }
    let (nf, kf, mf) = (n as f64, k as f64, (n - k) as f64);
    let terms = [
        MINUS_LN_SQRT_2PI_UP,
        // (n + ½) ln n: ln n rounded up, the product rounded up.
        next_up((nf + 0.5) * ln_up(nf)),
        // −(k + ½) ln k: ln k rounded *down* because it is subtracted.
        next_up(-((kf + 0.5) * ln_down(kf))),
        next_up(-((mf + 0.5) * ln_down(mf))),
        // Robbins' remainders: the upper one for n!, the lower ones for k! and m!.
        next_up(1.0 / (12.0 * nf)),
        next_up(-(1.0 / (12.0 * kf + 1.0))),
        next_up(-(1.0 / (12.0 * mf + 1.0))),
    ];
    sum_up(&terms)
}

/// The outcome of one CSM check.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CsmCheck {
    /// True when the data allow us to conclude that the success rate differs from α.
    pub stop: bool,
    /// An upper bound on the log level `L(n, s)`; stopping happens when it is below `ln ε`.
    /// `-log_level` is the largest `-ln ε` that would stop here: useful for reporting, never for
    /// choosing ε after the fact.
    pub log_level: f64,
}

/// Robbins' stopping test: given `n` trials with `successes` successes, may we conclude that the
/// success rate differs from `alpha`, with false-positive rate `exp(log_eps)`?
///
/// ```
/// // The CSM post's example: 3972 successes in 4000 trials, threshold 0.98, ε = 0.001.
/// let check = spindle_stats::csm(4000, 0.98, 3972, 0.001f64.ln());
/// assert!(check.stop);
/// assert_eq!(check.log_level, -17.238559826956475);
/// ```
///
/// # Panics
/// If `successes > n`, `n >= 2^49`, `alpha` is not in (0, 1), or `log_eps > 0`.
pub fn csm(n: u64, alpha: f64, successes: u64, log_eps: f64) -> CsmCheck {
    assert!(n < MAX_COUNT, "csm: n = {n} is too large (limit 2^49)");
    assert!(
        successes <= n,
        "csm: {successes} successes exceed {n} trials"
    );
    assert!(
        alpha > 0.0 && alpha < 1.0,
        "csm: alpha = {alpha} must lie in (0, 1)"
    );
    assert!(log_eps <= 0.0, "csm: log_eps = {log_eps} must be <= 0");
    let (nf, sf) = (n as f64, successes as f64);
    let terms = [
        ln_up(nf + 1.0),
        log_choose_upper(n, successes),
        next_up(sf * ln_up(alpha)),
        // ln(1 − α) via ln_1p so that α close to 0 keeps its precision.
        next_up((nf - sf) * ln_1p_up(-alpha)),
    ];
    let log_level = sum_up(&terms);
    CsmCheck {
        stop: log_level < log_eps,
        log_level,
    }
}

/// Robbins' confidence sequence for the success rate: the rates that the CSM does *not* reject
/// after `successes` out of `n`, at false-positive rate `exp(log_eps)`.
///
/// Because the CSM rejects the true rate at *any* `n` with probability at most ε, these
/// intervals cover the true rate at every `n` simultaneously with probability at least 1 − ε: they
/// stay valid at a data-dependent stopping time, unlike a fixed-n confidence interval or a
/// Bayesian credible interval. They are wider than either, the price of that guarantee.
///
/// The log likelihood `s ln p + (n − s) ln(1 − p)` is concave in `p` with its maximum at `s/n`, so
/// the rejected rates form two tails and each end is a bisection. Each end returned is a rate
/// that the (conservatively rounded) test rejects, so every rate beyond it is rejected by the
/// exact criterion too: the interval can only be too wide, never too narrow.
///
/// # Panics
/// If `successes > n`, `n >= 2^49` or `log_eps > 0`.
pub fn confidence_sequence(n: u64, successes: u64, log_eps: f64) -> (f64, f64) {
    assert!(
        successes <= n,
        "confidence_sequence: {successes} successes exceed {n} trials"
    );
    assert!(
        log_eps <= 0.0,
        "confidence_sequence: log_eps = {log_eps} must be <= 0"
    );
    if n == 0 {
        return (0.0, 1.0);
    }
    let estimate = successes as f64 / n as f64;
    let rejects = |p: f64| csm(n, p, successes, log_eps).stop;
    // Bisection between a rejected rate and an accepted one; returns the rejected end.
    let search = |mut rejected: f64, mut accepted: f64| {
        for _ in 0..200 {
            let mid = 0.5 * (rejected + accepted);
            if mid <= 0.0 || mid >= 1.0 || mid == rejected || mid == accepted {
                break;
            }
            if (accepted - rejected).abs() <= 1e-12 * accepted.abs().max(rejected.abs()) {
                break;
            }
            if rejects(mid) {
                rejected = mid;
            } else {
                accepted = mid;
            }
        }
        rejected
    };
    // At the estimate the likelihood is at its maximum, which is at least 1/(n+1) of the total:
    // the level is >= 0 >= ln ε, so the estimate itself is never rejected.
    let lower = if successes == 0 {
        0.0
    } else {
        search(0.0, estimate)
    };
    let upper = if successes == n {
        1.0
    } else {
        search(1.0, estimate)
    };
    (lower, upper)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::round::{ln_1p_down, sum_down};

    /// ln √(2π) = 0.91893853320467274178032973640561763986139747363778…
    /// The constant must be the double just above −ln √(2π), i.e. with m = 8277062471433908,
    /// m / 2^53 < ln √(2π) < (m + 1) / 2^53. With D = the first 22 decimals (D / 10^22 <= ln √(2π)
    /// < (D + 1) / 10^22) both inequalities follow from integer comparisons that fit in u128.
    #[test]
    fn minus_ln_sqrt_2pi_is_the_double_just_above() {
        let m: u128 = 8277062471433908;
        assert_eq!(MINUS_LN_SQRT_2PI_UP, -(m as f64) * 2f64.powi(-53));
        let d: u128 = 9189385332046727417803;
        let two53: u128 = 1 << 53;
        let ten22: u128 = 10u128.pow(22);
        assert!(
            m * ten22 < d * two53,
            "m / 2^53 < D / 10^22 <= ln sqrt(2 pi)"
        );
        assert!(
            (d + 1) * two53 < (m + 1) * ten22,
            "ln sqrt(2 pi) < (D+1) / 10^22 < (m+1) / 2^53"
        );
    }

    /// Exact binomial coefficients for small n, as u128.
    fn choose_exact(n: u64, k: u64) -> u128 {
        let k = k.min(n - k);
        let mut c: u128 = 1;
        for i in 0..k {
            c = c * (n - i) as u128 / (i + 1) as u128;
        }
        c
    }

    /// An upper bound on ln C(n, k) from the exact integer value: round C up to a double, then
    /// take ln rounded up.
    fn exact_log_choose_up(n: u64, k: u64) -> f64 {
        let c = choose_exact(n, k);
        let cf = c as f64; // round to nearest ...
        let cf = if (cf as u128) < c {
            crate::round::next_up(cf)
        } else {
            cf
        }; // ... then make it >= c
        crate::round::ln_up(cf)
    }

    #[test]
    fn log_choose_upper_dominates_exact_small_n() {
        // For n <= 120 the exact coefficient fits in u128; compare against an *upper* bound of its
        // logarithm, so that `ours >= that >= exact` proves `ours >= exact`.
        for n in 0..=120u64 {
            for k in 0..=n {
                let ours = log_choose_upper(n, k);
                let exact_up = exact_log_choose_up(n, k);
                if k == 0 || k == n {
                    assert_eq!(ours, 0.0);
                    continue;
                }
                assert!(
                    ours >= exact_up,
                    "log_choose_upper({n}, {k}) = {ours} < exact bound {exact_up}"
                );
                // And it is tight: Robbins' slack is tiny.
                assert!(
                    ours - exact_up < 0.02,
                    "({n}, {k}): slack {}",
                    ours - exact_up
                );
            }
        }
    }

    #[test]
    fn log_choose_upper_dominates_summed_logs_large_n() {
        // ln C(n, k) = Σ_{i=1..k} [ln(n-k+i) − ln i]. Rounding each log up (or down for the
        // subtracted ones) and summing upwards gives an upper bound on the exact value.
        let grid = [200u64, 333, 1000, 4000, 10_007];
        for &n in &grid {
            let mut ks: Vec<u64> = vec![2, 3, 7, n / 10, n / 3, n / 2, n - n / 3, n - 2];
            ks.sort_unstable();
            ks.dedup();
            for &k in &ks {
                let mut terms = Vec::with_capacity(2 * k as usize);
                for i in 1..=k {
                    terms.push(ln_up((n - k + i) as f64));
                    terms.push(-ln_down(i as f64));
                }
                let exact_up = crate::round::sum_up(&terms);
                let ours = log_choose_upper(n, k);
                assert!(
                    ours >= exact_up,
                    "log_choose_upper({n}, {k}) = {ours} < {exact_up}"
                );
                assert!(
                    ours - exact_up < 5e-3,
                    "({n}, {k}) slack {}",
                    ours - exact_up
                );
            }
        }
    }

    #[test]
    fn log_choose_upper_reference_values() {
        assert_eq!(log_choose_upper(5, 5), 0.0);
        assert_eq!(log_choose_upper(1, 0), 0.0);
        assert!((log_choose_upper(10, 9).exp() - 10.0).abs() < 1e-10);
        assert_eq!(log_choose_upper(4, 2), 1.7944835223684492);
        assert_eq!(log_choose_upper(10000, 100), 556.7980123668373);
        assert_eq!(log_choose_upper(10000, 8000), 4999.416373646588);
    }

    #[test]
    fn csm_reproduces_the_seed() {
        // The CSM post: (csm 4000 0.98d0 3972 (log 0.001d0)) => T, -17.238559826956475
        let c = csm(4000, 0.98, 3972, 0.001f64.ln());
        assert!(c.stop);
        assert_eq!(c.log_level, -17.238559826956475);
    }

    #[test]
    fn csm_reference_values() {
        assert!(!csm(1, 0.5, 1, -1.0).stop);
        let c = csm(1, 0.5, 0, -1.0);
        assert!(!c.stop);
        assert!((c.log_level / 9.992007221626409e-16 - 1.0).abs() < 1e-10);
        assert!(!csm(100, 0.9, 98, 1e-5f64.ln()).stop);
        assert!(csm(100, 0.9, 98, 0.2f64.ln()).stop);
        assert!(!csm(1_000_000_000, 0.99, 990_000_000, -1e-2).stop);
        assert!(!csm(10000, 0.01, 50, 1e-9f64.ln()).stop);
        assert!(csm(10000, 0.01, 50, 1e-3f64.ln()).stop);
        let c = csm(10, 0.05, 1, -10.0);
        assert!(!c.stop && (c.log_level / 1.243108442750477 - 1.0).abs() < 1e-10);
        let c = csm(100000, 0.05, 100, -10.0);
        assert!(c.stop && (c.log_level / -4624.756745998 - 1.0).abs() < 1e-10);
        let c = csm(1_000_000, 0.99, 990_596, -10.0);
        assert!(!c.stop && (c.log_level / -9.977077184266818 - 1.0).abs() < 1e-10);
        let c = csm(1_000_000, 0.99, 990_597, -10.0);
        assert!(c.stop && (c.log_level / -10.039129993485403 - 1.0).abs() < 1e-10);
    }

    /// The computed log level must never be below the exact one. For small n a rigorous *lower*
    /// bound of the exact level follows from exact binomials and logs rounded down; ours must be
    /// at least that.
    #[test]
    fn csm_level_is_an_upper_bound() {
        for n in 1..=120u64 {
            for s in (0..=n).step_by(7) {
                for &alpha in &[0.01, 0.3, 0.5, 0.98] {
                    let ours = csm(n, alpha, s, -1.0).log_level;
                    // A *lower* bound on the exact level: if ours were below it, ours would be
                    // below the exact level, which is the one thing that must never happen.
                    let c = choose_exact(n, s) as f64;
                    let c = if (c as u128) > choose_exact(n, s) {
                        crate::round::next_down(c)
                    } else {
                        c
                    };
                    let terms = [
                        ln_down((n + 1) as f64),
                        ln_down(c),
                        crate::round::next_down(s as f64 * ln_down(alpha)),
                        crate::round::next_down((n - s) as f64 * ln_1p_down(-alpha)),
                    ];
                    let exact_down = sum_down(&terms);
                    assert!(
                        ours >= exact_down,
                        "csm({n}, {alpha}, {s}): {ours} < {exact_down}"
                    );
                }
            }
        }
    }

    /// The confidence sequence never excludes a rate that the CSM accepts, always contains the
    /// estimate, and covers the truth in simulation at least as often as promised.
    #[test]
    fn confidence_sequence_is_the_set_of_accepted_rates() {
        let log_eps = 1e-3f64.ln();
        for &(n, s) in &[
            (10u64, 0u64),
            (10, 10),
            (100, 37),
            (4000, 3972),
            (1, 1),
            (1000, 999),
        ] {
            let (lo, hi) = confidence_sequence(n, s, log_eps);
            let p = s as f64 / n as f64;
            assert!(lo <= p && p <= hi, "{s}/{n}: [{lo}, {hi}]");
            if lo > 0.0 {
                assert!(
                    csm(n, lo, s, log_eps).stop,
                    "the lower end is a rejected rate"
                );
            }
            if hi < 1.0 {
                assert!(
                    csm(n, hi, s, log_eps).stop,
                    "the upper end is a rejected rate"
                );
            }
            // Just inside the ends, rates are accepted (the interval is not needlessly wide).
            let inside_lo = lo + (p - lo) * 1e-6;
            if lo > 0.0 && inside_lo > 0.0 {
                assert!(!csm(n, inside_lo + (p - lo) * 1e-3, s, log_eps).stop);
            }
        }
        assert_eq!(confidence_sequence(0, 0, -1.0), (0.0, 1.0));
    }
}
