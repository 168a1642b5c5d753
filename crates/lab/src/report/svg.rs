//! SVG charts for the HTML report, drawn with plotters into strings (no files, no network).

use plotters::prelude::*;

use super::{Bar, Figure, PairedRow, Strip};

const WIDTH: u32 = 860;
const ROW: u32 = 28;
const LABEL_AREA: u32 = 290;
const OURS: RGBColor = RGBColor(31, 119, 180);
const SEED: RGBColor = RGBColor(170, 170, 170);
const HOLDS: RGBColor = RGBColor(44, 160, 44);
const VIOLATED: RGBColor = RGBColor(214, 39, 40);
const UNDECIDED: RGBColor = RGBColor(230, 140, 20);

/// Renders a figure, or a short message in place of the chart when it has nothing to draw or
/// the drawing fails (a report must never be lost to a chart).
pub fn render(figure: &Figure) -> String {
    let result = match figure {
        Figure::Bars {
            axis, log, bars, ..
        } => bars_svg(axis, *log, bars),
        Figure::Paired {
            axis,
            log,
            series,
            rows,
            ..
        } => paired_svg(axis, *log, series, rows),
        Figure::Strips {
            axis, log, strips, ..
        } => strips_svg(axis, *log, strips),
        // Tables are drawn as HTML tables by the report, not as charts.
        Figure::Table { .. } => Ok(String::new()),
    };
    result.unwrap_or_else(|e| format!("<p class=\"muted\">(chart unavailable: {e})</p>"))
}

type Res = Result<String, String>;

fn err<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

/// Axis range covering `values` with some air; for log axes, whole decades.
fn x_range(values: impl Iterator<Item = f64>, log: bool) -> Option<(f64, f64)> {
    let finite: Vec<f64> = values
        .filter(|v| v.is_finite() && (!log || *v > 0.0))
        .collect();
    let lo = finite.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = finite.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if !lo.is_finite() || !hi.is_finite() {
        return None;
    }
    if log {
        Some((
            10f64.powf((lo * 0.9).log10().floor()),
            10f64.powf((hi * 1.05).log10().ceil()),
        ))
    } else {
        Some((0.0f64.min(lo), hi * 1.1 + f64::EPSILON))
    }
}

fn height(rows: usize) -> u32 {
    60 + ROW * rows.max(1) as u32
}

/// Draws rows of marks on a horizontal value axis (linear or log) with row labels on the left.
fn frame<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    labels: &[String],
    axis: &str,
    log: bool,
    range: (f64, f64),
    mut draw_linear: impl FnMut(
        &mut ChartContext<
            '_,
            DB,
            Cartesian2d<
                plotters::coord::types::RangedCoordf64,
                plotters::coord::types::RangedCoordf64,
            >,
        >,
    ) -> Result<(), String>,
    mut draw_log: impl FnMut(
        &mut ChartContext<
            '_,
            DB,
            Cartesian2d<
                plotters::coord::combinators::LogCoord<f64>,
                plotters::coord::types::RangedCoordf64,
            >,
        >,
    ) -> Result<(), String>,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let n = labels.len() as f64;
    let label_of = |y: &f64| {
        // Rows are drawn at y = i + 0.5 from the top; label the centres only.
        let i = (n - y - 0.5).round();
        if (y.fract() - 0.5).abs() < 1e-6 && i >= 0.0 && (i as usize) < labels.len() {
            labels[i as usize].clone()
        } else {
            String::new()
        }
    };
    let mut builder = ChartBuilder::on(root);
    builder
        .margin(10)
        .margin_right(30)
        .x_label_area_size(40)
        .y_label_area_size(LABEL_AREA);
    if log {
        let mut chart = builder
            .build_cartesian_2d((range.0..range.1).log_scale(), 0.0..n)
            .map_err(err)?;
        mesh(&mut chart, labels.len(), axis, &label_of)?;
        draw_log(&mut chart)
    } else {
        let mut chart = builder
            .build_cartesian_2d(range.0..range.1, 0.0..n)
            .map_err(err)?;
        mesh(&mut chart, labels.len(), axis, &label_of)?;
        draw_linear(&mut chart)
    }
}

