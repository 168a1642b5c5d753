//! Directed rounding without touching the FPU's rounding mode.
//!
//! Every statistic in this crate must err on the safe side: a bound that we claim is an upper
//! bound has to be at least the exact real value, or a false positive could come from rounding
//! rather than from the data. Changing the hardware rounding mode is slow and badly supported, so
//! we use a cheaper fact instead: IEEE 754 rounds `+ - * /` to the nearest double, so the exact
//! result of one operation lies between the rounded result and its neighbour on one side. Moving
//! the rounded result one step (one ULP) in the safe direction therefore bounds the exact value.
//! Library functions (`ln`, `ln_1p`, `exp`) are not correctly rounded; glibc documents errors of
//! at most a few ULPs for them, so we step [`LIBM_ERROR_ULPS`] instead of one.
//!
//! Stepping is done on the bit pattern. An IEEE double is sign-magnitude; we map it to a two's
//! complement integer whose order is the order of the doubles, add or subtract, and map back:
//!
//! ```text
//!   bits(x) >= 0 (sign clear):  key = bits           (+0.0 -> 0, 1.0 -> 0x3ff0...)
//!   bits(x) <  0 (sign set):    key = bits ^ 0x7fff… (-0.0 -> -1, -1.0 -> -0x3ff0...-1)
//! ```
//!
//! `-0.0` and `+0.0` become the adjacent keys -1 and 0, so the step after `-0.0` is `+0.0` and
//! the step after `+0.0` is the smallest subnormal. NaN and infinities are out of scope: every
//! caller works with finite values.

/// Assumed bound on the error of the platform's `ln`, `ln_1p` and `exp`, in ULPs. glibc claims at
/// most 3 ULPs for these; one more is our margin.
pub const LIBM_ERROR_ULPS: u64 = 4;

const MAGNITUDE: u64 = 0x7fff_ffff_ffff_ffff;

/// Order-preserving map from a double to a signed integer key.
#[inline]
fn key(x: f64) -> i64 {
    let bits = x.to_bits() as i64;
    // Arithmetic shift: all ones when the sign bit is set, else zero.
    let sign = bits >> 63;
    bits ^ (sign as u64 & MAGNITUDE) as i64
}

/// Inverse of [`key`].
#[inline]
fn unkey(k: i64) -> f64 {
    let sign = k >> 63;
    f64::from_bits((k ^ (sign as u64 & MAGNITUDE) as i64) as u64)
}

/// The double `steps` representable values above `x` (`x` finite).
#[inline]
pub fn step_up(x: f64, steps: u64) -> f64 {
    unkey(key(x).wrapping_add(steps as i64))
}

/// The double `steps` representable values below `x` (`x` finite).
#[inline]
pub fn step_down(x: f64, steps: u64) -> f64 {
    unkey(key(x).wrapping_sub(steps as i64))
}

/// The next double above `x`: an upper bound for the exact result of the one correctly rounded
/// operation that produced `x`.
#[inline]
pub fn next_up(x: f64) -> f64 {
    step_up(x, 1)
}

/// The next double below `x`: a lower bound for the exact result of the one correctly rounded
/// operation that produced `x`.
#[inline]
pub fn next_down(x: f64) -> f64 {
    step_down(x, 1)
}

/// Upper bound on the natural logarithm of `x > 0`.
#[inline]
pub fn ln_up(x: f64) -> f64 {
    step_up(x.ln(), LIBM_ERROR_ULPS)
}

/// Lower bound on the natural logarithm of `x > 0`.
#[inline]
pub fn ln_down(x: f64) -> f64 {
    step_down(x.ln(), LIBM_ERROR_ULPS)
}

/// Upper bound on `ln(1 + x)` for `x > -1`; accurate when `x` is tiny, unlike `ln_up(1.0 + x)`.
#[inline]
pub fn ln_1p_up(x: f64) -> f64 {
    step_up(x.ln_1p(), LIBM_ERROR_ULPS)
}

/// Lower bound on `ln(1 + x)` for `x > -1`.
#[inline]
pub fn ln_1p_down(x: f64) -> f64 {
    step_down(x.ln_1p(), LIBM_ERROR_ULPS)
}

