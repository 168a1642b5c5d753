//! Reading other tools' measurements: hyperfine's `--export-json`, criterion's `sample.json`,
//! or plain files of numbers.

use std::io::Read;
use std::path::Path;

use serde_json::Value;

use crate::exit::{usage, CliError, CliResult};
use crate::units::excerpt;

/// The unit of a sample's values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// Seconds (converted from the tool's own unit).
    Seconds,
    /// Whatever unit the plain file was written in.
    AsWritten,
}

/// Numbers read from one file, with where they came from.
#[derive(Clone, Debug)]
pub struct Samples {
    pub values: Vec<f64>,
    pub unit: Unit,
    /// `hyperfine: sleep 0.1`, `criterion sample.json`, `plain numbers`.
    pub source: String,
}

/// What values a caller accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accept {
    /// Times: finite and above zero.
    PositiveTimes,
    /// Any finite number.
    Finite,
}

/// Reads `spec`: a path, `-` for stdin, or `PATH#N` to pick the N-th result (1-based) of a
/// hyperfine export with several.
pub fn read(spec: &Path, accept: Accept) -> CliResult<Samples> {
    let (path, pick) = split_pick(spec);
    let text = if path == Path::new("-") {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .map_err(|e| input_error(path, &e))?;
        s
    } else {
        std::fs::read_to_string(path).map_err(|e| input_error(path, &e))?
    };
    let shown = path.display();
    let samples = if text.trim_start().starts_with('{') {
        let json: Value = serde_json::from_str(&text)
            .map_err(|e| usage(format!("{shown}: not valid JSON ({e})")))?;
        from_json(&json, pick).map_err(|why| usage(format!("{shown}: {why}")))?
    } else {
        if pick.is_some() {
            return Err(usage(format!(
                "{shown}: #N picks a result of a hyperfine export; this is not JSON"
            )));
        }
        Samples {
            values: plain(&text).map_err(|why| usage(format!("{shown}: {why}")))?,
            unit: Unit::AsWritten,
            source: "plain numbers".into(),
        }
    };
    if samples.values.is_empty() {
        return Err(usage(format!("{shown}: no numbers")));
    }
    for v in &samples.values {
        let ok = match accept {
            Accept::PositiveTimes => v.is_finite() && *v > 0.0,
            Accept::Finite => v.is_finite(),
        };
        if !ok {
            let what = match accept {
                Accept::PositiveTimes => "times must be finite and above zero",
                Accept::Finite => "values must be finite",
            };
            return Err(usage(format!("{shown}: {what}, found {v}")));
        }
    }
    Ok(samples)
}

fn input_error(path: &Path, e: &std::io::Error) -> CliError {
    match e.kind() {
        std::io::ErrorKind::InvalidData => {
            usage(format!("{}: not valid UTF-8 text", path.display()))
        }
        _ => usage(format!("cannot read {}: {e}", path.display())),
    }
}