/// Axes, ticks and row labels, the same for linear and log value axes.
fn mesh<DB, X>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<X, plotters::coord::types::RangedCoordf64>>,
    rows: usize,
    axis: &str,
    label_of: &dyn Fn(&f64) -> String,
) -> Result<(), String>
where
    DB: DrawingBackend,
    DB::ErrorType: 'static,
    X: Ranged<ValueType = f64> + plotters::coord::ranged1d::ValueFormatter<f64>,
{
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(rows * 2 + 1)
        .y_label_formatter(label_of)
        .x_desc(axis)
        .x_label_formatter(&|v| short_number(*v))
        .label_style(("sans-serif", 13))
        .draw()
        .map_err(err)
}

/// Row `i` (from the top) occupies y in [n - i - 1, n - i].
fn row_span(n: usize, i: usize) -> (f64, f64) {
    ((n - i - 1) as f64, (n - i) as f64)
}

macro_rules! draw_both {
    ($root:expr, $labels:expr, $axis:expr, $log:expr, $range:expr, |$chart:ident| $body:block) => {
        frame(
            $root,
            $labels,
            $axis,
            $log,
            $range,
            |$chart| $body,
            |$chart| $body,
        )
    };
}

fn bars_svg(axis: &str, log: bool, bars: &[Bar]) -> Res {
    let range = x_range(
        bars.iter()
            .flat_map(|b| [Some(b.value), b.lo, b.hi])
            .flatten(),
        log,
    )
    .ok_or("no finite values")?;
    let labels: Vec<String> = bars.iter().map(|b| b.label.clone()).collect();
    let n = bars.len();
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH, height(n))).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        draw_both!(&root, &labels, axis, log, range, |chart| {
            for (i, b) in bars.iter().enumerate() {
                let (y0, y1) = row_span(n, i);
                let base = if log { range.0 } else { 0.0 };
                chart
                    .draw_series(std::iter::once(Rectangle::new(
                        [(base, y0 + 0.18), (b.value, y1 - 0.18)],
                        OURS.mix(0.85).filled(),
                    )))
                    .map_err(err)?;
                if let (Some(lo), Some(hi)) = (b.lo, b.hi) {
                    let ym = (y0 + y1) / 2.0;
                    chart
                        .draw_series(std::iter::once(PathElement::new(
                            vec![(lo, ym), (hi, ym)],
                            BLACK.stroke_width(2),
                        )))
                        .map_err(err)?;
                    for x in [lo, hi] {
                        chart
                            .draw_series(std::iter::once(PathElement::new(
                                vec![(x, ym - 0.15), (x, ym + 0.15)],
                                BLACK.stroke_width(2),
                            )))
                            .map_err(err)?;
                    }
                }
            }
            Ok(())
        })?;
        root.present().map_err(err)?;
    }
    Ok(out)
}

fn paired_svg(axis: &str, log: bool, series: &[String; 2], rows: &[PairedRow]) -> Res {
    let range =
        x_range(rows.iter().flat_map(|r| r.values).flatten(), log).ok_or("no finite values")?;
    let labels: Vec<String> = rows.iter().map(|r| r.label.clone()).collect();
    let n = rows.len();
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH, height(n) + 24)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let (legend, body) = root.split_vertically(24);
        for (k, (name, color)) in series.iter().zip([OURS, SEED]).enumerate() {
            let x = LABEL_AREA as i32 + 20 + k as i32 * 260;
            legend
                .draw(&Rectangle::new([(x, 6), (x + 14, 18)], color.filled()))
                .map_err(err)?;
            legend
                .draw(&Text::new(name.clone(), (x + 20, 6), ("sans-serif", 13)))
                .map_err(err)?;
        }
        draw_both!(&body, &labels, axis, log, range, |chart| {
            for (i, r) in rows.iter().enumerate() {
                let (y0, y1) = row_span(n, i);
                let base = if log { range.0 } else { 0.0 };
                let mid = (y0 + y1) / 2.0;
                for (k, (v, color)) in r.values.iter().zip([OURS, SEED]).enumerate() {
                    if let Some(v) = v.filter(|v| v.is_finite() && (!log || *v > 0.0)) {
                        let (a, b) = if k == 0 {
                            (mid, y1 - 0.12)
                        } else {
                            (y0 + 0.12, mid)
                        };
                        chart
                            .draw_series(std::iter::once(Rectangle::new(
                                [(base, a), (v, b)],
                                color.filled(),
                            )))
                            .map_err(err)?;
                    }
                }
            }
            Ok(())
        })?;
        root.present().map_err(err)?;
    }
    Ok(out)
}

