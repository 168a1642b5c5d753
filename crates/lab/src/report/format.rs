//! Numbers for people: one display unit per column, three significant figures.

use crate::results::{Summary, Unit};

/// How a column shows its values: every cell is divided by `divisor` and followed by
/// `suffix`, so one column never mixes "16441 ns" and "14596 µs".
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scale {
    pub divisor: f64,
    pub suffix: &'static str,
}

impl Scale {
    /// The largest scale at which the column's typical value (the geometric mean of its
    /// positive values) reads as at least 1: a column of 300 ns to 10 ms reads in µs.
    pub fn for_values(unit: Unit, values: impl IntoIterator<Item = f64>) -> Scale {
        let logs: Vec<f64> = values
            .into_iter()
            .filter(|v| v.is_finite() && *v > 0.0)
            .map(f64::ln)
            .collect();
        let typical = if logs.is_empty() {
            f64::NAN
        } else {
            (logs.iter().sum::<f64>() / logs.len() as f64).exp()
        };
        let steps: &[(f64, &'static str)] = match unit {
            Unit::Nanoseconds => &[(1.0, "ns"), (1e3, "µs"), (1e6, "ms"), (1e9, "s")],
            Unit::PerSecond => &[(1.0, "/s"), (1e3, "k/s"), (1e6, "M/s"), (1e9, "G/s")],
            Unit::Ticks => &[(1.0, "ticks")],
            Unit::Count => &[(1.0, "")],
            Unit::Ratio => &[(1.0, "×")],
        };
        let mut pick = steps[0];
        for &s in steps {
            if typical.is_finite() && typical >= s.0 {
                pick = s;
            }
        }
        Scale {
            divisor: pick.0,
            suffix: pick.1,
        }
    }

    /// A value in this scale, without the suffix.
    pub fn num(&self, v: f64) -> String {
        num(v / self.divisor)
    }

    /// A value in this scale, with the suffix.
    pub fn with_unit(&self, v: f64) -> String {
        if self.suffix.is_empty() {
            self.num(v)
        } else if self.suffix.starts_with('/') || self.suffix == "×" {
            format!("{}{}", self.num(v), self.suffix)
        } else {
            format!("{} {}", self.num(v), self.suffix)
        }
    }

    /// "[lo, hi]" of a median's interval, or "–" without one.
    pub fn interval(&self, s: &Summary) -> String {
        match (s.median_lo, s.median_hi) {
            (Some(lo), Some(hi)) => format!("[{}, {}]", self.num(lo), self.num(hi)),
            _ => "–".into(),
        }
    }
}

/// The best single unit for a duration (given in ns), e.g. "2.85 ms".
pub fn duration_ns(v: f64) -> String {
    Scale::for_values(Unit::Nanoseconds, [v]).with_unit(v)
}

/// A bound or a setting as people write it: [`num`] without trailing zeros ("2", "1.25",
/// "0.833").
pub fn plain(v: f64) -> String {
    let s = num(v);
    if s.contains('.') && !s.contains('e') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Three significant figures, digit groups of three above 10 000, "–" for non-finite values.
pub fn num(v: f64) -> String {
    if !v.is_finite() {
        return "–".into();
    }
    let a = v.abs();
    let s = if a == 0.0 {
        "0".to_string()
    } else if a >= 100.0 {
        group(format!("{v:.0}"))
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else if a >= 0.01 {
        format!("{v:.3}")
    } else if a >= 1e-4 {
        // Two significant figures: 0.0079, 0.00012.
        let decimals = (-a.log10().floor()) as usize + 1;
        format!("{v:.decimals$}")
    } else {
        format!("{v:.2e}")
    };
    s
}

/// A ratio: "1.20 ×".
pub fn ratio(v: f64) -> String {
    if v.is_finite() {
        format!("{} ×", num(v))
    } else {
        "–".into()
    }
}

/// "12 345 678" (thin spaces would be prettier but do not align in terminals).
fn group(digits: String) -> String {
    let (sign, body) = match digits.strip_prefix('-') {
        Some(b) => ("-", b.to_string()),
        None => ("", digits),
    };
    if body.len() <= 4 {
        return format!("{sign}{body}");
    }
    let mut out = String::new();
    for (i, c) in body.chars().enumerate() {
        if i > 0 && (body.len() - i).is_multiple_of(3) {
            out.push(' ');
        }
        out.push(c);
    }
    format!("{sign}{out}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_numbers_drop_trailing_zeros() {
        assert_eq!(plain(2.0), "2");
        assert_eq!(plain(1.25), "1.25");
        assert_eq!(plain(1.0 / 1.2), "0.833");
        assert_eq!(plain(0.5), "0.5");
        assert_eq!(plain(1500.0), "1500");
    }

    #[test]
    fn numbers_keep_three_significant_figures() {
        assert_eq!(num(0.12345), "0.123");
        assert_eq!(num(1.2345), "1.23");
        assert_eq!(num(12.345), "12.3");
        assert_eq!(num(123.45), "123");
        assert_eq!(num(1234.4), "1234");
        assert_eq!(num(123456.0), "123 456");
        assert_eq!(num(-123456.0), "-123 456");
        assert_eq!(num(0.0012), "0.0012");
        assert_eq!(num(0.00794), "0.0079");
        assert_eq!(num(0.000012), "1.20e-5");
        assert_eq!(num(f64::NAN), "–");
        assert_eq!(num(0.0), "0");
    }

    #[test]
    fn one_unit_per_column() {
        // A column of wake latencies from 180 ns to 13 µs (typical 1.5 µs) is shown in µs.
        let s = Scale::for_values(Unit::Nanoseconds, [180.0, 13_000.0]);
        assert_eq!(s.suffix, "µs");
        assert_eq!(
            (s.with_unit(13_000.0).as_str(), s.num(180.0).as_str()),
            ("13.0 µs", "0.180")
        );
        // Barrier latencies of 300 ns, 2 µs and 11 ms: µs throughout.
        let s = Scale::for_values(Unit::Nanoseconds, [300.0, 2_100.0, 11.1e6]);
        assert_eq!((s.suffix, s.num(11.1e6).as_str()), ("µs", "11 100"));
        // Sub-nanosecond costs stay in ns.
        assert_eq!(
            Scale::for_values(Unit::Nanoseconds, [0.3, 5.0]).suffix,
            "ns"
        );
        assert_eq!(
            Scale::for_values(Unit::PerSecond, [4.4e8]).with_unit(4.4e8),
            "440 M/s"
        );
        assert_eq!(
            Scale::for_values(Unit::Count, [69.0]).with_unit(69.0),
            "69.0"
        );
        assert_eq!(duration_ns(2.85e6), "2.85 ms");
        // No finite value: the base unit.
        assert_eq!(
            Scale::for_values(Unit::Nanoseconds, [f64::NAN]).suffix,
            "ns"
        );
    }
}
