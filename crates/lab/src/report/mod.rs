//! The ways results leave the lab: `results.json`, a self-contained `index.html` with SVG
//! charts, a terminal summary, and Markdown for `docs/results.md`. Rendering reads
//! [`crate::results`] only; nothing here measures.

pub mod baseline;
pub mod format;
pub mod html;
pub mod markdown;
pub mod stability;
mod svg;
pub mod terminal;

use std::path::{Path, PathBuf};

use crate::results::{LabReport, RunState};

/// Writes a run's report into its directory, atomically, as often as asked.
///
/// A complete report already in the directory is never overwritten by an incomplete one: when
/// `DIR/results.json` holds a complete run, this run writes `results.partial.json` and
/// `index.partial.html` until it completes, and only then replaces the old files.
pub struct ReportWriter {
    dir: PathBuf,
    /// A complete earlier report is in the directory.
    keep_previous: bool,
}

const JSON: &str = "results.json";
const HTML: &str = "index.html";
const PARTIAL_JSON: &str = "results.partial.json";
const PARTIAL_HTML: &str = "index.partial.html";

impl ReportWriter {
    /// Creates the directory if needed and checks that it is writable.
    pub fn open(dir: &Path) -> Result<ReportWriter, String> {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create report directory {}: {e}", dir.display()))?;
        let probe = dir.join(".spindle-write-test");
        std::fs::write(&probe, b"")
            .map_err(|e| format!("cannot write into report directory {}: {e}", dir.display()))?;
        let _ = std::fs::remove_file(probe);
        // Anything in results.json that is not an unfinished run of ours is kept.
        let keep_previous = match std::fs::read_to_string(dir.join(JSON)) {
            Err(_) => false,
            Ok(text) => !matches!(
                serde_json::from_str::<serde_json::Value>(&text)
                    .ok()
                    .and_then(|v| v.get("state").and_then(|s| s.as_str()).map(str::to_owned))
                    .as_deref(),
                Some("running") | Some("interrupted")
            ),
        };
        Ok(ReportWriter {
            dir: dir.to_path_buf(),
            keep_previous,
        })
    }

    fn names(&self, complete: bool) -> (PathBuf, PathBuf) {
        if self.keep_previous && !complete {
            (self.dir.join(PARTIAL_JSON), self.dir.join(PARTIAL_HTML))
        } else {
            (self.dir.join(JSON), self.dir.join(HTML))
        }
    }

    /// Writes the report so far.
    pub fn write(&self, report: &LabReport) -> Result<Vec<PathBuf>, String> {
        let (json, html) = self.names(report.state == RunState::Complete);
        let text = serde_json::to_string_pretty(report)
            .map_err(|e| format!("cannot encode results: {e}"))?;
        write_atomically(&json, text.as_bytes())?;
        write_atomically(&html, html::render(report).as_bytes())?;
        Ok(vec![json, html])
    }

    /// The last write: a complete run replaces the previous report and removes its partial
    /// files; an interrupted one leaves the previous complete report in place.
    pub fn finish(&self, report: &LabReport) -> Result<Vec<PathBuf>, String> {
        let files = self.write(report)?;
        if report.state == RunState::Complete {
            let _ = std::fs::remove_file(self.dir.join(PARTIAL_JSON));
            let _ = std::fs::remove_file(self.dir.join(PARTIAL_HTML));
        }
        Ok(files)
    }

    /// The earlier complete report left in place, when this run did not complete.
    pub fn kept_previous(&self, report: &LabReport) -> Option<PathBuf> {
        (self.keep_previous && report.state != RunState::Complete).then(|| self.dir.join(HTML))
    }
}

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path)
        .map_err(|e| format!("cannot move {} into place: {e}", path.display()))
}

/// One column of a [`Grid`]: a cell from a variant.
type Column<'a> = Box<dyn Fn(&crate::results::VariantResult) -> String + 'a>;

/// A section as rows of preformatted cells, shared by the HTML, terminal and Markdown views
/// so that all three show the same columns in the same units.
pub struct Grid {
    pub headers: Vec<String>,
    pub rows: Vec<Vec<String>>,
    /// Row of the section's baseline variant.
    pub baseline_row: Option<usize>,
}

impl From<&crate::results::Table> for Grid {
    fn from(t: &crate::results::Table) -> Grid {
        Grid {
            headers: t.columns.clone(),
            rows: t.rows.clone(),
            baseline_row: None,
        }
    }
}

