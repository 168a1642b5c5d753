//! Confidence intervals for a quantile from order statistics, valid under sequential peeking.
//!
//! Sort `n` i.i.d. samples: `x_(1) <= … <= x_(n)` (ranks are 1-based). Let `V` be the true
//! q-quantile, so that `P(X < V) <= q <= P(X <= V)`.
//!
//! * **Lower end.** If `V < x_(r)`, at most `r − 1` samples are `<= V`, although each sample is
//!   `<= V` with probability at least `q`. Seeing so few "successes" is what the CSM calls a
//!   rejection of rate `q` from below. So take the largest `k` for which `csm(n, q, k)` rejects
//!   (with `k < qn`): `V < x_(k+1)` would imply that the CSM rejected the true rate, which happens
//!   with probability at most ε/2. Lower rank: `k + 1`.
//! * **Upper end.** If `V > x_(r)`, at least `r` samples are `< V`, each with probability at most
//!   `q`. Take the smallest `k > qn` for which `csm(n, q, k)` rejects from above: `V > x_(k)`
//!   would be such a rejection. Upper rank: `k`.
//!
//! Rejection is monotone in the count on each side of `qn`, so both ends are binary searches.
//! Because the CSM bounds the false-positive rate over *all* `n` at once, these intervals stay
//! valid when they are recomputed after every new sample and the experiment stops whenever it
//! likes — the property a benchmark harness needs. Each end gets ε/2 (`ln ε + ln ½`, rounded
//! down).

use crate::csm::csm;

/// `−ln 2` rounded towards −∞ (the double just below it).
const MINUS_LN_2_DOWN: f64 = -0.6931471805599454;

/// 1-based ranks of the order statistics bounding a quantile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuantileRanks {
    /// Rank of the point estimate: `ceil(q n)`, clamped to `[1, n]`.
    pub estimate: u64,
    /// The quantile is at least the sample of this rank (None: too few samples to say).
    pub lower: Option<u64>,
    /// The quantile is at most the sample of this rank (None: too few samples to say).
    pub upper: Option<u64>,
}

/// Ranks of the order statistics that bound the `q`-quantile of `n` samples, each end missing
/// with probability at most `exp(log_eps) / 2`.
///
/// # Panics
/// If `q` is not in [0, 1], `n` is 0, or `log_eps > 0`.
pub fn quantile_bounds(n: u64, q: f64, log_eps: f64) -> QuantileRanks {
    assert!(
        (0.0..=1.0).contains(&q),
        "quantile_bounds: q = {q} must be in [0, 1]"
    );
    assert!(n > 0, "quantile_bounds: no samples");
    assert!(
        log_eps <= 0.0,
        "quantile_bounds: log_eps = {log_eps} must be <= 0"
    );
    let estimate = ((q * n as f64).ceil() as u64).clamp(1, n);
    let log_eps = log_eps + MINUS_LN_2_DOWN;
    // The 0-quantile (the bottom of the support) is certainly at most the smallest sample, but no
    // sample bounds it from below; symmetrically for the 1-quantile.
    let lower = if q == 0.0 {
        None
    } else if q == 1.0 {
        Some(n)
    } else {
        lower_rank(n, q, log_eps)
    };
    let upper = if q == 0.0 {
        Some(1)
    } else if q == 1.0 {
        None
    } else {
        upper_rank(n, q, log_eps)
    };
    QuantileRanks {
        estimate,
        lower,
        upper,
    }
}

