//! Results, and the three ways they leave the lab: `results.json`, a self-contained
//! `index.html` with SVG charts, and a terminal summary.

mod html;
mod svg;
mod terminal;

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::harness::{Budget, ClaimResult, Profile, Summary};
use crate::machine::Machine;

pub use html::render_html;
pub use terminal::{render_claims_line, render_terminal};

/// A named parameter of an experiment, for the record.
#[derive(Clone, Debug, Serialize)]
pub struct Param {
    pub name: String,
    pub value: String,
}

impl Param {
    pub fn new(name: impl Into<String>, value: impl ToString) -> Self {
        Param {
            name: name.into(),
            value: value.to_string(),
        }
    }

    /// The trial budget, as every experiment reports it.
    pub fn trials(b: &Budget) -> Self {
        Param::new(
            "trials",
            format!(
                "{} to {} (or {} s)",
                b.min_trials,
                b.max_trials,
                b.max_time.as_secs()
            ),
        )
    }

    /// The band every claim's driver uses (see `Claim`).
    pub fn claim_band() -> Self {
        Param::new("claim band", "P(yes) > 0.6 holds, < 0.4 violated")
    }
}

/// One variant's figures.
#[derive(Clone, Debug, Serialize)]
pub struct VariantResult {
    pub id: &'static str,
    pub label: String,
    pub threads: usize,
    /// Unit of `value`, e.g. "ns per increment".
    pub unit: String,
    pub value: Summary,
    /// TSC ticks per operation.
    pub ticks: Option<Summary>,
    /// Per-trial ratio to the experiment's baseline variant.
    pub ratio_to_baseline: Option<Summary>,
    /// The same ratio in the seed document, when it has one.
    pub reference_ratio: Option<f64>,
}

/// A chart, described by its data; the HTML report draws it.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Figure {
    /// Horizontal bars with optional interval whiskers.
    Bars {
        title: String,
        axis: String,
        log: bool,
        bars: Vec<Bar>,
    },
    /// Two values per row side by side (e.g. this machine vs the seed).
    Paired {
        title: String,
        axis: String,
        log: bool,
        series: [String; 2],
        rows: Vec<PairedRow>,
    },
    /// Every per-trial value of a claim's ratio against its bound.
    Strips {
        title: String,
        axis: String,
        log: bool,
        strips: Vec<Strip>,
    },
    /// A plain table of preformatted cells (e.g. a seed's table beside ours).
    Table {
        title: String,
        columns: Vec<String>,
        rows: Vec<Vec<String>>,
    },
}

#[derive(Clone, Debug, Serialize)]
pub struct Bar {
    pub label: String,
    pub value: f64,
    pub lo: Option<f64>,
    pub hi: Option<f64>,
}

impl Bar {
    /// A bar at a summary's median, with the median's confidence interval as whiskers.
    pub fn median(label: impl Into<String>, s: &Summary) -> Self {
        Bar {
            label: label.into(),
            value: s.median,
            lo: s.median_lo,
            hi: s.median_hi,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct PairedRow {
    pub label: String,
    pub values: [Option<f64>; 2],
}

#[derive(Clone, Debug, Serialize)]
pub struct Strip {
    pub label: String,
    pub values: Vec<f64>,
    pub bound: f64,
    pub verdict: String,
}

/// Where the reference figures come from.
#[derive(Clone, Debug, Serialize)]
pub struct Reference {
    pub source: String,
    pub machine: String,
}

/// Everything one experiment produced.
#[derive(Clone, Debug, Serialize)]
pub struct ExperimentResult {
    pub name: &'static str,
    pub title: &'static str,
    /// Seed document it reproduces.
    pub seed: &'static str,
    pub question: String,
    pub unit: String,
    pub baseline: Option<&'static str>,
    pub parameters: Vec<Param>,
    pub budget: Budget,
    pub trials: u64,
    pub stop_reason: String,
    pub wall_s: f64,
    pub variants: Vec<VariantResult>,
    pub claims: Vec<ClaimResult>,
    pub reference: Option<Reference>,
    pub figures: Vec<Figure>,
    pub notes: Vec<String>,
}

/// An experiment that could not finish, kept in the report with the reason.
#[derive(Clone, Debug, Serialize)]
pub struct ExperimentFailure {
    pub name: String,
    pub error: String,
}

/// A whole lab run.
#[derive(Clone, Debug, Serialize)]
pub struct LabReport {
    pub tool: &'static str,
    pub version: &'static str,
    /// Seconds since the Unix epoch when the run started.
    pub started_unix: u64,
    /// The same, readable.
    pub started_utc: String,
    pub profile: Profile,
    pub eps: f64,
    pub machine: Machine,
    pub experiments: Vec<ExperimentResult>,
    pub failures: Vec<ExperimentFailure>,
    /// True while experiments are still running (a partial report).
    pub partial: bool,
}

/// `2026-11-21 09:28 UTC` from seconds since the Unix epoch (Hinnant's civil-from-days).
pub fn utc_string(unix: u64) -> String {
    let days = (unix / 86_400) as i64;
    let secs = unix % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02} UTC",
        secs / 3600,
        secs % 3600 / 60
    )
}

/// Writes `results.json` and `index.html` into `dir` (creating it). Files are written to a
/// temporary name first and renamed, so an interrupted write never leaves a truncated report.
pub fn write_report(dir: &Path, report: &LabReport) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let json =
        serde_json::to_string_pretty(report).map_err(|e| format!("cannot encode results: {e}"))?;
    let json_path = dir.join("results.json");
    write_atomically(&json_path, json.as_bytes())?;
    let html_path = dir.join("index.html");
    write_atomically(&html_path, render_html(report).as_bytes())?;
    Ok(vec![json_path, html_path])
}

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path)
        .map_err(|e| format!("cannot move {} into place: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        assert_eq!(utc_string(0), "1970-01-01 00:00 UTC");
        assert_eq!(utc_string(951_782_400), "2000-02-29 00:00 UTC");
        assert_eq!(utc_string(1_795_253_336), "2026-11-21 09:28 UTC");
    }
}