/// `results.json#2` → (`results.json`, Some(2)), unless a file of that very name exists.
fn split_pick(spec: &Path) -> (&Path, Option<usize>) {
    let Some(text) = spec.to_str() else {
        return (spec, None);
    };
    if spec.exists() {
        return (spec, None);
    }
    match text.rsplit_once('#') {
        Some((path, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => {
            (Path::new(path), n.parse().ok())
        }
        _ => (spec, None),
    }
}

fn from_json(json: &Value, pick: Option<usize>) -> Result<Samples, String> {
    let numbers = |v: &Value, field: &str| -> Result<Vec<f64>, String> {
        v.get(field)
            .and_then(Value::as_array)
            .ok_or_else(|| format!("no \"{field}\" array"))?
            .iter()
            .map(|x| {
                x.as_f64().ok_or_else(|| {
                    format!(
                        "\"{field}\" holds {}, not a number",
                        excerpt(&x.to_string(), 40)
                    )
                })
            })
            .collect()
    };
    if let Some(results) = json.get("results").and_then(Value::as_array) {
        // hyperfine --export-json: {"results": [{"command": …, "times": [seconds…], …}, …]}
        let index = match (pick, results.len()) {
            (Some(n), len) if (1..=len).contains(&n) => n - 1,
            (Some(n), len) => {
                return Err(format!("asked for result #{n}, but the file has {len}"));
            }
            (None, 1) => 0,
            (None, len) => {
                return Err(format!(
                    "a hyperfine export with {len} results: pick one with FILE#1 … FILE#{len}"
                ));
            }
        };
        let result = &results[index];
        let command = result.get("command").and_then(Value::as_str).unwrap_or("?");
        return Ok(Samples {
            values: numbers(result, "times")?,
            unit: Unit::Seconds,
            source: format!("hyperfine: {}", excerpt(command, 60)),
        });
    }
    if pick.is_some() {
        return Err("#N picks a result of a hyperfine export; this file has no \"results\"".into());
    }
    if json.get("iters").is_some() && json.get("times").is_some() {
        // criterion's target/criterion/<bench>/<baseline>/sample.json: times[i] is the total
        // time in nanoseconds of iters[i] iterations.
        let iters = numbers(json, "iters")?;
        let times = numbers(json, "times")?;
        if iters.len() != times.len() {
            return Err(format!(
                "{} iteration counts for {} times",
                iters.len(),
                times.len()
            ));
        }
        let mut values = Vec::with_capacity(times.len());
        for (t, i) in times.iter().zip(&iters) {
            if i.is_nan() || *i <= 0.0 {
                return Err(format!("an iteration count of {i}"));
            }
            values.push(t / i / 1e9);
        }
        return Ok(Samples {
            values,
            unit: Unit::Seconds,
            source: "criterion sample.json (time per iteration)".into(),
        });
    }
    Err("unrecognised JSON: expected hyperfine's --export-json (\"results\") or criterion's sample.json (\"iters\" and \"times\")".into())
}

/// Numbers separated by blanks, commas or newlines; `#` starts a comment.
fn plain(text: &str) -> Result<Vec<f64>, String> {
    let mut values = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("");
        for word in line.split(|c: char| c.is_whitespace() || c == ',') {
            if word.is_empty() {
                continue;
            }
            let v: f64 = word.parse().map_err(|_| {
                format!(
                    "line {}: expected a number, found '{}'",
                    number + 1,
                    excerpt(word, 40)
                )
            })?;
            values.push(v);
        }
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_hyperfine_criterion_and_plain() {
        let h: Value = serde_json::from_str(
            r#"{"results":[{"command":"sleep 0.1","mean":0.1,"times":[0.1,0.11,0.09]}]}"#,
        )
        .unwrap();
        let s = from_json(&h, None).unwrap();
        assert_eq!(s.values, vec![0.1, 0.11, 0.09]);
        assert_eq!(s.unit, Unit::Seconds);
        assert!(s.source.contains("sleep 0.1"));

        let c: Value = serde_json::from_str(
            r#"{"sampling_mode":"Linear","iters":[1.0,2.0],"times":[100.0,300.0]}"#,
        )
        .unwrap();
        let s = from_json(&c, None).unwrap();
        assert_eq!(s.values, vec![100e-9, 150e-9]);

        assert_eq!(
            plain("1 2,3\n# c\n4.5 # x\n").unwrap(),
            vec![1.0, 2.0, 3.0, 4.5]
        );
        let err = plain("1\n2\nfast\n").unwrap_err();
        assert!(err.contains("line 3") && err.contains("fast"), "{err}");
    }

    #[test]
    fn several_hyperfine_results_need_a_pick() {
        let h: Value = serde_json::from_str(
            r#"{"results":[{"command":"a","times":[1.0]},{"command":"b","times":[2.0]}]}"#,
        )
        .unwrap();
        assert!(from_json(&h, None).unwrap_err().contains("FILE#2"));
        assert_eq!(from_json(&h, Some(2)).unwrap().values, vec![2.0]);
        assert!(from_json(&h, Some(3)).is_err());
        assert_eq!(
            split_pick(Path::new("/nonexistent/r.json#2")),
            (Path::new("/nonexistent/r.json"), Some(2))
        );
    }

    #[test]
    fn long_garbage_is_not_echoed_whole() {
        let line = "x".repeat(100_000);
        let err = plain(&line).unwrap_err();
        assert!(err.len() < 200, "{}", err.len());
    }
}
