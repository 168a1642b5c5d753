//! Parsing and printing of durations and probabilities for the command line.

use std::time::Duration;

/// Parses `1.5s`, `50ms`, `250us` (or `250µs`), `100ns`, `2m`, `1h`. A bare number is refused:
/// `--under 5` could mean 5 s or 5 ms, and guessing wrong silently is worse than asking.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    // The unit is the trailing run of letters (so that the 'e' of "1e-3s" stays in the number).
    let unit_start = t
        .char_indices()
        .rev()
        .take_while(|(_, c)| c.is_alphabetic())
        .last()
        .map(|(i, _)| i)
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(unit_start);
    let value: f64 = number.trim().parse().map_err(|_| {
        format!("cannot parse duration '{text}': expected a number followed by ns, us, ms, s, m or h (e.g. 50ms)")
    })?;
    // Before the unit check, so that "-5" is not told to become "-5s".
    if value < 0.0 {
        return Err(format!(
            "duration '{text}' is negative: durations must be positive (e.g. 50ms)"
        ));
    }
    let scale = match unit.trim() {
        "ns" => 1e-9,
        "us" | "µs" | "μs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        "" => {
            return Err(format!(
                "duration '{text}' has no unit: write {t}s or {t}ms (units: ns, us, ms, s, m, h)"
            ))
        }
        "m" | "min" => 60.0,
        "h" => 3600.0,
        other => {
            return Err(format!(
                "cannot parse duration '{text}': unknown unit '{other}' (use ns, us, ms, s, m or h)"
            ))
        }
    };
    let seconds = value * scale;
    if !seconds.is_finite() {
        return Err(format!("duration '{text}' must be a finite time"));
    }
    Duration::try_from_secs_f64(seconds).map_err(|_| format!("duration '{text}' is too long"))
}

/// [`parse_duration`] for limits that must be longer than zero (`--under`, `--timeout`,
/// `--max-time`): a zero limit would fail every run, or stop before the first.
pub fn parse_positive_duration(text: &str) -> Result<Duration, String> {
    let d = parse_duration(text)?;
    if d.is_zero() {
        return Err(format!(
            "duration '{text}' must be longer than zero: durations must be positive"
        ));
    }
    Ok(d)
}

/// A count such as `--max-runs 100`: a whole number of at least `min`. Clap's own message for
/// `-1` ("invalid digit found in string") does not say what is wanted.
pub fn parse_count(text: &str, min: u64) -> Result<u64, String> {
    let t = text.trim();
    let wanted = if min == 0 {
        "a whole number, 0 or more".to_string()
    } else {
        format!("a whole number, at least {min}")
    };
    match t.parse::<u64>() {
        Ok(n) if n >= min => Ok(n),
        Ok(_) => Err(format!("expected {wanted}")),
        Err(_) if t.starts_with('-') => {
            Err(format!("a count cannot be negative: expected {wanted}"))
        }
        Err(e) if *e.kind() == std::num::IntErrorKind::PosOverflow => {
            Err("too large: a count must be below 2^64".to_string())
        }
        Err(_) => Err(format!("expected {wanted}")),
    }
}

/// `1 pair`, `2 pairs`, `0 pairs`.
pub fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// A computed value for people: four significant digits, trailing zeros dropped (`0.8333`,
/// `0.993`, `1.5e-7`), so that no binary-to-decimal noise such as `0.8333333333333334` reaches
/// the terminal. JSON keeps every digit.
pub fn format_value(x: f64) -> String {
    const DIGITS: i32 = 4;
    if x == 0.0 || !x.is_finite() {
        return format!("{}", if x == 0.0 { 0.0 } else { x });
    }
    let magnitude = x.abs().log10().floor() as i32;
    if (-4..15).contains(&magnitude) {
        let decimals = (DIGITS - 1 - magnitude).max(0) as usize;
        trim_fraction(&format!("{x:.decimals$}"))
    } else {
        let text = format!("{x:.prec$e}", prec = (DIGITS - 1) as usize);
        match text.split_once('e') {
            Some((mantissa, exponent)) => format!("{}e{exponent}", trim_fraction(mantissa)),
            None => text,
        }
    }
}

/// `1.2500` → `1.25`, `2.000` → `2`; integers are left alone.
fn trim_fraction(text: &str) -> String {
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text.to_string()
    }
}

