//! How an experiment is declared: parameters, sections, variants, one trial's measurement,
//! claims. The [`runner`](crate::runner) does everything else.
//!
//! ```text
//! Plan
//!  ├─ Section "signal"  (baseline variant, metrics: one unit per column)
//!  │    ├─ Variant "signal-store"  ── run(n) → Span / Sample        (one per trial)
//!  │    └─ Variant "signal-sp"
//!  ├─ Section "asleep" …
//!  ├─ Claim: guarantee "sp-signal": signal-sp / signal-store ≤ 1.25   (per trial, CSM-decided)
//!  └─ finish: derived tables and notes
//! ```
//!
//! A variant's closure measures *one* run. Three shapes:
//! - [`Variant::per_op`]: `run(n)` performs `n` operations and returns the [`Span`] it took; the
//!   runner picks `n` so that a run lasts the profile's target, and records nanoseconds and TSC
//!   ticks per operation (metrics `time` and `ticks`, see [`Section::per_op`]).
//! - [`Variant::calibrated`]: `run(n)` does `n` units of work and returns a [`Sample`] of named
//!   metrics; the runner picks `n` from the wall time of the call.
//! - [`Variant::fixed`]: `run()` does what the experiment sized itself and returns a [`Sample`].

//!
//! # Writing an experiment
//!
//! Parameters come from the [`Ctx`](crate::runner::Ctx) (cores, CPU pairs, the run target),
//! state lives on the stack, the plan borrows it, and [`Ctx::measure`](crate::runner::Ctx::measure)
//! does the rest. Add the experiment to [`experiments::all`](crate::experiments::all).
//!
//! ```no_run
//! use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
//! use spindle_lab::kit::{time, CachePadded};
//! use spindle_lab::runner::{Ctx, Experiment};
//! use spindle_lab::spec::{Claim, Info, Plan, Section, Variant};
//!
//! struct Increments;
//!
//! impl Experiment for Increments {
//!     fn info(&self) -> Info {
//!         Info {
//!             name: "increments",
//!             title: "A locked add against a plain one",
//!             summary: "one counter, one thread",
//!             question: "What does `lock` cost on an uncontended add?",
//!             references: &[],
//!             quick_seconds: 10,
//!         }
//!     }
//!
//!     fn run(&self, ctx: &mut Ctx) -> Result<(), String> {
//!         let counter = CachePadded(AtomicU64::new(0));
//!         let c = &*counter;
//!         let mut plan = Plan::new();
//!         plan.section(Section::per_op("inc", "Incrementing a counter", "increment").baseline("plain"));
//!         plan.variant(Variant::per_op("inc", "plain", "load + store", move |n| {
//!             time(|| (0..n).for_each(|_| c.store(c.load(Relaxed) + 1, Relaxed)))
//!         }));
//!         plan.variant(Variant::per_op("inc", "locked", "lock xadd", move |n| {
//!             time(|| (0..n).for_each(|_| { c.fetch_add(1, Relaxed); }))
//!         }));
//!         plan.claim(Claim::guarantee("cost", "a locked add costs at least 2 × a plain one").ratio("locked", "plain").at_least(2.0));
//!         ctx.measure(plan)
//!     }
//! }
//! ```

use crate::kit::Span;
use crate::references::Doc;
use crate::results::{Better, ExperimentResult, Unit};

/// What `spindle lab --list` shows, and what the runner budgets.
#[derive(Clone, Copy, Debug)]
pub struct Info {
    pub name: &'static str,
    pub title: &'static str,
    /// One line for `--list`.
    pub summary: &'static str,
    /// The question the experiment answers, for the report.
    pub question: &'static str,
    pub references: &'static [Doc],
    /// Seconds this experiment may take in the quick profile (the full profile allows six
    /// times as much). The sum over the catalogue is the lab's time bound.
    pub quick_seconds: u32,
}

/// A column of a section: one metric, one unit.
#[derive(Clone, Debug)]
pub struct Metric {
    pub id: &'static str,
    pub label: String,
    pub unit: Unit,
    pub better: Better,
    pub show_max: bool,
    pub hidden: bool,
}

impl Metric {
    /// A duration in nanoseconds; lower is better.
    pub fn time(id: &'static str, label: impl Into<String>) -> Self {
        Self::new(id, label, Unit::Nanoseconds, Better::Lower)
    }

    /// Events per second; higher is better.
    pub fn rate(id: &'static str, label: impl Into<String>) -> Self {
        Self::new(id, label, Unit::PerSecond, Better::Higher)
    }

    /// A count; lower is better.
    pub fn count(id: &'static str, label: impl Into<String>) -> Self {
        Self::new(id, label, Unit::Count, Better::Lower)
    }