/// The table of a section: per metric its median in one unit per column, the primary metric's
/// confidence interval (when `with_ci`), ratio to the baseline, the reference's ratio and the
/// `--baseline` run's ratio where they exist.
pub fn section_grid(s: &crate::results::SectionResult, with_ci: bool) -> Grid {
    use format::{num, ratio, Scale};
    let mut headers = vec!["variant".to_string()];
    let threads_differ = s.variants.windows(2).any(|w| w[0].threads != w[1].threads);
    if threads_differ {
        headers.push("threads".into());
    }
    let baseline_label = s
        .baseline
        .as_ref()
        .and_then(|b| s.variants.iter().find(|v| &v.id == b))
        .map(|v| v.id.clone());
    let mut columns: Vec<Column> = Vec::new();
    for (j, m) in s.metrics.iter().enumerate().filter(|(_, m)| !m.hidden) {
        let id = m.id.clone();
        let values = s
            .variants
            .iter()
            .filter_map(|v| v.metric(&m.id))
            .flat_map(|r| [r.summary.median]);
        let scale = Scale::for_values(m.unit, values);
        let unit = if scale.suffix.is_empty() {
            String::new()
        } else {
            format!(" ({})", scale.suffix)
        };
        headers.push(format!("{}{unit}", m.label));
        let idc = id.clone();
        columns.push(Box::new(move |v| match v.metric(&idc) {
            Some(r) => {
                let lower_bound = v.capped_count() * 2 > v.capped.len();
                format!(
                    "{}{}",
                    if lower_bound { "≥ " } else { "" },
                    scale.num(r.summary.median)
                )
            }
            None => "–".into(),
        }));
        if j == 0 && with_ci {
            headers.push("median CI".into());
            let idc = id.clone();
            columns.push(Box::new(move |v| {
                v.metric(&idc)
                    .map_or("–".into(), |r| scale.interval(&r.summary))
            }));
        }
        let pooled = s
            .variants
            .iter()
            .any(|v| v.metric(&m.id).is_some_and(|r| r.pooled.is_some()));
        if pooled {
            let pscale = Scale::for_values(
                m.unit,
                s.variants
                    .iter()
                    .filter_map(|v| v.metric(&m.id).and_then(|r| r.pooled))
                    .map(|p| p.median),
            );
            for (name, pick) in [("p99", 0usize), ("max", 1)] {
                headers.push(format!(
                    "{name} of all{}",
                    if pscale.suffix.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", pscale.suffix)
                    }
                ));
                let idc = id.clone();
                columns.push(Box::new(move |v| {
                    v.metric(&idc)
                        .and_then(|r| r.pooled)
                        .map_or("–".into(), |p| {
                            pscale.num(if pick == 0 { p.p99 } else { p.max })
                        })
                }));
            }
        }
        if m.show_max {
            headers.push("largest".into());
            let idc = id.clone();
            columns.push(Box::new(move |v| {
                v.metric(&idc)
                    .map_or("–".into(), |r| scale.num(r.summary.max))
            }));
        }
        if j == 0 {
            if baseline_label.is_some() {
                headers.push("× baseline".into());
                let idc = id.clone();
                columns.push(Box::new(move |v| {
                    v.metric(&idc)
                        .and_then(|r| r.ratio_to_baseline)
                        .map_or("–".into(), |r| num(r.median))
                }));
            }
            if s.variants.iter().any(|v| v.reference_ratio.is_some()) {
                headers.push("reference ×".into());
                columns.push(Box::new(|v| v.reference_ratio.map_or(String::new(), num)));
            }
            if s.variants
                .iter()
                .any(|v| v.metric(&m.id).is_some_and(|r| r.vs_baseline_run.is_some()))
            {
                headers.push("vs baseline run (unpaired)".into());
                let idc = id.clone();
                columns.push(Box::new(move |v| {
                    v.metric(&idc)
                        .and_then(|r| r.vs_baseline_run)
                        .map_or("–".into(), ratio)
                }));
            }
        }
    }
    let rows = s
        .variants
        .iter()
        .map(|v| {
            let capped = v.capped_count();
            let mut label = v.label.clone();
            if baseline_label.as_deref() == Some(v.id.as_str()) {
                label.push_str(" (baseline)");
            }
            if capped > 0 {
                label.push_str(&format!(" [capped {capped}/{}]", v.capped.len()));
            }
            let mut row = vec![label];
            if threads_differ {
                row.push(v.threads.to_string());
            }
            row.extend(columns.iter().map(|c| c(v)));
            row
        })
        .collect();
    Grid {
        headers,
        rows,
        baseline_row: s
            .baseline
            .as_ref()
            .and_then(|b| s.variants.iter().position(|v| &v.id == b)),
    }
}

/// How the planner spent the run's time: one row per visit of an experiment.
pub fn visits_grid(report: &LabReport) -> Grid {
    let mut rows = Vec::new();
    for e in &report.experiments {
        for v in &e.visits {
            rows.push(vec![
                e.name.clone(),
                v.phase.clone(),
                format!("{:.1} s", v.slice_s),
                format!("{:.1} s", v.used_s),
                v.trials.to_string(),
                v.decided.to_string(),
                v.stop_reason.clone(),
            ]);
        }
    }
    Grid {
        headers: [
            "experiment",
            "visit",
            "given",
            "used",
            "trials",
            "claims decided",
            "why it stopped",
        ]
        .map(String::from)
        .to_vec(),
        rows,
        baseline_row: None,
    }
}

/// How long each section of an experiment ran, and why it stopped.
pub fn sections_run_grid(e: &crate::results::ExperimentResult) -> Grid {
    let rows = e
        .sections
        .iter()
        .map(|s| {
            let load = s.load.map_or("—".to_string(), |l| {
                let worst = l.max_others_cpus + l.max_steal_cpus;
                if l.loaded_windows > 0 {
                    format!(
                        "{} of {} windows loaded (up to {worst:.2} CPUs)",
                        l.loaded_windows, l.windows
                    )
                } else {
                    format!("quiet ({} windows, at most {worst:.2} CPUs)", l.windows)
                }
            });
            let round_trip = s.round_trip.map_or("—".to_string(), |r| {
                let range = crate::results::ns_range(r.min_ns, r.max_ns);
                if r.moved() {
                    format!("{range}: changed")
                } else {
                    range
                }
            });
            vec![
                s.id.clone(),
                s.trials.to_string(),
                s.discarded_trials.to_string(),
                load,
                round_trip,
                s.stop_reason.clone(),
            ]
        })
        .collect();
    Grid {
        headers: [
            "section",
            "trials kept",
            "discarded",
            "other processes' load",
            "two-CPU round trip",
            "why it stopped",
        ]
        .map(String::from)
        .to_vec(),
        rows,
        baseline_row: None,
    }
}
