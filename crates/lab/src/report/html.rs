//! The self-contained HTML report: inline CSS and SVG, nothing fetched from the network.
//! Order: how to read it, the machine, guarantees, reproductions, then each experiment.

use std::fmt::Write;

use super::format::num;
use super::{section_grid, sections_run_grid, svg, visits_grid, Grid};
use crate::results::{
    ClaimKind, ClaimResult, ExperimentResult, LabReport, RunState, Verdict, VERDICT_RULE,
};

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn badge(c: &ClaimResult) -> String {
    let class = match (c.kind, c.verdict) {
        (_, Verdict::Holds) => "holds",
        (ClaimKind::Guarantee, Verdict::Violated) => "defect",
        (ClaimKind::Reproduction, Verdict::Violated) => "differs",
        (_, Verdict::Undecided) => "undecided",
    };
    format!(
        "<span class=\"badge {class}\">{}</span>",
        c.verdict.word(c.kind)
    )
}

const STYLE: &str = r#"
body { font: 16px/1.5 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1d1d1d; max-width: 1180px; margin: 1.5em auto; padding: 0 16px; }
h1 { margin: 0 0 0.1em; font-size: 1.7em; } h2 { margin-top: 2.2em; border-bottom: 2px solid #ddd; padding-bottom: 0.2em; font-size: 1.35em; }
h3 { margin: 1.6em 0 0.4em; font-size: 1.08em; }
table { border-collapse: collapse; margin: 0.5em 0 1em; font-size: 14px; }
th, td { padding: 0.3em 0.65em; border-bottom: 1px solid #e6e6e6; text-align: left; vertical-align: top; }
th { background: #f5f5f5; font-weight: 600; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.base td { font-weight: 600; }
.wide { overflow-x: auto; max-width: 100%; }
.wide td:first-child, .wide th:first-child { min-width: 12em; }
.claims td:first-child { min-width: 16em; } .claims td.ev { min-width: 14em; }
.muted { color: #666; } .small { font-size: 14px; }
.badge { display: inline-block; padding: 0.05em 0.6em; border-radius: 0.8em; font-weight: 600; font-size: 13px; color: #fff; white-space: nowrap; }
.badge.holds { background: #2a8a2a; } .badge.defect { background: #c62828; } .badge.differs { background: #8a6d00; } .badge.undecided { background: #777; }
.figure { margin: 0.3em 0 1.2em; max-width: 100%; overflow-x: auto; } .figure svg { width: 100%; max-width: 1000px; height: auto; }
.kv td:first-child { color: #555; white-space: nowrap; }
.note { background: #fff8e1; border: 1px solid #e6c200; padding: 0.6em 1em; border-radius: 4px; }
.alarm { background: #fdecea; border: 1px solid #e0a09a; padding: 0.6em 1em; border-radius: 4px; }
.howto { background: #f4f8fc; border: 1px solid #c9dcee; padding: 0.4em 1.2em; border-radius: 4px; font-size: 15px; }
.howto li { margin: 0.2em 0; }
details summary { cursor: pointer; color: #333; font-size: 14px; }
code { background: #f1f1f1; padding: 0 0.25em; border-radius: 3px; }
"#;

const HOW_TO_READ: &str = "<div class=\"howto\"><h2 style=\"margin-top:0.6em;border:0\">How to read this report</h2><ul>\
<li><b>Guarantees</b> are Spindle's promises about its own code, measured against floors and peers: \
<span class=\"badge holds\">holds</span>, <span class=\"badge defect\">VIOLATED</span> (a defect in Spindle) or \
<span class=\"badge undecided\">undecided</span>. <b>Reproductions</b> re-measure a figure of a source document: \
<span class=\"badge holds\">agrees</span> or <span class=\"badge differs\">differs</span> only says whether this machine \
behaves like the document's.</li>\
<li>Variants of one experiment run <b>interleaved</b>: each trial runs every variant once, in a fresh random order \
(each section's variants together, and the sections a claim compares, so that a claim's two runs are close in time), so \
drifts of the machine hit all of them alike.</li>\
<li>A claim compares two variants <i>within</i> each trial (\"ours / floor\" in this trial). VERDICT_RULE \
Undecided means the time ran out, the median sits within the margin of its bound, or a run hit its time cap; \
nothing undecided is rounded to a pass.</li>\
<li>Sections run only while they have work: a section whose claims are decided stops, and the time it leaves goes to \
the claims still open (\"How the time was spent\").</li>\
<li>Tables give each metric's <b>median</b> over trials in <b>one unit per column</b>; the interval is the median's \
confidence interval at the same ε. Charts show <b>every trial</b> as a dot, the median as a bar and its interval as a \
line. A ▷ or \"≥\" marks a run that hit its time cap (a lower bound).</li>\
<li>Absolute times are shown, but only ratios measured in the same run are judged. Reference figures come from other \
machines and other decades: compare their ratios, not their times.</li></ul></div>\n";

/// Renders the whole report.
pub fn render(report: &LabReport) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>Spindle lab report — {}</title><style>{STYLE}</style></head><body>\n",
        esc(&report.machine.cpu_name())
    );
    let _ = writeln!(
        h,
        "<h1>Spindle lab report</h1><p class=\"muted\">{} {} (commit {}) · {} profile · ε = {} per claim · started {} · {:.0} s of lab time</p>",
        esc(&report.tool),
        esc(&report.version),
        esc(&report.commit),
        report.profile.as_str(),
        report.eps,
        esc(&report.started_utc),
        report.lab_seconds
    );
    match report.state {
        RunState::Running => h.push_str("<p class=\"note\">This report is partial: the lab was still running when it was written (the page is rewritten every few seconds; reload it).</p>\n"),
        RunState::Interrupted => h.push_str("<p class=\"note\">This run was interrupted: the figures below are valid but incomplete.</p>\n"),
        RunState::Complete => {}
    }
    if let Some(b) = &report.baseline {
        let _ = writeln!(
            h,
            "<p class=\"note\">Compared with the baseline run {} of {} (commit {}, {}). The \"vs baseline run\" columns divide this run's median by that run's: the two runs are <b>unpaired</b>, so machine drift between them shows up in these ratios, which are not judged.</p>",
            esc(&b.path),
            esc(&b.started_utc),
            esc(&b.commit),
            esc(&b.machine)
        );
    }
    if let Some(load) = report.load_sentence() {
        let _ = writeln!(h, "<p class=\"note\">Load: {}.</p>", esc(&load));
    }
    if let Some(moved) = report.placement_sentence() {
        let _ = writeln!(h, "<p class=\"note\">Placement: {}.</p>", esc(&moved));
    }
    h.push_str(&HOW_TO_READ.replace("VERDICT_RULE", &esc(VERDICT_RULE)));
    machine(&mut h, report);
    claims_overview(&mut h, report);
    let visits = visits_grid(report);
    if !visits.rows.is_empty() {
        let _ = writeln!(
            h,
            "<h2>How the time was spent</h2><p class=\"small muted\">The planner had {:.0} s. A first pass gave every experiment a minimum share; the time left went to the experiments whose open claims it was most likely to decide.</p>",
            report.budget_s
        );
        grid(&mut h, &visits);
    }
    for e in &report.experiments {
        experiment(&mut h, e);
    }
    if !report.failures.is_empty() {
        h.push_str("<h2>Experiments that failed</h2><ul>\n");
        for f in &report.failures {
            let _ = writeln!(h, "<li><b>{}</b>: {}</li>", esc(&f.name), esc(&f.error));
        }
        h.push_str("</ul>\n");
    }
    h.push_str("</body></html>\n");
    h
}

fn machine(h: &mut String, report: &LabReport) {
    let m = &report.machine;
    h.push_str("<h2>Machine</h2>\n");
    if !m.anomalies.is_empty() {
        h.push_str(
            "<div class=\"alarm\"><b>Anomalies</b> (figures from this run may not transfer):<ul>",
        );
        for a in &m.anomalies {
            let _ = write!(h, "<li>{}</li>", esc(a));
        }
        h.push_str("</ul></div>\n");
    }
    h.push_str("<table class=\"kv small\">\n");
    for (k, v) in m.facts() {
        let _ = writeln!(h, "<tr><td>{}</td><td>{}</td></tr>", esc(&k), esc(&v));
    }
    h.push_str("</table>\n");
}

fn claims_overview(h: &mut String, report: &LabReport) {
    let guarantees = report.claims_by_kind(ClaimKind::Guarantee);
    h.push_str("<h2>Guarantees</h2>\n");
    if guarantees.is_empty() {
        h.push_str("<p class=\"muted\">No guarantee was tested in this run.</p>\n");
    } else {
        let _ = writeln!(
            h,
            "<p class=\"small muted\">What Spindle promises about its own primitives. {} hold, {} violated, {} undecided.</p>",
            count(&guarantees, Verdict::Holds),
            count(&guarantees, Verdict::Violated),
            count(&guarantees, Verdict::Undecided)
        );
        h.push_str("<div class=\"wide\"><table><tr><th>experiment</th><th>guarantee</th><th>verdict</th><th class=\"n\">median ratio</th><th>evidence</th></tr>\n");
        for (e, c) in &guarantees {
            let _ = writeln!(
                h,
                "<tr><td><a href=\"#{0}\">{0}</a></td><td>{1}</td><td>{2}</td><td class=\"n\">{3}</td><td class=\"small\">{4}</td></tr>",
                esc(e),
                esc(&c.statement),
                badge(c),
                num(c.ratio.median),
                esc(&c.explanation)
            );
        }
        h.push_str("</table></div>\n");
    }
    let reproductions = report.claims_by_kind(ClaimKind::Reproduction);
    if !reproductions.is_empty() {
        h.push_str("<h2>Reproductions</h2>\n");
        let _ = writeln!(
            h,
            "<p class=\"small muted\">Figures of the source documents re-measured here. This machine agrees in {}, differs in {}, undecided in {}. A difference is a finding about this machine, not a defect.</p>",
            count(&reproductions, Verdict::Holds),
            count(&reproductions, Verdict::Violated),
            count(&reproductions, Verdict::Undecided)
        );
        h.push_str("<div class=\"wide\"><table><tr><th>experiment</th><th>claim</th><th>the reference found</th><th class=\"n\">here: median ratio</th><th>verdict</th></tr>\n");
        for (e, c) in &reproductions {
            let _ = writeln!(
                h,
                "<tr><td><a href=\"#{0}\">{0}</a></td><td>{1}</td><td class=\"small\">{2}</td><td class=\"n\">{3}</td><td>{4}</td></tr>",
                esc(e),
                esc(&c.statement),
                esc(c.reference.as_deref().unwrap_or("")),
                num(c.ratio.median),
                badge(c)
            );
        }
        h.push_str("</table></div>\n");
    }
}

fn count(claims: &[(&str, &ClaimResult)], v: Verdict) -> usize {
    claims.iter().filter(|(_, c)| c.verdict == v).count()
}

fn grid(h: &mut String, g: &Grid) {
    h.push_str("<div class=\"wide\"><table><tr>");
    for (i, c) in g.headers.iter().enumerate() {
        let _ = write!(
            h,
            "<th{}>{}</th>",
            if i == 0 { "" } else { " class=\"n\"" },
            esc(c)
        );
    }
    h.push_str("</tr>\n");
    for (r, row) in g.rows.iter().enumerate() {
        let _ = write!(
            h,
            "<tr{}>",
            if g.baseline_row == Some(r) {
                " class=\"base\""
            } else {
                ""
            }
        );
        for (i, cell) in row.iter().enumerate() {
            let _ = write!(
                h,
                "<td{}>{}</td>",
                if i == 0 { "" } else { " class=\"n\"" },
                esc(cell)
            );
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</table></div>\n");
}

fn experiment(h: &mut String, e: &ExperimentResult) {
    let _ = writeln!(
        h,
        "<h2 id=\"{0}\">{0} — {1}</h2><p>{2}</p><p class=\"small muted\">{3} trials in {4:.1} s (budget {5:.0} s) · {6}{7}</p>",
        esc(&e.name),
        esc(&e.title),
        esc(&e.question),
        e.trials,
        e.wall_s,
        e.budget_s,
        esc(&e.stop_reason),
        if e.complete { "" } else { " · incomplete" }
    );
    for r in &e.references {
        let _ = writeln!(
            h,
            "<p class=\"small\">Reference: {}, “{}” ({}, {}). Their machine: {}.</p>",
            esc(&r.author),
            esc(&r.title),
            esc(&r.venue),
            r.year.map_or("undated".to_string(), |y| y.to_string()),
            esc(&r.machine)
        );
    }
    if !e.parameters.is_empty() {
        h.push_str("<details><summary>Parameters</summary><table class=\"kv small\">");
        for p in &e.parameters {
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td></tr>",
                esc(&p.name),
                esc(&p.value)
            );
        }
        h.push_str("</table></details>\n");
    }
    for s in &e.sections {
        let _ = writeln!(h, "<h3>{}</h3>", esc(&s.title));
        grid(h, &section_grid(s, true));
        if let Some(chart) = svg::section_dots(s) {
            let _ = writeln!(h, "<div class=\"figure\">{chart}</div>");
        }
        if let Some(chart) = svg::section_series(s) {
            let _ = writeln!(h, "<div class=\"figure\">{chart}</div>");
        }
    }
    for t in &e.tables {
        let _ = writeln!(h, "<h3>{}</h3>", esc(&t.title));
        grid(h, &Grid::from(t));
    }
    if e.sections.iter().any(|s| !s.stop_reason.is_empty()) {
        h.push_str("<details><summary>Trials per section</summary>");
        grid(h, &sections_run_grid(e));
        h.push_str("</details>\n");
    }
    if !e.claims.is_empty() {
        h.push_str("<h3>Claims</h3><div class=\"wide\"><table class=\"claims\"><tr><th>claim</th><th>verdict</th><th>evidence</th></tr>\n");
        for c in &e.claims {
            let _ = writeln!(
                h,
                "<tr><td>{}<br><span class=\"small muted\">{} · {}.{} / {}.{} {} {}{}</span></td><td>{}</td><td class=\"small ev\">{}. The ratio satisfied the bound in {} of {} trials.</td></tr>",
                esc(&c.statement),
                match c.kind {
                    ClaimKind::Guarantee => "guarantee",
                    ClaimKind::Reproduction => "reproduction",
                },
                esc(&c.numerator.variant),
                esc(&c.numerator.metric),
                esc(&c.denominator.variant),
                esc(&c.denominator.metric),
                c.symbol(),
                num(c.bound),
                c.reference
                    .as_ref()
                    .map(|r| format!("<br>{}", esc(r)))
                    .unwrap_or_default(),
                badge(c),
                esc(&c.explanation),
                c.successes,
                c.trials,
            );
        }
        h.push_str("</table></div>\n");
        if let Some(chart) = svg::claim_strips(&e.claims) {
            let _ = writeln!(h, "<div class=\"figure\">{chart}</div>");
        }
    }
    if !e.notes.is_empty() {
        h.push_str("<ul class=\"small\">");
        for n in &e.notes {
            let _ = write!(h, "<li>{}</li>", esc(n));
        }
        h.push_str("</ul>\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup() {
        assert_eq!(esc("<a & \"b\">"), "&lt;a &amp; &quot;b&quot;&gt;");
    }
}