fn strips_svg(axis: &str, log: bool, strips: &[Strip]) -> Res {
    let range = x_range(
        strips
            .iter()
            .flat_map(|s| s.values.iter().copied().chain([s.bound])),
        log,
    )
    .ok_or("no finite values")?;
    let labels: Vec<String> = strips.iter().map(|s| s.label.clone()).collect();
    let n = strips.len();
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH, height(n))).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        draw_both!(&root, &labels, axis, log, range, |chart| {
            for (i, s) in strips.iter().enumerate() {
                let (y0, y1) = row_span(n, i);
                let color = match s.verdict.as_str() {
                    "holds" => HOLDS,
                    "violated" => VIOLATED,
                    _ => UNDECIDED,
                };
                // Deterministic jitter so that repeated values stay visible.
                let points = s
                    .values
                    .iter()
                    .enumerate()
                    .filter(|(_, v)| v.is_finite() && (!log || **v > 0.0))
                    .map(|(k, &v)| {
                        let jitter = ((k as f64 * 0.618_034) % 1.0) * 0.5 + 0.25;
                        Circle::new((v, y0 + jitter), 3, color.mix(0.6).filled())
                    });
                chart.draw_series(points).map_err(err)?;
                chart
                    .draw_series(std::iter::once(PathElement::new(
                        vec![(s.bound, y0 + 0.05), (s.bound, y1 - 0.05)],
                        BLACK.stroke_width(2),
                    )))
                    .map_err(err)?;
            }
            Ok(())
        })?;
        root.present().map_err(err)?;
    }
    Ok(out)
}

/// 0.5, 3, 40, 1.2k, 3M: axis ticks that stay short.
fn short_number(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".into()
    } else if a >= 1e6 {
        format!("{}M", trim(v / 1e6))
    } else if a >= 1e3 {
        format!("{}k", trim(v / 1e3))
    } else {
        trim(v)
    }
}

fn trim(v: f64) -> String {
    let s = if v.abs() >= 10.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_render_to_svg() {
        let bars = Figure::Bars {
            title: "t".into(),
            axis: "ns".into(),
            log: true,
            bars: vec![
                Bar {
                    label: "one".into(),
                    value: 1.0,
                    lo: Some(0.9),
                    hi: Some(1.1),
                },
                Bar {
                    label: "two".into(),
                    value: 40.0,
                    lo: None,
                    hi: None,
                },
            ],
        };
        let svg = render(&bars);
        assert!(
            svg.starts_with("<svg") && svg.contains("one") && svg.contains("<rect"),
            "{svg}"
        );
        let paired = Figure::Paired {
            title: "t".into(),
            axis: "x".into(),
            log: false,
            series: ["ours".into(), "seed".into()],
            rows: vec![PairedRow {
                label: "r".into(),
                values: [Some(2.0), None],
            }],
        };
        assert!(render(&paired).contains("ours"));
        let strips = Figure::Strips {
            title: "t".into(),
            axis: "x".into(),
            log: true,
            strips: vec![Strip {
                label: "c".into(),
                values: vec![2.0, 3.0],
                bound: 1.5,
                verdict: "holds".into(),
            }],
        };
        assert!(render(&strips).contains("<circle"));
    }

    #[test]
    fn empty_charts_degrade_to_a_message() {
        let bars = Figure::Bars {
            title: "t".into(),
            axis: "ns".into(),
            log: true,
            bars: vec![],
        };
        assert!(render(&bars).contains("chart unavailable"));
    }

    #[test]
    fn log_axes_leave_room_left_of_the_smallest_bar() {
        // A bar of exactly 1 must not start at the axis origin (it would have no length).
        let (lo, hi) = x_range([1.0, 20.0].into_iter(), true).unwrap();
        assert!(lo < 1.0 && hi >= 20.0, "{lo} {hi}");
        assert_eq!(x_range([f64::NAN].into_iter(), true), None);
        assert_eq!(x_range([-1.0, 0.0].into_iter(), true), None);
    }

    #[test]
    fn short_numbers() {
        assert_eq!(short_number(1500.0), "1.5k");
        assert_eq!(short_number(0.5), "0.5");
        assert_eq!(short_number(40.0), "40");
        assert_eq!(short_number(2_000_000.0), "2M");
    }
}