/// Upper bound on `e^x`.
#[inline]
pub fn exp_up(x: f64) -> f64 {
    step_up(x.exp(), LIBM_ERROR_ULPS)
}

/// Error-free sum of two doubles (Knuth's TwoSum): `hi + lo == a + b` exactly, with
/// `hi = fl(a + b)`. Unlike Dekker's FastTwoSum it needs no ordering between `|a|` and `|b|`; when
/// FastTwoSum's precondition does hold, both return the same two doubles.
#[inline]
fn two_sum(a: f64, b: f64) -> (f64, f64) {
    let hi = a + b;
    let a_part = hi - b;
    let b_part = hi - a_part;
    let lo = (a - a_part) + (b - b_part);
    (hi, lo)
}

/// Compensated (Kahan–Shewchuk) summation whose result is never below the exact sum.
///
/// The state is an unevaluated pair `acc + err`. Invariant: `acc + err`, computed exactly, is at
/// least the exact sum of every term added so far. Adding a term `t`:
///
/// 1. Let `(a, b)` be `(acc, t)`, or `(t, acc)` when `|t| > |acc|`, so that `b` is the small
///    part that the compensation `err` is folded into.
/// 2. `b' = next_up(b + err)` bounds `b + err` from above (one rounded addition, one step up).
///    When `err <= 0`, `b` itself is a bound and may be tighter, so `b' = min(b, next_up(b + err))`.
///    This is the only place where the sum can lose information, and it loses it upwards.
/// 3. `(acc, err) = TwoSum(a, b')` is exact: `acc + err == a + b' >= old acc + old err + t`.
///
/// [`UpSum::finish`] rounds the pair to one double the same way: `next_up(acc + err)`, or `acc`
/// itself when `err <= 0`.
#[derive(Clone, Copy, Debug, Default)]
pub struct UpSum {
    acc: f64,
    err: f64,
}

impl UpSum {
    /// An empty sum (zero).
    pub fn new() -> Self {
        Self::default()
    }

    /// A sum that starts at `x` (exactly).
    pub fn starting_at(x: f64) -> Self {
        Self { acc: x, err: 0.0 }
    }

    /// Adds `term`, choosing which of `acc` and `term` absorbs the compensation by magnitude.
    #[inline]
    pub fn add(&mut self, term: f64) {
        if self.acc.abs() >= term.abs() {
            self.fold(self.acc, term);
        } else {
            self.fold(term, self.acc);
        }
    }

    /// Adds `term`, assuming without checking that it is no larger in magnitude than the running
    /// sum (a decreasing series). The bound stays valid either way; only tightness depends on it.
    #[inline]
    pub fn add_ordered(&mut self, term: f64) {
        self.fold(self.acc, term);
    }

    #[inline]
    fn fold(&mut self, big: f64, small: f64) {
        let shifted = next_up(small + self.err);
        let small = if self.err <= 0.0 {
            small.min(shifted)
        } else {
            shifted
        };
        let (acc, err) = two_sum(big, small);
        self.acc = acc;
        self.err = err;
    }

    /// The leading part of the running sum (the compensation is below one ULP of it).
    pub fn leading(&self) -> f64 {
        self.acc
    }

    /// The compensation term.
    pub fn compensation(&self) -> f64 {
        self.err
    }

    /// One double that is at least the exact sum.
    pub fn finish(&self) -> f64 {
        let rounded = next_up(self.acc + self.err);
        if self.err > 0.0 {
            rounded
        } else {
            self.acc.min(rounded)
        }
    }
}

/// A double at least the exact sum of `terms`.
pub fn sum_up(terms: &[f64]) -> f64 {
    let mut sum = UpSum::new();
    for &t in terms {
        sum.add(t);
    }
    sum.finish()
}

