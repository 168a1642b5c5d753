//! The self-contained HTML report: inline CSS and SVG, nothing fetched from the network.

use std::fmt::Write;

use super::{svg, ExperimentResult, Figure, LabReport};
use crate::harness::{Summary, Verdict};

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn num(v: f64) -> String {
    if !v.is_finite() {
        return "–".into();
    }
    let a = v.abs();
    if a >= 1000.0 {
        format!("{v:.0}")
    } else if a >= 100.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

fn interval(s: &Summary) -> String {
    match (s.median_lo, s.median_hi) {
        (Some(lo), Some(hi)) => format!("[{}, {}]", num(lo), num(hi)),
        _ => "(too few trials)".into(),
    }
}

fn badge(v: Verdict) -> String {
    format!("<span class=\"badge {0}\">{0}</span>", v.as_str())
}

const STYLE: &str = r#"
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #222; max-width: 1040px; margin: 2em auto; padding: 0 1em; }
h1 { margin-bottom: 0.1em; } h2 { margin-top: 2em; border-bottom: 2px solid #ddd; padding-bottom: 0.2em; }
h3 { margin-top: 1.5em; font-size: 1.05em; }
table { border-collapse: collapse; margin: 0.6em 0 1em; font-size: 0.92em; }
th, td { padding: 0.25em 0.7em; border-bottom: 1px solid #e5e5e5; text-align: left; vertical-align: top; }
th { background: #f6f6f6; } td.n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.muted { color: #777; } .small { font-size: 0.88em; }
.badge { display: inline-block; padding: 0.05em 0.55em; border-radius: 0.8em; font-weight: 600; font-size: 0.85em; color: white; }
.badge.holds { background: #2ca02c; } .badge.violated { background: #d62728; } .badge.undecided { background: #e68c14; }
.figure { margin: 0.5em 0 1.5em; overflow-x: auto; } .figure svg { max-width: 100%; height: auto; }
.kv td:first-child { color: #555; white-space: nowrap; }
code { background: #f3f3f3; padding: 0 0.25em; border-radius: 3px; }
.partial { background: #fff3cd; border: 1px solid #e6c200; padding: 0.6em 1em; border-radius: 4px; }
"#;

/// Renders the whole report.
pub fn render_html(report: &LabReport) -> String {
    let mut h = String::new();
    let m = &report.machine;
    let _ = write!(
        h,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>Spindle lab report</title><style>{STYLE}</style></head><body>\n"
    );
    let _ = writeln!(
        h,
        "<h1>Spindle lab report</h1><p class=\"muted\">{} {} · {} profile · each claim decided at ε = {} · started {}</p>",
        report.tool,
        report.version,
        esc(&format!("{:?}", report.profile).to_lowercase()),
        report.eps,
        esc(&report.started_utc)
    );
    if report.partial {
        h.push_str("<p class=\"partial\">This report is partial: the lab was still running (or was interrupted) when it was written.</p>\n");
    }

    h.push_str("<h2>Machine</h2><table class=\"kv\">\n");
    let rows: Vec<(&str, String)> = vec![
        ("CPU", m.cpu_model.clone()),
        (
            "CPUs online / allowed",
            format!("{} / {:?}", m.cpus_online, m.cpus_allowed),
        ),
        ("virtualised", m.virtualised.to_string()),
        ("kernel", m.kernel.clone()),
        (
            "HZ",
            format!(
                "{} ({})",
                m.hz.map(|h| h.to_string()).unwrap_or_else(|| "?".into()),
                m.hz_source
            ),
        ),
        (
            "preemption",
            m.preemption.clone().unwrap_or_else(|| "unknown".into()),
        ),
        (
            "clocksource",
            format!(
                "{} (available: {})",
                m.clocksource, m.clocksources_available
            ),
        ),
        (
            "TSC",
            format!(
                "{:.4} GHz measured against CLOCK_MONOTONIC · constant: {} · nonstop: {}",
                m.tsc_ghz, m.tsc_constant, m.tsc_nonstop
            ),
        ),
        (
            "membarrier",
            format!(
                "mask {:#x}: {}",
                m.membarrier_mask,
                m.membarrier_commands.join(", ")
            ),
        ),
        (
            "rseq",
            m.rseq
                .map(|b| b.to_string())
                .unwrap_or_else(|| "unknown".into()),
        ),
        (
            "hardware perf counters",
            if m.perf_counters {
                "available".to_string()
            } else {
                format!("no ({})", m.perf_counters_error.clone().unwrap_or_default())
            },
        ),
        (
            "cache-line round trip",
            match (m.cache_line_round_trip_ns, m.round_trip_cpus) {
                (Some(ns), Some([a, b])) => {
                    format!("{ns:.0} ns between CPUs {a} and {b} (median of 5 × 20 000 ping-pongs)")
                }
                _ => "not measured (fewer than two CPUs, or pinning refused)".into(),
            },
        ),
        ("root", m.root.to_string()),
        ("memory", format!("{:.1} GiB", m.memory_gib)),
    ];
    for (k, v) in rows {
        let _ = writeln!(h, "<tr><td>{}</td><td>{}</td></tr>", esc(k), esc(&v));
    }
    h.push_str("</table>\n");

    h.push_str("<h2>Claims</h2>\n");
    h.push_str("<p class=\"small muted\">Each claim is a statement about two variants measured in the same trial. Every trial is a yes/no \
        outcome, and a CSM driver decides whether the claim held in more than 60% of trials (<b>holds</b>), in fewer than 40% \
        (<b>violated</b>), or could not be decided within the profile's budget or sits on the boundary (<b>undecided</b>). \
        The probability that a holds/violated verdict is wrong is at most ε.</p>\n");
    h.push_str(
        "<table><tr><th>experiment</th><th>claim</th><th>verdict</th><th>evidence</th></tr>\n",
    );
    for e in &report.experiments {
        for c in &e.claims {
            let _ = writeln!(
                h,
                "<tr><td><a href=\"#{0}\">{0}</a></td><td>{1}</td><td>{2}</td><td class=\"small\">{3}</td></tr>",
                esc(e.name),
                esc(&c.statement),
                badge(c.verdict),
                esc(&c.explanation)
            );
        }
    }
    h.push_str("</table>\n");

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
    h.push_str(
        "<h2>How to read this report</h2><ul class=\"small\">\
         <li>Variants of one experiment run interleaved: each trial runs every variant once, in a fresh random order.</li>\
         <li>Medians come with a confidence interval from order statistics (valid however many trials were run); p10–p90 shows the spread.</li>\
         <li>Absolute times are shown, but claims judge only ratios measured in the same trial.</li>\
         <li>Seed figures come from another machine and another decade: compare their <em>ratios</em>, not their times.</li>\
         </ul>\n",
    );
    h.push_str("</body></html>\n");
    h
}

fn experiment(h: &mut String, e: &ExperimentResult) {
    let _ = writeln!(
        h,
        "<h2 id=\"{0}\">{0} — {1}</h2><p class=\"muted\">seed {2} · {3} trials in {4:.1} s · {5}</p><p>{6}</p>",
        esc(e.name),
        esc(e.title),
        esc(e.seed),
        e.trials,
        e.wall_s,
        esc(&e.stop_reason),
        esc(&e.question)
    );
    if !e.parameters.is_empty() {
        h.push_str("<table class=\"kv small\">");
        for p in &e.parameters {
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td></tr>",
                esc(&p.name),
                esc(&p.value)
            );
        }
        h.push_str("</table>\n");
    }

    let has_ticks = e.variants.iter().any(|v| v.ticks.is_some());
    let has_ratio = e.variants.iter().any(|v| v.ratio_to_baseline.is_some());
    let has_ref = e.variants.iter().any(|v| v.reference_ratio.is_some());
    let _ = writeln!(
        h,
        "<table><tr><th>variant</th><th>threads</th><th>median {0}</th><th>median CI</th><th>p10 – p90</th>{1}{2}{3}</tr>",
        esc(&e.unit),
        if has_ticks { "<th>TSC ticks/op</th>" } else { "" },
        if has_ratio {
            format!("<th>× {}</th>", esc(e.baseline.unwrap_or("baseline")))
        } else {
            String::new()
        },
        if has_ref { "<th>seed ×</th>" } else { "" }
    );
    for v in &e.variants {
        let _ = write!(
            h,
            "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{} – {}</td>",
            esc(&v.label),
            v.threads,
            num(v.value.median),
            interval(&v.value),
            num(v.value.p10),
            num(v.value.p90)
        );
        if has_ticks {
            let _ = write!(
                h,
                "<td class=\"n\">{}</td>",
                v.ticks.map(|t| num(t.median)).unwrap_or_default()
            );
        }
        if has_ratio {
            let _ = write!(
                h,
                "<td class=\"n\">{}</td>",
                v.ratio_to_baseline
                    .map(|r| num(r.median))
                    .unwrap_or_default()
            );
        }
        if has_ref {
            let _ = write!(
                h,
                "<td class=\"n\">{}</td>",
                v.reference_ratio.map(num).unwrap_or_default()
            );
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</table>\n");
    if let Some(r) = &e.reference {
        let _ = writeln!(
            h,
            "<p class=\"small muted\">Seed figures: {} ({}).</p>",
            esc(&r.source),
            esc(&r.machine)
        );
    }

    for f in &e.figures {
        if let Figure::Table {
            title,
            columns,
            rows,
        } = f
        {
            let _ = write!(h, "<h3>{}</h3><table><tr>", esc(title));
            for c in columns {
                let _ = write!(h, "<th>{}</th>", esc(c));
            }
            h.push_str("</tr>\n");
            for row in rows {
                h.push_str("<tr>");
                for cell in row {
                    let _ = write!(h, "<td>{}</td>", esc(cell));
                }
                h.push_str("</tr>\n");
            }
            h.push_str("</table>\n");
            continue;
        }
        let title = match f {
            Figure::Bars { title, .. }
            | Figure::Paired { title, .. }
            | Figure::Strips { title, .. }
            | Figure::Table { title, .. } => title,
        };
        let _ = writeln!(
            h,
            "<h3>{}</h3><div class=\"figure\">{}</div>",
            esc(title),
            svg::render(f)
        );
    }

    if !e.claims.is_empty() {
        h.push_str("<h3>Claims</h3><table><tr><th>claim</th><th>verdict</th><th>trials (yes)</th><th>P(yes) interval</th><th>median ratio [CI]</th><th>why</th></tr>\n");
        for c in &e.claims {
            let _ = writeln!(
                h,
                "<tr><td>{}<br><span class=\"small muted\">{} / {} {} {}</span></td><td>{}</td><td class=\"n\">{} ({})</td><td class=\"n\">[{:.3}, {:.3}]</td><td class=\"n\">{} {}</td><td class=\"small\">{}</td></tr>",
                esc(&c.statement),
                esc(c.numerator),
                esc(c.denominator),
                if c.relation == "at_most" { "≤" } else { "≥" },
                c.bound,
                badge(c.verdict),
                c.trials,
                c.successes,
                c.success_interval[0],
                c.success_interval[1],
                num(c.ratio.median),
                interval(&c.ratio),
                esc(&c.explanation)
            );
        }
        h.push_str("</table>\n");
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

    #[test]
    fn numbers_keep_a_sensible_precision() {
        assert_eq!(num(0.12345), "0.123");
        assert_eq!(num(12.345), "12.35");
        assert_eq!(num(123.45), "123.5");
        assert_eq!(num(12345.6), "12346");
        assert_eq!(num(f64::NAN), "–");
    }
}
