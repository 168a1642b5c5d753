//! SVG charts for the HTML report, written by hand: dot-and-interval plots (every trial as a
//! dot, the median as a bar, its confidence interval as a line), claim strips, and time
//! series. No bars on log axes: a bar's length from an arbitrary base means nothing.
//!
//! Sizes are chosen so that at the report's width the text renders at 13 px (12 px for
//! ticks), and labels sit on their own line above each row so that no label is ever cut.

use std::fmt::Write;

use super::format::Scale;
use crate::results::{ClaimKind, ClaimResult, SectionResult, Unit, Verdict};

const WIDTH: f64 = 760.0;
const LEFT: f64 = 30.0;
const RIGHT: f64 = 30.0;
const ROW: f64 = 46.0;
const STRIP: f64 = 18.0;
const AXIS: f64 = 44.0;
const OURS: &str = "#1f77b4";
const CAPPED: &str = "#d62728";
const HOLDS: &str = "#2ca02c";
const VIOLATED: &str = "#d62728";
const UNDECIDED: &str = "#e68c14";

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A horizontal value axis, linear or logarithmic.
#[derive(Clone, Copy, Debug)]
struct Axis {
    lo: f64,
    hi: f64,
    log: bool,
}

impl Axis {
    /// Covers `values` (and `extra`); logarithmic when they span more than 30×.
    fn fit(values: impl Iterator<Item = f64>) -> Option<Axis> {
        let v: Vec<f64> = values.filter(|x| x.is_finite()).collect();
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if !lo.is_finite() {
            return None;
        }
        if lo > 0.0 && hi / lo > 30.0 {
            let (a, b) = (lo.log10().floor(), (hi * 1.0001).log10().ceil());
            return Some(Axis {
                lo: 10f64.powf(a),
                hi: 10f64.powf(b.max(a + 1.0)),
                log: true,
            });
        }
        let lo0 = if lo >= 0.0 && lo < 0.5 * hi { 0.0 } else { lo };
        let span = (hi - lo0).max(hi.abs() * 1e-3).max(1e-12);
        let step = nice_step(span / 5.0);
        let a = (lo0 / step).floor() * step;
        let b = ((hi / step).ceil() * step).max(a + step);
        Some(Axis {
            lo: a,
            hi: b,
            log: false,
        })
    }

    fn x(&self, v: f64) -> f64 {
        let f = if self.log {
            (v.max(self.lo * 1e-3).log10() - self.lo.log10()) / (self.hi.log10() - self.lo.log10())
        } else {
            (v - self.lo) / (self.hi - self.lo)
        };
        LEFT + f.clamp(-0.01, 1.01) * (WIDTH - LEFT - RIGHT)
    }

    fn ticks(&self) -> Vec<f64> {
        if self.log {
            let (a, b) = (
                self.lo.log10().round() as i32,
                self.hi.log10().round() as i32,
            );
            let decades = b - a;
            let mut t = Vec::new();
            for e in a..=b {
                let base = 10f64.powi(e);
                t.push(base);
                if decades <= 2 && e < b {
                    t.push(2.0 * base);
                    t.push(5.0 * base);
                }
            }
            t
        } else {
            let step = nice_step((self.hi - self.lo) / 5.0);
            let mut t = Vec::new();
            let mut v = (self.lo / step).ceil() * step;
            while v <= self.hi + step * 1e-9 {
                t.push(if v.abs() < step * 1e-9 { 0.0 } else { v });
                v += step;
            }
            t
        }
    }
}

/// 1, 2 or 5 × a power of ten, at least `raw`.
fn nice_step(raw: f64) -> f64 {
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|&s| s >= raw)
        .unwrap_or(10.0 * p)
}

fn open(h: f64, title: &str) -> String {
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {WIDTH} {h}\" width=\"{WIDTH}\" height=\"{h}\" role=\"img\" aria-label=\"{}\" font-family=\"system-ui, -apple-system, 'Segoe UI', sans-serif\" font-size=\"13\">\n",
        esc(title)
    )
}