    /// A dimensionless ratio; lower is better.
    pub fn ratio(id: &'static str, label: impl Into<String>) -> Self {
        Self::new(id, label, Unit::Ratio, Better::Lower)
    }

    pub fn new(id: &'static str, label: impl Into<String>, unit: Unit, better: Better) -> Self {
        Metric {
            id,
            label: label.into(),
            unit,
            better,
            show_max: false,
            hidden: false,
        }
    }

    /// Recorded and usable by claims and derived tables, but not a column of the section's
    /// table (e.g. one figure per input size).
    pub fn hidden(mut self) -> Self {
        self.hidden = true;
        self
    }

    /// Show the largest per-trial value beside the median (worst waits, peak garbage).
    pub fn show_max(mut self) -> Self {
        self.show_max = true;
        self
    }

    pub fn higher_is_better(mut self) -> Self {
        self.better = Better::Higher;
        self
    }
}

/// A group of variants compared in the same units against one baseline. The first metric is
/// the section's primary one: charts show it, and claims use it unless they name another.
#[derive(Clone, Debug)]
pub struct Section {
    pub id: &'static str,
    pub title: String,
    pub baseline: Option<String>,
    pub metrics: Vec<Metric>,
}

impl Section {
    pub fn new(id: &'static str, title: impl Into<String>) -> Self {
        Section {
            id,
            title: title.into(),
            baseline: None,
            metrics: Vec::new(),
        }
    }

    /// A section of [`Variant::per_op`] variants: metrics `time` (ns per `what`) and `ticks`.
    pub fn per_op(id: &'static str, title: impl Into<String>, what: &str) -> Self {
        Self::new(id, title)
            .metric(Metric::time("time", format!("per {what}")))
            .metric(Metric::new(
                "ticks",
                format!("TSC ticks per {what}"),
                Unit::Ticks,
                Better::Lower,
            ))
    }

    pub fn baseline(mut self, variant: impl Into<String>) -> Self {
        self.baseline = Some(variant.into());
        self
    }

    pub fn metric(mut self, m: Metric) -> Self {
        self.metrics.push(m);
        self
    }
}

