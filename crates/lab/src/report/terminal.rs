//! The terminal summary printed at the end of `spindle lab`.

use std::fmt::Write;

use super::{ExperimentResult, Figure, LabReport};
use crate::harness::{ClaimResult, Verdict};

fn num(v: f64) -> String {
    if !v.is_finite() {
        "–".into()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn mark(v: Verdict) -> &'static str {
    match v {
        Verdict::Holds => "✔ holds    ",
        Verdict::Violated => "✘ violated ",
        Verdict::Undecided => "? undecided",
    }
}

/// One line per claim: verdict, statement, evidence.
pub fn render_claims_line(c: &ClaimResult) -> String {
    format!("  {} {} — {}", mark(c.verdict), c.statement, c.explanation)
}

/// The whole summary.
pub fn render_terminal(report: &LabReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Spindle lab · {} profile · ε = {} per claim\nmachine: {}",
        format!("{:?}", report.profile).to_lowercase(),
        report.eps,
        report.machine.one_line()
    );
    for e in &report.experiments {
        experiment(&mut out, e);
    }
    for f in &report.failures {
        let _ = writeln!(out, "\n{}: FAILED — {}", f.name, f.error);
    }
    let count = |v: Verdict| {
        report
            .experiments
            .iter()
            .flat_map(|e| &e.claims)
            .filter(|c| c.verdict == v)
            .count()
    };
    let _ = writeln!(
        out,
        "\nclaims: {} hold, {} violated, {} undecided",
        count(Verdict::Holds),
        count(Verdict::Violated),
        count(Verdict::Undecided)
    );
    out
}

fn experiment(out: &mut String, e: &ExperimentResult) {
    let _ = writeln!(
        out,
        "\n{} — {} (seed {}) · {} trials in {:.1} s ({})",
        e.name, e.title, e.seed, e.trials, e.wall_s, e.stop_reason
    );
    let width = e
        .variants
        .iter()
        .map(|v| v.label.chars().count())
        .max()
        .unwrap_or(10)
        .max(7);
    let baseline = e.baseline.unwrap_or("baseline");
    let _ = writeln!(
        out,
        "  {:<width$}  {:>9}  {:>19}  {:>9}  {:>9}",
        "variant",
        "median",
        "median CI",
        format!("× {baseline}"),
        "seed ×"
    );
    for v in &e.variants {
        let ci = match (v.value.median_lo, v.value.median_hi) {
            (Some(lo), Some(hi)) => format!("[{}, {}]", num(lo), num(hi)),
            _ => "–".into(),
        };
        let _ = writeln!(
            out,
            "  {:<width$}  {:>9}  {:>19}  {:>9}  {:>9}",
            v.label,
            num(v.value.median),
            ci,
            v.ratio_to_baseline
                .map(|r| num(r.median))
                .unwrap_or_default(),
            v.reference_ratio.map(num).unwrap_or_default()
        );
    }
    let _ = writeln!(out, "  ({})", e.unit);
    for f in &e.figures {
        if let Figure::Table {
            title,
            columns,
            rows,
        } = f
        {
            table(out, title, columns, rows);
        }
    }
    for c in &e.claims {
        let _ = writeln!(out, "{}", render_claims_line(c));
    }
}

/// A figure table as aligned text columns.
fn table(out: &mut String, title: &str, columns: &[String], rows: &[Vec<String>]) {
    let _ = writeln!(out, "  {title}");
    let widths: Vec<usize> = (0..columns.len())
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .chain(std::iter::once(&columns[i]))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in std::iter::once(columns).chain(rows.iter().map(|r| r.as_slice())) {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        let _ = writeln!(out, "    {}", cells.join("  ").trim_end());
    }
}