/// The axis line, ticks, grid lines and the axis title, at `y`.
fn axis(s: &mut String, a: &Axis, top: f64, y: f64, scale: &Scale, title: &str) {
    let mut last_label = String::new();
    for t in a.ticks() {
        let x = a.x(t);
        let _ = writeln!(
            s,
            "<line x1=\"{x:.1}\" y1=\"{top:.1}\" x2=\"{x:.1}\" y2=\"{y:.1}\" stroke=\"#e4e4e4\"/>"
        );
        let label = scale.num(t);
        if label != last_label {
            let _ = writeln!(
                s,
                "<text x=\"{x:.1}\" y=\"{:.1}\" font-size=\"12\" text-anchor=\"middle\" fill=\"#444\">{}</text>",
                y + 15.0,
                esc(&label)
            );
            last_label = label;
        }
    }
    let _ = writeln!(
        s,
        "<line x1=\"{LEFT}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#888\"/>",
        WIDTH - RIGHT
    );
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#444\">{}</text>",
        (WIDTH + LEFT - RIGHT) / 2.0,
        y + 34.0,
        esc(title)
    );
}

/// Deterministic vertical jitter in [0, 1) so that equal values stay visible.
fn jitter(k: usize) -> f64 {
    (k as f64 * 0.618_034) % 1.0
}

/// Every trial of every variant of a section, on its primary metric.
pub fn section_dots(section: &SectionResult) -> Option<String> {
    let metric = section.metrics.first()?;
    let values = || {
        section
            .variants
            .iter()
            .filter_map(|v| v.metric(&metric.id))
            .flat_map(|m| m.values.iter().copied())
    };
    let scale = Scale::for_values(metric.unit, values());
    let a = Axis::fit(values())?;
    let n = section.variants.len() as f64;
    let h = 8.0 + n * ROW + AXIS;
    let mut s = open(h, &section.title);
    for (i, v) in section.variants.iter().enumerate() {
        let Some(m) = v.metric(&metric.id) else {
            continue;
        };
        let y0 = 8.0 + i as f64 * ROW;
        let baseline = section.baseline.as_deref() == Some(v.id.as_str());
        let capped = v.capped_count();
        let label = format!(
            "{}{}{}",
            v.label,
            if baseline { " (baseline)" } else { "" },
            if capped > 0 {
                format!(
                    " — capped in {capped} of {} trials (▷: at least)",
                    v.capped.len()
                )
            } else {
                String::new()
            }
        );
        let _ = writeln!(
            s,
            "<text x=\"{LEFT}\" y=\"{:.1}\"{} fill=\"#222\">{}</text>",
            y0 + 13.0,
            if baseline { " font-weight=\"600\"" } else { "" },
            esc(&label)
        );
        let strip = y0 + 19.0;
        let _ = writeln!(
            s,
            "<rect x=\"{LEFT}\" y=\"{strip:.1}\" width=\"{:.1}\" height=\"{STRIP}\" fill=\"#f7f7f7\"/>",
            WIDTH - LEFT - RIGHT
        );
        for (k, &x) in m.values.iter().enumerate() {
            if !x.is_finite() || (a.log && x <= 0.0) {
                continue;
            }
            let (cx, cy) = (a.x(x), strip + 3.0 + jitter(k) * (STRIP - 6.0));
            if v.capped.get(k).copied().unwrap_or(false) {
                let _ = writeln!(
                    s,
                    "<path d=\"M{:.1} {:.1} l7 3.5 l-7 3.5 z\" fill=\"none\" stroke=\"{CAPPED}\"/>",
                    cx - 3.5,
                    cy - 3.5
                );
            } else {
                let _ = writeln!(
                    s,
                    "<circle cx=\"{cx:.1}\" cy=\"{cy:.1}\" r=\"2.6\" fill=\"{OURS}\" fill-opacity=\"0.45\"/>"
                );
            }
        }
        let sm = &m.summary;
        if let (Some(lo), Some(hi)) = (sm.median_lo, sm.median_hi) {
            let y = strip + STRIP / 2.0;
            let _ = writeln!(
                s,
                "<line x1=\"{:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#111\" stroke-width=\"2\"/>",
                a.x(lo),
                a.x(hi)
            );
        }
        if sm.median.is_finite() {
            let x = a.x(sm.median);
            let _ = writeln!(
                s,
                "<line x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"#111\" stroke-width=\"3\"/>",
                strip - 2.0,
                strip + STRIP + 2.0
            );
        }
    }
    let title = format!(
        "{} ({}{}) — dot: one trial · bar: median · line: its confidence interval",
        metric.label,
        scale.suffix,
        if a.log { ", log scale" } else { "" }
    );
    axis(&mut s, &a, 6.0, 8.0 + n * ROW, &scale, &title);
    s.push_str("</svg>\n");
    Some(s)
}