/// A percentage: `5%` or `5` (both 5%), `2.5%`, `0`. Returns the fraction (0.05).
pub fn parse_percent(name: &str, text: &str) -> Result<f64, String> {
    let t = text.trim();
    let number = t.strip_suffix('%').unwrap_or(t).trim();
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{name} must be a percentage such as 5% or 2.5, not '{text}'"))?;
    if !(0.0..=1000.0).contains(&value) {
        return Err(format!("{name} = {text} is outside [0%, 1000%]"));
    }
    Ok(value / 100.0)
}

/// Shortens what we echo of a user's input in an error message (a 100 MB line must not come
/// back on the terminal): at most `max` characters, with an ellipsis and the full length.
pub fn excerpt(text: &str, max: usize) -> String {
    let count = text.chars().count();
    if count <= max {
        text.to_string()
    } else {
        let head: String = text.chars().take(max).collect();
        format!("{head}… ({count} characters)")
    }
}

/// `1.23 ms`, `45.6 µs`, `2.00 s`: three significant digits, the unit chosen to fit.
pub fn format_seconds(seconds: f64) -> String {
    let (value, unit) = if seconds >= 1.0 {
        (seconds, "s")
    } else if seconds >= 1e-3 {
        (seconds * 1e3, "ms")
    } else if seconds >= 1e-6 {
        (seconds * 1e6, "µs")
    } else {
        (seconds * 1e9, "ns")
    };
    let decimals = if value >= 100.0 {
        0
    } else if value >= 10.0 {
        1
    } else {
        2
    };
    format!("{value:.decimals$} {unit}")
}

/// A percentage with enough digits to show how close to 100% (or 0%) it is: `50.00%`,
/// `99.9953%`, `0.0012%`; below 10⁻⁸ % (or that close to 100%) in scientific notation, so that
/// no digit is ever printed as a bare `0.`.
pub fn format_percent(p: f64) -> String {
    let pct = p * 100.0;
    if pct == 0.0 || pct == 100.0 || !pct.is_finite() {
        return format!("{pct:.2}%");
    }
    let distance = if pct > 50.0 { 100.0 - pct } else { pct };
    if distance < 1e-8 {
        return if pct > 50.0 {
            format!("100% − {distance:.1e}%")
        } else {
            format!("{pct:.1e}%")
        };
    }
    let digits = if distance < 1.0 {
        // Two significant digits of the distance to the nearer end.
        (-distance.log10()).floor() as usize + 2
    } else {
        2
    };
    let text = format!("{pct:.digits$}");
    let text = if digits > 2 {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    };
    format!("{text}%")
}

/// A small probability as people write it: `1e-6`, `0.001`, `0.05`.
pub fn format_probability(p: f64) -> String {
    if p != 0.0 && p.abs() < 1e-3 {
        format!("{p:e}")
    } else {
        format!("{p}")
    }
}