fn lower_rank(n: u64, q: f64, log_eps: f64) -> Option<u64> {
    let (mut lo, mut hi) = (0u64, (n as f64 * q).floor() as u64);
    if lo >= hi || !csm(n, q, lo, log_eps).stop {
        return None;
    }
    // Invariant: the CSM rejects at `lo` and does not at `hi`.
    while lo + 1 < hi {
        let mid = lo + (hi - lo) / 2;
        if csm(n, q, mid, log_eps).stop {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(lo + 1)
}

fn upper_rank(n: u64, q: f64, log_eps: f64) -> Option<u64> {
    let (mut lo, mut hi) = ((n as f64 * q).ceil() as u64, n);
    if lo >= hi || !csm(n, q, hi, log_eps).stop {
        return None;
    }
    // Invariant: the CSM does not reject at `lo` and rejects at `hi`.
    while lo + 1 < hi {
        let mid = lo + (hi - lo) / 2;
        if csm(n, q, mid, log_eps).stop {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Some(hi)
}

/// A quantile estimate with its confidence interval, read from samples.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QuantileInterval {
    /// The point estimate (the sample of rank `ceil(q n)`).
    pub estimate: f64,
    /// Lower end, if there are enough samples.
    pub lower: Option<f64>,
    /// Upper end, if there are enough samples.
    pub upper: Option<f64>,
}

/// The `q`-quantile of `samples` (sorted here by IEEE total order, so NaNs land at the ends)
/// with its interval.
/// Returns None for an empty slice.
pub fn quantile_interval(samples: &[f64], q: f64, log_eps: f64) -> Option<QuantileInterval> {
    if samples.is_empty() {
        return None;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(|a, b| a.total_cmp(b));
    let ranks = quantile_bounds(sorted.len() as u64, q, log_eps);
    let at = |rank: u64| sorted[(rank - 1) as usize];
    Some(QuantileInterval {
        estimate: at(ranks.estimate),
        lower: ranks.lower.map(at),
        upper: ranks.upper.map(at),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minus_ln_2_down_is_the_double_just_below() {
        // ln 2 = 0.693147180559945309417232121458176568…; with m = 6243314768165360,
        // (m − 1) / 2^53 < ln 2 < m / 2^53, checked with 22 decimals in u128.
        let m: u128 = 6243314768165360;
        assert_eq!(MINUS_LN_2_DOWN, -(m as f64) * 2f64.powi(-53));
        let d: u128 = 6931471805599453094172; // floor(ln 2 * 10^22)
        let (two53, ten22) = (1u128 << 53, 10u128.pow(22));
        assert!((d + 1) * two53 < m * ten22, "ln 2 < m / 2^53");
        assert!((m - 1) * ten22 < d * two53, "(m - 1) / 2^53 < ln 2");
    }

    /// log P(Binomial(n, q) = j), accurate to ~1e-13 relative for the sizes used here.
    fn log_binom_pmf(n: u64, q: f64, j: u64) -> f64 {
        let mut log_c = 0.0;
        for i in 0..j {
            log_c += ((n - i) as f64).ln() - ((i + 1) as f64).ln();
        }
        log_c + j as f64 * q.ln() + (n - j) as f64 * (-q).ln_1p()
    }

    /// For a continuous distribution, the number of samples <= V is Binomial(n, q). The lower end
    /// misses (V < x_(r)) exactly when that count is <= r − 1, and the upper end misses
    /// (V > x_(r)) exactly when the count of samples < V is >= r. Both probabilities must be at
    /// most ε/2 — for every fixed n, a consequence of the sequential guarantee that we can check
    /// exactly.
    #[test]
    fn ends_miss_with_probability_at_most_half_eps() {
        for &n in &[20u64, 50, 100, 333, 1000] {
            for &q in &[0.1, 0.5, 0.9, 0.99] {
                for &eps in &[0.05, 1e-3] {
                    let ranks = quantile_bounds(n, q, f64::ln(eps));
                    if let Some(r) = ranks.lower {
                        let miss: f64 = (0..r).map(|j| log_binom_pmf(n, q, j).exp()).sum();
                        assert!(
                            miss <= eps / 2.0 * (1.0 + 1e-9),
                            "n={n} q={q}: lower miss {miss}"
                        );
                    }
                    if let Some(r) = ranks.upper {
                        let miss: f64 = (r..=n).map(|j| log_binom_pmf(n, q, j).exp()).sum();
                        assert!(
                            miss <= eps / 2.0 * (1.0 + 1e-9),
                            "n={n} q={q}: upper miss {miss}"
                        );
                    }
                    if let (Some(lo), Some(hi)) = (ranks.lower, ranks.upper) {
                        assert!(lo <= ranks.estimate && ranks.estimate <= hi);
                    }
                }
            }
        }
    }

    #[test]
    fn medians_of_large_samples_have_useful_intervals() {
        let r = quantile_bounds(1000, 0.5, f64::ln(1e-3));
        assert_eq!(r.estimate, 500);
        let (lo, hi) = (r.lower.unwrap(), r.upper.unwrap());
        assert!(
            (400..500).contains(&lo) && (501..600).contains(&hi),
            "{r:?}"
        );
        // Too few samples for a p99 interval.
        let r = quantile_bounds(10, 0.99, f64::ln(1e-3));
        assert_eq!(r.upper, None);
        assert_eq!(r.estimate, 10);
    }

    #[test]
    fn extreme_quantiles_are_bounded_on_one_side_only() {
        // The minimum of the distribution is at most the smallest sample, and nothing in the
        // sample bounds it from below (for a continuous distribution it is below x_(1) surely).
        let r = quantile_bounds(7, 0.0, -3.0);
        assert_eq!((r.estimate, r.lower, r.upper), (1, None, Some(1)));
        let r = quantile_bounds(7, 1.0, -3.0);
        assert_eq!((r.estimate, r.lower, r.upper), (7, Some(7), None));
    }

    #[test]
    fn interval_from_samples() {
        let samples: Vec<f64> = (1..=1000).rev().map(|x| x as f64).collect();
        let qi = quantile_interval(&samples, 0.5, f64::ln(1e-3)).unwrap();
        assert_eq!(qi.estimate, 500.0);
        assert!(qi.lower.unwrap() < 500.0 && qi.upper.unwrap() > 500.0);
        assert_eq!(quantile_interval(&[], 0.5, -1.0), None);
    }
}
