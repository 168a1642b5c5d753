//! The terminal summary printed at the end of `spindle lab`, and the one-line forms used
//! while it runs.

use std::fmt::Write;

use super::format::num;
use super::{section_grid, visits_grid, Grid};
use crate::results::{
    ClaimKind, ClaimResult, ExperimentResult, LabReport, RunState, Verdict, VERDICT_RULE,
};

/// No line of the summary is wider than this.
pub const WIDTH: usize = 120;

fn mark(c: &ClaimResult) -> &'static str {
    match (c.kind, c.verdict) {
        (_, Verdict::Holds) => "✔",
        (ClaimKind::Guarantee, Verdict::Violated) => "✘",
        (ClaimKind::Reproduction, Verdict::Violated) => "≠",
        (_, Verdict::Undecided) => "?",
    }
}

/// `✔ holds     [guarantee] statement — evidence`.
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

fn width(s: &str) -> usize {
    s.chars().count()
}

/// `s` cut to `w` characters, with an ellipsis when cut.
fn cut(s: &str, w: usize) -> String {
    if width(s) <= w {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(w.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

/// Words of `text` in lines of at most `w` characters (a word longer than that gets a line of
/// its own), the first prefixed with `first`, the others with `rest`.
pub fn wrap(text: &str, w: usize, first: &str, rest: &str) -> String {
    let mut out = String::new();
    let mut line = first.to_string();
    let mut empty = true;
    for word in text.split_whitespace() {
        if !empty && width(&line) + 1 + width(word) > w {
            out.push_str(line.trim_end());
            out.push('\n');
            line = rest.to_string();
            empty = true;
        }
        if !empty {
            line.push(' ');
        }
        line.push_str(word);
        empty = false;
    }
    out.push_str(line.trim_end());
    out.push('\n');
    out
}

/// A grid in at most [`WIDTH`] columns: the label column is shortened first (to 28
/// characters at least), then the value columns are split into blocks, each repeating the
/// labels.
fn grid(out: &mut String, g: &Grid, indent: &str) {
    let cols = g.headers.len();
    let widths: Vec<usize> = (0..cols)
        .map(|i| {
            g.rows
                .iter()
                .filter_map(|r| r.get(i))
                .chain(std::iter::once(&g.headers[i]))
                .map(|c| width(c))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let room = WIDTH - width(indent);
    let values: usize = widths.iter().skip(1).map(|w| w + 2).sum();
    let label = widths[0].min(room.saturating_sub(values).max(28));
    // Value columns per block, in order, so that each block fits.
    let mut blocks: Vec<Vec<usize>> = vec![Vec::new()];
    let mut used = label;
    for (i, w) in widths.iter().enumerate().skip(1) {
        let last = blocks.last_mut().expect("one block");
        if !last.is_empty() && used + 2 + w > room {
            blocks.push(vec![i]);
            used = label + 2 + w;
        } else {
            last.push(i);
            used += 2 + w;
        }
    }
    for (b, block) in blocks.iter().enumerate() {
        if b > 0 {
            out.push('\n');
        }
        for row in std::iter::once(&g.headers).chain(&g.rows) {
            let mut line = String::new();
            let first = cut(row.first().map_or("", String::as_str), label);
            line.push_str(&format!("{first}{}", " ".repeat(label - width(&first))));
            for &i in block {
                let c = row.get(i).map_or("", String::as_str);
                let c = cut(c, room);
                line.push_str(&format!(
                    "  {}{c}",
                    " ".repeat(widths[i].saturating_sub(width(&c)))
                ));
            }
            let _ = writeln!(out, "{indent}{}", line.trim_end());
        }
    }
}

/// The whole summary: every experiment's tables and claims, then the verdicts, guarantees
/// first.
pub fn render(report: &LabReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Spindle lab · {} profile · ε = {} per claim · commit {} · {:.0} s of at most {:.0} s",
        report.profile.as_str(),
        report.eps,
        report.commit,
        report.lab_seconds,
        report.budget_s
    );
    out.push_str(&wrap(
        &format!("machine: {}", report.machine.one_line()),
        WIDTH,
        "",
        "  ",
    ));
    for a in &report.machine.anomalies {
        out.push_str(&wrap(a, WIDTH, "  anomaly: ", "    "));
    }
    if let Some(load) = report.load_sentence() {
        out.push_str(&wrap(&load, WIDTH, "  load: ", "    "));
    }
    if let Some(moved) = report.placement_sentence() {
        out.push_str(&wrap(&moved, WIDTH, "  placement: ", "    "));
    }
    out.push_str(&wrap(
        VERDICT_RULE,
        WIDTH,
        "how verdicts are reached: ",
        "  ",
    ));
    for e in &report.experiments {
        let _ = writeln!(out);
        out.push_str(&wrap(
            &format!(
                "{} — {} · {} trials in {:.1} s ({}){}",
                e.name,
                e.title,
                e.trials,
                e.wall_s,
                e.stop_reason,
                if e.complete { "" } else { " · INCOMPLETE" }
            ),
            WIDTH,
            "",
            "  ",
        ));
        for s in &e.sections {
            out.push_str(&wrap(&s.title, WIDTH, "  ", "    "));
            grid(&mut out, &section_grid(s, true), "    ");
        }
        for t in &e.tables {
            out.push_str(&wrap(&t.title, WIDTH, "  ", "    "));
            grid(&mut out, &Grid::from(t), "    ");
        }
        for c in &e.claims {
            out.push_str(&wrap(&claim_line(c), WIDTH, "  ", "      "));
        }
    }
    for f in &report.failures {
        let _ = writeln!(out);
        out.push_str(&wrap(
            &format!("{}: FAILED — {}", f.name, f.error),
            WIDTH,
            "",
            "  ",
        ));
    }
    let visits = visits_grid(report);
    if !visits.rows.is_empty() {
        let _ = writeln!(
            out,
            "\nhow the time was spent ({:.0} s planned: a first pass, then the open claims):",
            report.budget_s
        );
        grid(&mut out, &visits, "  ");
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
            out.push_str(&wrap(
                &format!(
                    "{} {e}/{}: {} (median ratio {})",
                    c.verdict.word(c.kind),
                    c.id,
                    c.statement,
                    num(c.ratio.median)
                ),
                WIDTH,
                "  ",
                "      ",
            ));
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