fn verdict_color(c: &ClaimResult) -> &'static str {
    match c.verdict {
        Verdict::Holds => HOLDS,
        Verdict::Violated if c.kind == ClaimKind::Guarantee => VIOLATED,
        Verdict::Violated => UNDECIDED,
        Verdict::Undecided => "#999",
    }
}

/// Each claim's per-trial ratios against its bound; the side where the relation holds is
/// shaded.
pub fn claim_strips(claims: &[ClaimResult]) -> Option<String> {
    if claims.is_empty() {
        return None;
    }
    let a = Axis::fit(
        claims
            .iter()
            .flat_map(|c| c.ratios.iter().copied().chain([c.bound]))
            .filter(|x| *x > 0.0),
    )?;
    let scale = Scale::for_values(Unit::Ratio, [1.0]);
    let n = claims.len() as f64;
    let h = 8.0 + n * ROW + AXIS;
    let mut s = open(h, "claims");
    for (i, c) in claims.iter().enumerate() {
        let y0 = 8.0 + i as f64 * ROW;
        let _ = writeln!(
            s,
            "<text x=\"{LEFT}\" y=\"{:.1}\" fill=\"#222\"><tspan font-weight=\"600\" fill=\"{}\">{}</tspan> {} — {} / {} {} {}</text>",
            y0 + 13.0,
            verdict_color(c),
            esc(c.verdict.word(c.kind)),
            esc(&c.id),
            esc(&c.numerator.variant),
            esc(&c.denominator.variant),
            c.symbol(),
            c.bound
        );
        let strip = y0 + 19.0;
        let bx = a.x(c.bound);
        let (x0, x1) = if c.relation == "at_most" {
            (LEFT, bx)
        } else {
            (bx, WIDTH - RIGHT)
        };
        let _ = writeln!(
            s,
            "<rect x=\"{LEFT}\" y=\"{strip:.1}\" width=\"{:.1}\" height=\"{STRIP}\" fill=\"#f7f7f7\"/>",
            WIDTH - LEFT - RIGHT
        );
        let _ = writeln!(
            s,
            "<rect x=\"{x0:.1}\" y=\"{strip:.1}\" width=\"{:.1}\" height=\"{STRIP}\" fill=\"#e3f3e3\"/>",
            (x1 - x0).max(0.0)
        );
        for (k, &r) in c.ratios.iter().enumerate() {
            if r.is_finite() && r > 0.0 {
                let _ = writeln!(
                    s,
                    "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"2.6\" fill=\"{OURS}\" fill-opacity=\"0.5\"/>",
                    a.x(r),
                    strip + 3.0 + jitter(k) * (STRIP - 6.0)
                );
            }
        }
        let _ = writeln!(
            s,
            "<line x1=\"{bx:.1}\" y1=\"{:.1}\" x2=\"{bx:.1}\" y2=\"{:.1}\" stroke=\"#111\" stroke-width=\"2\" stroke-dasharray=\"4 2\"/>",
            strip - 3.0,
            strip + STRIP + 3.0
        );
    }
    let title = format!(
        "ratio per trial{} — green: where the relation holds · dashed: the bound",
        if a.log { " (log scale)" } else { "" }
    );
    axis(&mut s, &a, 6.0, 8.0 + n * ROW, &scale, &title);
    s.push_str("</svg>\n");
    Some(s)
}