/// A probability argument in the open interval (lo, hi).
pub fn parse_open_unit(name: &str, text: &str, lo: f64, hi: f64) -> Result<f64, String> {
    let value: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{name} must be a number, not '{text}'"))?;
    if !(value > lo && value < hi) {
        return Err(format!("{name} = {text} is outside ({lo}, {hi})"));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("50ms").unwrap(), Duration::from_millis(50));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("250us").unwrap(), Duration::from_micros(250));
        assert_eq!(parse_duration("250µs").unwrap(), Duration::from_micros(250));
        assert_eq!(parse_duration("100ns").unwrap(), Duration::from_nanos(100));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1e-3s").unwrap(), Duration::from_millis(1));
        assert_eq!(parse_duration(" 3 ms ").unwrap(), Duration::from_millis(3));
    }

    #[test]
    fn bad_durations_say_why() {
        for bad in [
            "", "ms", "fast", "5 sec", "-1s", "1e400s", "nan", "5", "-0.5",
        ] {
            let err = parse_duration(bad).unwrap_err();
            assert!(err.contains(bad.trim()) || bad.is_empty(), "{bad}: {err}");
        }
    }

    #[test]
    fn negative_durations_are_refused_without_a_misleading_hint() {
        for bad in ["-5", "-5ms", "-1s", "-0s", "-0.5"] {
            let err = parse_positive_duration(bad).unwrap_err();
            assert!(err.contains("must be positive"), "{bad}: {err}");
            assert!(!err.contains("write -"), "{bad}: {err}");
        }
    }

    #[test]
    fn counts() {
        assert_eq!(parse_count("10", 1), Ok(10));
        assert_eq!(parse_count("0", 0), Ok(0));
        assert!(parse_count("0", 1).unwrap_err().contains("at least 1"));
        assert!(parse_count("-1", 1)
            .unwrap_err()
            .contains("cannot be negative"));
        assert!(parse_count("1.5", 1).unwrap_err().contains("whole number"));
        assert!(parse_count("99999999999999999999", 1)
            .unwrap_err()
            .contains("too large"));
        assert_eq!(count(1, "pair", "pairs"), "1 pair");
        assert_eq!(count(0, "pair", "pairs"), "0 pairs");
        assert_eq!(count(2, "success", "successes"), "2 successes");
    }

    #[test]
    fn values_are_rounded_for_people() {
        assert_eq!(format_value(0.8333333333333334), "0.8333");
        assert_eq!(format_value(0.993), "0.993");
        assert_eq!(format_value(1.0), "1");
        assert_eq!(format_value(-0.9999999999999982), "-1");
        assert_eq!(format_value(123456.0), "123456");
        assert_eq!(format_value(10.1), "10.1");
        assert_eq!(format_value(0.0033704), "0.00337");
        assert_eq!(format_value(1.5e-7), "1.5e-7");
        assert_eq!(format_value(2.2234953205868331e-7), "2.223e-7");
        assert_eq!(format_value(0.0), "0");
        assert_eq!(format_value(-0.0), "0");
        assert_eq!(format_value(f64::INFINITY), "inf");
    }

    #[test]
    fn bare_numbers_and_zero_limits_are_refused() {
        let err = parse_duration("5").unwrap_err();
        assert!(err.contains("5s or 5ms"), "{err}");
        assert!(parse_positive_duration("0ms")
            .unwrap_err()
            .contains("longer than zero"));
        assert!(parse_positive_duration("0s").is_err());
        assert_eq!(
            parse_positive_duration("1ms").unwrap(),
            Duration::from_millis(1)
        );
    }

    #[test]
    fn percentages() {
        assert_eq!(parse_percent("tolerance", "5%"), Ok(0.05));
        assert_eq!(parse_percent("tolerance", "5"), Ok(0.05));
        assert_eq!(parse_percent("tolerance", " 2.5 % "), Ok(0.025));
        assert_eq!(parse_percent("tolerance", "0"), Ok(0.0));
        assert!(parse_percent("tolerance", "-5%")
            .unwrap_err()
            .contains("outside"));
        assert!(parse_percent("tolerance", "five")
            .unwrap_err()
            .contains("percentage"));
    }

    #[test]
    fn excerpts_are_short() {
        assert_eq!(excerpt("abc", 10), "abc");
        let long = "x".repeat(1_000_000);
        let e = excerpt(&long, 40);
        assert!(e.len() < 80 && e.contains("1000000 characters"), "{e}");
    }

    #[test]
    fn formatting() {
        assert_eq!(format_seconds(0.001234), "1.23 ms");
        assert_eq!(format_seconds(2.0), "2.00 s");
        assert_eq!(format_seconds(45.6e-6), "45.6 µs");
        assert_eq!(format_seconds(120e-9), "120 ns");
        assert_eq!(format_percent(0.5), "50.00%");
        assert_eq!(format_percent(1.0), "100.00%");
        assert_eq!(format_percent(0.99995), "99.995%");
        assert_eq!(format_percent(0.9999995), "99.99995%");
        assert_eq!(format_percent(0.0000123), "0.0012%");
        assert_eq!(format_percent(0.95), "95.00%");
        assert_eq!(format_percent(0.0), "0.00%");
        // Tiny rates keep their digits (`stats power` printed "[0.%, …]").
        assert_eq!(format_percent(2.2234953e-7), "0.000022%");
        assert_eq!(format_percent(2.4752475e-12), "2.5e-10%");
        assert_eq!(format_percent(1.0 - 1e-12), "100% − 1.0e-10%");
        assert_eq!(format_percent(0.0075575), "0.76%");
        assert_eq!(format_probability(1e-6), "1e-6");
        assert_eq!(format_probability(0.001), "0.001");
    }

    #[test]
    fn open_unit_interval() {
        assert_eq!(parse_open_unit("rate", "0.99", 0.0, 1.0), Ok(0.99));
        assert!(parse_open_unit("rate", "1", 0.0, 1.0)
            .unwrap_err()
            .contains("outside"));
        assert!(parse_open_unit("rate", "x", 0.0, 1.0)
            .unwrap_err()
            .contains("number"));
        assert!(parse_open_unit("eps", "0.5", 0.0, 0.5).is_err());
    }
}