/// A double at most the exact sum of `terms` (the mirror image of [`sum_up`]).
pub fn sum_down(terms: &[f64]) -> f64 {
    let mut sum = UpSum::new();
    for &t in terms {
        sum.add(-t);
    }
    -sum.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_order_doubles_and_keep_signed_zeros_apart() {
        assert_eq!(key(0.0), 0);
        assert_eq!(key(-0.0), -1);
        assert_eq!(key(1.0), 4607182418800017408);
        assert_eq!(key(-2.5), -4612811918334230529);
        assert_eq!(key(-std::f64::consts::PI), -key(std::f64::consts::PI) - 1);
        let xs = [
            -1e300, -3.5, -1.0, -1e-300, -5e-324, -0.0, 0.0, 5e-324, 1e-300, 1.0, 2.0, 1e300,
        ];
        for w in xs.windows(2) {
            assert!(key(w[0]) < key(w[1]), "{} < {}", w[0], w[1]);
        }
        for &x in &xs {
            assert_eq!(unkey(key(x)).to_bits(), x.to_bits());
        }
    }

    #[test]
    fn steps_move_one_representable_value() {
        assert_eq!(next_up(1.0), 1.0000000000000002);
        assert_eq!(next_down(1.0), 0.9999999999999999);
        assert_eq!(next_up(-1.0), -0.9999999999999999);
        assert_eq!(next_down(-1.0), -1.0000000000000002);
        assert_eq!(next_up(0.0), 5e-324);
        assert_eq!(next_down(-0.0), -5e-324);
        // -0.0 and +0.0 are neighbours.
        assert!(next_up(-0.0) == 0.0 && next_up(-0.0).is_sign_positive());
        assert!(next_down(0.0) == 0.0 && next_down(0.0).is_sign_negative());
        assert_eq!(step_up(-0.0, 2), 5e-324);
        // Crossing a binade: the ULP halves below a power of two.
        assert_eq!(next_down(2.0), 2.0 - f64::EPSILON);
        assert_eq!(next_up(2.0 - f64::EPSILON), 2.0);
        for &x in &[0.1, -7.25, 1e-310, 123456.789] {
            assert!(next_up(x) > x && next_down(x) < x);
            assert_eq!(next_down(next_up(x)), x);
            assert_eq!(step_up(x, 3), next_up(next_up(next_up(x))));
        }
    }

    /// A decimal string, truncated towards zero to units of 1e-30.
    fn scaled(decimal: &str) -> i128 {
        let (negative, digits) = match decimal.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, decimal),
        };
        let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
        let frac: String = frac
            .chars()
            .chain(std::iter::repeat('0'))
            .take(30)
            .collect();
        let value = int.parse::<i128>().unwrap() * 10i128.pow(30) + frac.parse::<i128>().unwrap();
        if negative {
            -value
        } else {
            value
        }
    }

    /// A double's value in units of 1e-30 (its decimal expansion, printed to 34 places).
    fn scaled_double(x: f64) -> i128 {
        scaled(&format!("{x:.34}"))
    }

    /// The directed logarithms must bracket the *true* logarithm, not just libm's answer: this
    /// tests the "libm is off by fewer than 4 ULPs" assumption at a few points. The references are
    /// ln of the exact binary value of each double, to 34 decimals (computed with 60-digit decimal
    /// arithmetic); differences of one ULP (~1e-16 relative) dwarf the 1e-30 resolution.
    #[test]
    fn directed_logs_bracket_the_true_value() {
        let ln_table = [
            (2.0, "0.6931471805599453094172321214581766"),
            (3.0, "1.0986122886681096913952452369225257"),
            (10.0, "2.3025850929940456840179914546843642"),
            (0.1, "-2.3025850929940456285068402234265387"),
            (0.98, "-0.0202027073175194665341354989859320"),
            (4001.0, "8.2942996088572350278545437589160135"),
            (1e-10, "-23.0258509299404568037477172313459012"),
            (1e15, "34.5387763949106852602698718202654631"),
            (0.5, "-0.6931471805599453094172321214581766"),
        ];
        for (x, truth) in ln_table {
            let t = scaled(truth);
            assert!(scaled_double(ln_down(x)) < t, "ln_down({x})");
            assert!(scaled_double(ln_up(x)) > t, "ln_up({x})");
        }
        let ln_1p_table = [
            (-0.98, "-3.9120230054281451704403310877857139"),
            (-0.02, "-0.0202027073175194488328755400389207"),
            (1e-4, "0.0000999950003333083401248611138938"),
            (-0.5, "-0.6931471805599453094172321214581766"),
            (0.3, "0.2623642644674910434953188743797502"),
        ];
        for (x, truth) in ln_1p_table {
            let t = scaled(truth);
            assert!(scaled_double(ln_1p_down(x)) < t, "ln_1p_down({x})");
            assert!(scaled_double(ln_1p_up(x)) > t, "ln_1p_up({x})");
        }
        // ln 1 = 0 exactly: the bounds straddle zero by a few subnormal steps.
        assert!(ln_up(1.0) > 0.0 && ln_up(1.0) < 1e-300);
        assert!(ln_down(1.0) < 0.0 && ln_down(1.0) > -1e-300);
    }

    /// TwoSum's pair must add up to a + b *exactly*, in either argument order. With dyadic
    /// inputs (integer mantissa times a power of two, exponents in [-60, 20]) the exact sum is an
    /// integer in units of 2^-60, which i128 holds; each double of the pair converts exactly too.
    #[test]
    fn two_sum_is_exact_in_both_orders() {
        let units = |x: f64| -> i128 {
            let scaled = x * 2f64.powi(60);
            assert_eq!(scaled.fract(), 0.0, "{x} is not a multiple of 2^-60");
            scaled as i128
        };
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut inexact_sums = 0;
        for _ in 0..10_000 {
            let mut value = || {
                let mantissa = (next() % (1 << 53)) as i64 - (1 << 52);
                mantissa as f64 * 2f64.powi((next() % 29) as i32 - 60)
            };
            let (a, b) = (value(), value());
            for (p, q) in [(a, b), (b, a)] {
                let (hi, lo) = two_sum(p, q);
                assert_eq!(hi, p + q);
                assert_eq!(units(hi) + units(lo), units(p) + units(q), "{p} + {q}");
            }
            if two_sum(a, b).1 != 0.0 {
                inexact_sums += 1;
            }
        }
        // The test is only meaningful if many sums did round.
        assert!(inexact_sums > 1000, "{inexact_sums}");
    }

    #[test]
    fn up_sum_never_goes_below_exact_sums_of_dyadic_values() {
        // Dyadic rationals with small exponents sum exactly in i128 fixed point, which gives us
        // the exact reference to compare against.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut rand = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..2000 {
            let mut exact: i128 = 0; // in units of 2^-64
            let mut terms = Vec::new();
            for _ in 0..(rand() % 12 + 1) {
                // value = mantissa * 2^exp, |mantissa| < 2^31, exp in [-64, 20]: exponents span
                // far more than 53 bits, so the double sums round, but i128 stays exact.
                let mantissa = (rand() % (1 << 32)) as i64 - (1 << 31);
                let exp = (rand() % 85) as i32 - 64;
                let x = mantissa as f64 * 2f64.powi(exp);
                terms.push(x);
                exact += (mantissa as i128) << (exp + 64);
            }
            let up = sum_up(&terms);
            let down = sum_down(&terms);
            assert!(
                scaled_floor(up) >= exact,
                "upper sum {up} below the exact sum of {terms:?}"
            );
            assert!(
                scaled_ceil(down) <= exact,
                "lower sum {down} above the exact sum of {terms:?}"
            );
        }
    }

    // For an integer v: x * 2^64 >= v  <=>  floor(x * 2^64) >= v, and the scaling and the floor
    // are exact in f64 (the sums stay far below 2^126, so the i128 conversion is exact too).
    fn scaled_floor(x: f64) -> i128 {
        (x * 2f64.powi(64)).floor() as i128
    }

    fn scaled_ceil(x: f64) -> i128 {
        (x * 2f64.powi(64)).ceil() as i128
    }

    #[test]
    fn up_sum_examples() {
        assert_eq!(sum_up(&[1.0, -2.0, 3.0, -4.0]), -2.0);
        // Plain summation loses the 2.5 entirely (1e16 + 2.5 rounds, then cancels).
        assert_eq!(sum_up(&[2.5, 1e16, -1e16]), 4.0);
        assert!(sum_down(&[2.5, 1e16, -1e16]) <= 2.5);
        assert_eq!(sum_up(&[1.0, 0.5, 0.25, 0.125]), 1.875);
        let mut s = UpSum::starting_at(3.0);
        s.add(std::f64::consts::PI);
        assert!(s.finish() >= 6.141592653589793);
    }
}