/// The time series of a section's variants (their last trial), one line each.
pub fn section_series(section: &SectionResult) -> Option<String> {
    let series: Vec<_> = section
        .variants
        .iter()
        .filter_map(|v| v.series.as_ref().map(|s| (v, s)))
        .collect();
    if series.is_empty() {
        return None;
    }
    let metric = section
        .metrics
        .iter()
        .find(|m| m.id == series[0].1.metric)
        .or(section.metrics.first())?;
    let all = || series.iter().flat_map(|(_, s)| s.values.iter().copied());
    let scale = Scale::for_values(metric.unit, all());
    let ymax = all().filter(|v| v.is_finite()).fold(0.0, f64::max);
    if ymax <= 0.0 {
        return None;
    }
    let ystep = nice_step(ymax / 4.0);
    let ytop = (ymax / ystep).ceil() * ystep;
    let tmax = series
        .iter()
        .map(|(_, s)| s.step_s * s.values.len() as f64)
        .fold(0.0, f64::max);
    let xa = Axis::fit([0.0, tmax].into_iter())?;
    let (top, plot_h) = (30.0 + 20.0 * series.len() as f64, 200.0);
    let h = top + plot_h + AXIS;
    let mut s = open(h, &section.title);
    let colors = [
        "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#e377c2",
    ];
    for (k, (v, _)) in series.iter().enumerate() {
        let y = 18.0 + 20.0 * k as f64;
        let c = colors[k % colors.len()];
        let _ = writeln!(
            s,
            "<line x1=\"{LEFT}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"{c}\" stroke-width=\"3\"/><text x=\"{:.1}\" y=\"{:.1}\" fill=\"#222\">{}</text>",
            y - 4.0,
            LEFT + 24.0,
            y - 4.0,
            LEFT + 30.0,
            y,
            esc(&v.label)
        );
    }
    let yv = |v: f64| top + plot_h - (v / ytop) * plot_h;
    let mut t = 0.0;
    while t <= ytop + ystep * 1e-9 {
        let y = yv(t);
        let _ = writeln!(
            s,
            "<line x1=\"{LEFT}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#e4e4e4\"/><text x=\"{:.1}\" y=\"{:.1}\" font-size=\"12\" fill=\"#444\">{}</text>",
            WIDTH - RIGHT,
            LEFT + 2.0,
            y - 3.0,
            esc(&scale.with_unit(t))
        );
        t += ystep;
    }
    for (k, (_, ser)) in series.iter().enumerate() {
        let c = colors[k % colors.len()];
        let points: Vec<String> = ser
            .values
            .iter()
            .enumerate()
            .filter(|(_, v)| v.is_finite())
            .map(|(i, &v)| format!("{:.1},{:.1}", xa.x((i as f64 + 0.5) * ser.step_s), yv(v)))
            .collect();
        let _ = writeln!(
            s,
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{c}\" stroke-width=\"2\"/>",
            points.join(" ")
        );
    }
    let time_scale = Scale {
        divisor: 1.0,
        suffix: "s",
    };
    axis(
        &mut s,
        &xa,
        top,
        top + plot_h,
        &time_scale,
        &format!(
            "seconds into the run (last trial) — {} ({})",
            metric.label, scale.suffix
        ),
    );
    s.push_str("</svg>\n");
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axes_pick_log_only_for_wide_ranges() {
        let a = Axis::fit([1.0, 20.0].into_iter()).unwrap();
        assert!(!a.log && a.lo == 0.0 && a.hi >= 20.0, "{a:?}");
        let a = Axis::fit([0.3, 200.0].into_iter()).unwrap();
        assert!(a.log && a.lo <= 0.3 && a.hi >= 200.0, "{a:?}");
        assert!(Axis::fit([f64::NAN].into_iter()).is_none());
        // Every tick label is distinct.
        let a = Axis::fit([0.9, 1.1].into_iter()).unwrap();
        let t = a.ticks();
        assert!(t.len() >= 2);
        let mut labels: Vec<String> = t.iter().map(|v| format!("{v:.3}")).collect();
        labels.dedup();
        assert_eq!(labels.len(), t.len());
    }

    #[test]
    fn nice_steps() {
        assert_eq!(nice_step(0.3), 0.5);
        assert_eq!(nice_step(7.0), 10.0);
        assert_eq!(nice_step(1.0), 1.0);
    }
}