/// What one run of a variant measured.
#[derive(Clone, Debug, Default)]
pub struct Sample {
    pub values: Vec<(&'static str, f64)>,
    pub pooled: Vec<(&'static str, Vec<f64>)>,
    pub series: Option<(&'static str, f64, Vec<f64>)>,
    pub capped: bool,
    /// How long the measured part of the run took, when the run also does unmeasured setup
    /// (starting load threads, say): calibration sizes the work by this instead of the call.
    pub elapsed: Option<std::time::Duration>,
}

impl Sample {
    pub fn new() -> Self {
        Self::default()
    }

    /// One value of a metric for this trial.
    pub fn with(mut self, metric: &'static str, value: f64) -> Self {
        self.values.push((metric, value));
        self
    }

    /// Many observations of a metric (pooled over trials into quantiles), e.g. every single
    /// latency of a batch whose median is this trial's value.
    pub fn pool(mut self, metric: &'static str, values: Vec<f64>) -> Self {
        self.pooled.push((metric, values));
        self
    }

    /// A time series (`step_s` seconds apart); the report draws the last trial's.
    pub fn series(mut self, metric: &'static str, step_s: f64, values: Vec<f64>) -> Self {
        self.series = Some((metric, step_s, values));
        self
    }

    /// The run hit a time cap: its values are lower bounds, and claims that depend on it in
    /// this trial cannot be judged.
    pub fn capped(mut self, capped: bool) -> Self {
        self.capped |= capped;
        self
    }

    /// The measured part took `d` (see [`Sample::elapsed`]).
    pub fn took(mut self, d: std::time::Duration) -> Self {
        self.elapsed = Some(d);
        self
    }

    pub fn value(&self, metric: &str) -> Option<f64> {
        self.values
            .iter()
            .find(|(m, _)| *m == metric)
            .map(|(_, v)| *v)
    }
}

pub(crate) enum Body<'a> {
    PerOp(Box<dyn FnMut(u64) -> Span + 'a>),
    Calibrated(Box<dyn FnMut(u64) -> Sample + 'a>),
    Fixed(Box<dyn FnMut() -> Sample + 'a>),
}

/// A contestant: ours, a peer, or a floor.
pub struct Variant<'a> {
    pub section: &'static str,
    pub id: String,
    pub label: String,
    pub threads: usize,
    /// The reference document's ratio to the section's baseline.
    pub reference_ratio: Option<f64>,
    /// Largest `n` calibration may pick (per-op and calibrated variants).
    pub max_work: u64,
    /// Use this `n` instead of calibrating.
    pub fixed_work: Option<u64>,
    pub(crate) body: Body<'a>,
}

impl<'a> Variant<'a> {
    fn with_body(
        section: &'static str,
        id: impl Into<String>,
        label: impl Into<String>,
        body: Body<'a>,
    ) -> Self {
        Variant {
            section,
            id: id.into(),
            label: label.into(),
            threads: 1,
            reference_ratio: None,
            max_work: 1 << 40,
            fixed_work: None,
            body,
        }
    }

    /// `run(n)` performs `n` operations and returns how long they took.
    pub fn per_op(
        section: &'static str,
        id: impl Into<String>,
        label: impl Into<String>,
        run: impl FnMut(u64) -> Span + 'a,
    ) -> Self {
        Self::with_body(section, id, label, Body::PerOp(Box::new(run)))
    }

    /// `run(n)` does `n` units of work (the runner sizes `n` from wall time).
    pub fn calibrated(
        section: &'static str,
        id: impl Into<String>,
        label: impl Into<String>,
        run: impl FnMut(u64) -> Sample + 'a,
    ) -> Self {
        Self::with_body(section, id, label, Body::Calibrated(Box::new(run)))
    }

    /// `run()` does work the experiment sized itself.
    pub fn fixed(
        section: &'static str,
        id: impl Into<String>,
        label: impl Into<String>,
        run: impl FnMut() -> Sample + 'a,
    ) -> Self {
        Self::with_body(section, id, label, Body::Fixed(Box::new(run)))
    }

    pub fn threads(mut self, threads: usize) -> Self {
        self.threads = threads;
        self
    }

    /// The reference document's ratio to the section's baseline (None: it has none).
    pub fn reference(mut self, ratio: impl Into<Option<f64>>) -> Self {
        self.reference_ratio = ratio.into();
        self
    }

    pub fn max_work(mut self, n: u64) -> Self {
        self.max_work = n.max(1);
        self
    }

    /// Always run with `n` units of work (no calibration).
    pub fn work(mut self, n: u64) -> Self {
        self.fixed_work = Some(n.max(1));
        self
    }
}

/// Whether a claim bounds a ratio from above or from below.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Relation {
    AtMost(f64),
    AtLeast(f64),
}

impl Relation {
    pub fn holds(self, ratio: f64) -> bool {
        match self {
            Relation::AtMost(b) => ratio <= b,
            Relation::AtLeast(b) => ratio >= b,
        }
    }

    pub fn bound(self) -> f64 {
        match self {
            Relation::AtMost(b) | Relation::AtLeast(b) => b,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Relation::AtMost(_) => "at_most",
            Relation::AtLeast(_) => "at_least",
        }
    }

    pub fn symbol(self) -> &'static str {
        match self {
            Relation::AtMost(_) => "≤",
            Relation::AtLeast(_) => "≥",
        }
    }
}

/// A statement about the ratio of two (variant, metric) values measured in the same trial.
///
/// The runner decides it from the *median* of the per-trial ratios: it holds when Robbins'
/// confidence sequence for that median lies more than `margin` inside the bound, is violated
/// when it lies more than `margin` beyond it, and is undecided otherwise (too few trials, or a
/// median within `margin` of the bound). A claim the budget cannot decide is reported
/// undecided, never rounded.
#[derive(Clone, Debug)]
pub struct Claim {
    pub id: &'static str,
    pub kind: crate::results::ClaimKind,
    pub statement: String,
    pub reference: Option<(Doc, String)>,
    pub numerator: (String, Option<&'static str>),
    pub denominator: (String, Option<&'static str>),
    pub relation: Relation,
    /// Relative distance from the bound inside which the median is "at the bound" (see
    /// [`MARGIN`]).
    pub margin: f64,
}

/// The default [`Claim::margin`]: 2%. A verdict needs the median ratio at least 2% from its
/// bound, so two runs whose medians differ by less than 4% cannot give opposite verdicts, and a
/// median 5% from its bound is decided once its confidence sequence is narrower than ±3%.
pub const MARGIN: f64 = 0.02;

impl Claim {
    fn new(id: &'static str, kind: crate::results::ClaimKind, statement: String) -> Self {
        Claim {
            id,
            kind,
            statement,
            reference: None,
            numerator: (String::new(), None),
            denominator: (String::new(), None),
            relation: Relation::AtMost(1.0),
            margin: MARGIN,
        }
    }

    /// Spindle's promise about its own code: a violation is a defect.
    pub fn guarantee(id: &'static str, statement: impl Into<String>) -> Self {
        Self::new(id, crate::results::ClaimKind::Guarantee, statement.into())
    }

    /// A figure of `doc` re-measured; `figure` says what the document found, in words.
    pub fn reproduction(
        id: &'static str,
        statement: impl Into<String>,
        doc: Doc,
        figure: impl Into<String>,
    ) -> Self {
        let mut c = Self::new(
            id,
            crate::results::ClaimKind::Reproduction,
            statement.into(),
        );
        c.reference = Some((doc, figure.into()));
        c
    }

    /// The ratio of two variants' primary metrics.
    pub fn ratio(mut self, numerator: impl Into<String>, denominator: impl Into<String>) -> Self {
        self.numerator.0 = numerator.into();
        self.denominator.0 = denominator.into();
        self
    }

    /// Use this metric (of both operands) instead of their sections' primary metric.
    pub fn metric(mut self, metric: &'static str) -> Self {
        self.numerator.1 = Some(metric);
        self.denominator.1 = Some(metric);
        self
    }

    pub fn at_most(mut self, bound: f64) -> Self {
        self.relation = Relation::AtMost(bound);
        self
    }

    pub fn at_least(mut self, bound: f64) -> Self {
        self.relation = Relation::AtLeast(bound);
        self
    }
}

/// Everything an experiment declares.
#[derive(Default)]
pub struct Plan<'a> {
    pub(crate) params: Vec<(String, String)>,
    pub(crate) sections: Vec<Section>,
    pub(crate) variants: Vec<Variant<'a>>,
    pub(crate) claims: Vec<Claim>,
    pub(crate) notes: Vec<String>,
    #[allow(clippy::type_complexity)]
    pub(crate) finish: Vec<Box<dyn Fn(&mut ExperimentResult) + 'a>>,
    pub(crate) run_divisor: u32,
}

impl<'a> Plan<'a> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn param(&mut self, name: impl Into<String>, value: impl ToString) -> &mut Self {
        self.params.push((name.into(), value.to_string()));
        self
    }

    pub fn section(&mut self, s: Section) -> &mut Self {
        self.sections.push(s);
        self
    }

    pub fn variant(&mut self, v: Variant<'a>) -> &mut Self {
        self.variants.push(v);
        self
    }

    pub fn claim(&mut self, c: Claim) -> &mut Self {
        self.claims.push(c);
        self
    }

    pub fn note(&mut self, text: impl Into<String>) -> &mut Self {
        self.notes.push(text.into());
        self
    }

    /// Runs on the assembled result each time it is written (partial or final): derived
    /// tables, notes that need the measurements.
    pub fn finish(&mut self, f: impl Fn(&mut ExperimentResult) + 'a) -> &mut Self {
        self.finish.push(Box::new(f));
        self
    }

    /// Calibrate runs to 1/`divisor` of the usual target: for experiments whose runs carry a
    /// fixed cost the calibration cannot see (starting load threads, a minimum of one slow
    /// system call), so that enough trials fit in the budget to decide claims.
    pub fn shorter_runs(&mut self, divisor: u32) -> &mut Self {
        self.run_divisor = divisor.max(1);
        self
    }

    pub fn variant_count(&self) -> usize {
        self.variants.len()
    }

    /// Checks that every name refers to something declared; a mistake here is a bug in the
    /// experiment, reported as its failure.
    pub(crate) fn validate(&self) -> Result<(), String> {
        let mut ids = std::collections::HashSet::new();
        for v in &self.variants {
            if !ids.insert(v.id.as_str()) {
                return Err(format!("variant id '{}' is declared twice", v.id));
            }
            let Some(section) = self.sections.iter().find(|s| s.id == v.section) else {
                return Err(format!(
                    "variant '{}' names unknown section '{}'",
                    v.id, v.section
                ));
            };
            if matches!(v.body, Body::PerOp(_)) && !section.metrics.iter().any(|m| m.id == "time") {
                return Err(format!(
                    "per-op variant '{}' is in section '{}', which has no 'time' metric (use Section::per_op)",
                    v.id, v.section
                ));
            }
        }
        for s in &self.sections {
            if s.metrics.is_empty() {
                return Err(format!("section '{}' has no metric", s.id));
            }
            if let Some(b) = &s.baseline {
                if !self
                    .variants
                    .iter()
                    .any(|v| &v.id == b && v.section == s.id)
                {
                    return Err(format!(
                        "section '{}' has baseline '{b}', not one of its variants",
                        s.id
                    ));
                }
            }
        }
        for c in &self.claims {
            for (variant, metric) in [&c.numerator, &c.denominator] {
                let v = self
                    .variants
                    .iter()
                    .find(|v| &v.id == variant)
                    .ok_or_else(|| format!("claim '{}' names unknown variant '{variant}'", c.id))?;
                let s = self
                    .sections
                    .iter()
                    .find(|s| s.id == v.section)
                    .expect("checked above");
                if let Some(m) = metric {
                    if !s.metrics.iter().any(|x| x.id == *m) {
                        return Err(format!(
                            "claim '{}': section '{}' has no metric '{m}'",
                            c.id, s.id
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}
