//! The terminal summary printed at the end of `spindle lab`, and the one-line forms used
//! while it runs.

use std::fmt::Write;

use super::format::num;
use super::{section_grid, Grid};
use crate::results::{ClaimKind, ClaimResult, ExperimentResult, LabReport, RunState, Verdict};

fn mark(c: &ClaimResult) -> &'static str {
    match (c.kind, c.verdict) {
        (_, Verdict::Holds) => "✔",
        (ClaimKind::Guarantee, Verdict::Violated) => "✘",
        (ClaimKind::Reproduction, Verdict::Violated) => "≠",
        (_, Verdict::Undecided) => "?",
    }
}

/// "✔ holds     [guarantee] statement — evidence".
pub fn claim_line(c: &ClaimResult) -> String {
    format!(
        "{} {:<9} [{}] {} — {}",
        mark(c),
        c.verdict.word(c.kind),
        match c.kind {
            ClaimKind::Guarantee => "guarantee",
            ClaimKind::Reproduction => "reproduction",
        },
        c.statement,
        c.explanation
    )
}

/// One line per finished experiment, for logs.
pub fn experiment_line(e: &ExperimentResult) -> String {
    let verdicts = |kind: ClaimKind| {
        let of = |v: Verdict| {
            e.claims
                .iter()
                .filter(|c| c.kind == kind && c.verdict == v)
                .count()
        };
        (
            of(Verdict::Holds),
            of(Verdict::Violated),
            of(Verdict::Undecided),
        )
    };
    let (gh, gv, gu) = verdicts(ClaimKind::Guarantee);
    let (rh, rv, ru) = verdicts(ClaimKind::Reproduction);
    format!(
        "{}: {} trials in {:.1} s ({}); guarantees {gh} hold / {gv} violated / {gu} undecided; reproductions {rh} agree / {rv} differ / {ru} undecided",
        e.name, e.trials, e.wall_s, e.stop_reason
    )
}

fn grid(out: &mut String, g: &Grid, indent: &str) {
    let widths: Vec<usize> = (0..g.headers.len())
        .map(|i| {
            g.rows
                .iter()
                .filter_map(|r| r.get(i))
                .chain(std::iter::once(&g.headers[i]))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in std::iter::once(&g.headers).chain(&g.rows) {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (c, w))| {
                let pad = w.saturating_sub(c.chars().count());
                if i == 0 {
                    format!("{c}{}", " ".repeat(pad))
                } else {
                    format!("{}{c}", " ".repeat(pad))
                }
            })
            .collect();
        let _ = writeln!(out, "{indent}{}", cells.join("  ").trim_end());
    }
}

/// The whole summary: every experiment's tables and claims, then the verdicts, guarantees
/// first.
pub fn render(report: &LabReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Spindle lab · {} profile · ε = {} per claim · commit {} · {:.0} s\nmachine: {}",
        report.profile.as_str(),
        report.eps,
        report.commit,
        report.lab_seconds,
        report.machine.one_line()
    );
    for a in &report.machine.anomalies {
        let _ = writeln!(out, "  anomaly: {a}");
    }
    for e in &report.experiments {
        let _ = writeln!(
            out,
            "\n{} — {} · {} trials in {:.1} s ({}){}",
            e.name,
            e.title,
            e.trials,
            e.wall_s,
            e.stop_reason,
            if e.complete { "" } else { " · INCOMPLETE" }
        );
        for s in &e.sections {
            let _ = writeln!(out, "  {}", s.title);
            grid(&mut out, &section_grid(s, true), "    ");
        }
        for t in &e.tables {
            let _ = writeln!(out, "  {}", t.title);
            grid(&mut out, &Grid::from(t), "    ");
        }
        for c in &e.claims {
            let _ = writeln!(out, "  {}", claim_line(c));
        }
    }
    for f in &report.failures {
        let _ = writeln!(out, "\n{}: FAILED — {}", f.name, f.error);
    }
    let _ = writeln!(out);
    for (kind, title, words) in [
        (
            ClaimKind::Guarantee,
            "guarantees",
            ["hold", "VIOLATED", "undecided"],
        ),
        (
            ClaimKind::Reproduction,
            "reproductions",
            ["agree", "differ", "undecided"],
        ),
    ] {
        let claims = report.claims_by_kind(kind);
        if claims.is_empty() {
            continue;
        }
        let n = |v: Verdict| claims.iter().filter(|(_, c)| c.verdict == v).count();
        let _ = writeln!(
            out,
            "{title}: {} {}, {} {}, {} {}",
            n(Verdict::Holds),
            words[0],
            n(Verdict::Violated),
            words[1],
            n(Verdict::Undecided),
            words[2]
        );
        for (e, c) in claims.iter().filter(|(_, c)| c.verdict != Verdict::Holds) {
            let _ = writeln!(
                out,
                "  {} {e}/{}: {} (median ratio {})",
                c.verdict.word(c.kind),
                c.id,
                c.statement,
                num(c.ratio.median)
            );
        }
    }
    match report.state {
        RunState::Interrupted => {
            let _ = writeln!(out, "interrupted: the figures above are incomplete");
        }
        RunState::Running => {
            let _ = writeln!(out, "(still running)");
        }
        RunState::Complete => {}
    }
    out
}
