//! The plan's layout (which variant and metric lives where) and every value kept so far.

use crate::results::Series;
use crate::spec::{Plan, Sample};

/// Where each variant and metric of a plan lives (indices into the plan's vectors).
pub(crate) struct Layout {
    /// Section of each variant.
    pub section_of: Vec<usize>,
    /// Variants of each section.
    pub members: Vec<Vec<usize>>,
}

impl Layout {
    pub fn of(plan: &Plan<'_>) -> Layout {
        let section_of: Vec<usize> = plan
            .variants
            .iter()
            .map(|v| {
                plan.sections
                    .iter()
                    .position(|s| s.id == v.section)
                    .expect("validated")
            })
            .collect();
        let members = (0..plan.sections.len())
            .map(|s| {
                (0..section_of.len())
                    .filter(|&v| section_of[v] == s)
                    .collect()
            })
            .collect();
        Layout {
            section_of,
            members,
        }
    }

    pub fn variant(&self, plan: &Plan<'_>, id: &str) -> usize {
        plan.variants
            .iter()
            .position(|v| v.id == id)
            .expect("validated")
    }

    /// Index of `metric` (None: the section's primary one) in `variant`'s section.
    pub fn metric(&self, plan: &Plan<'_>, variant: usize, metric: Option<&str>) -> usize {
        let s = &plan.sections[self.section_of[variant]];
        metric.map_or(0, |m| {
            s.metrics.iter().position(|x| x.id == m).expect("validated")
        })
    }
}

/// Every value kept so far: `values[variant][metric][trial]`, NaN where the variant did not
/// run in that trial (its section was done) or did not report the metric.
pub(crate) struct Data {
    pub values: Vec<Vec<Vec<f64>>>,
    /// `ran[variant][trial]`: whether the variant ran (every variant of a section until its
    /// table has its minimum of trials; then only those an open claim compares).
    pub ran: Vec<Vec<bool>>,
    pub capped: Vec<Vec<bool>>,
    pub pooled: Vec<Vec<Vec<f64>>>,
    pub series: Vec<Option<Series>>,
    /// The visit that kept each trial.
    pub visit: Vec<u32>,
    /// Each trial's placement tag: the cache-line round trip between the two-thread variants'
    /// CPUs, in ns, as its window closed (NaN: not measured, or the CPUs moved during the
    /// window; see `placement.rs`).
    pub round_trip: Vec<f64>,
    pub trials: u64,
}

impl Data {
    pub fn new(plan: &Plan<'_>, layout: &Layout) -> Data {
        let metrics = |v: usize| plan.sections[layout.section_of[v]].metrics.len();
        let nv = plan.variants.len();
        Data {
            values: (0..nv).map(|v| vec![Vec::new(); metrics(v)]).collect(),
            ran: vec![Vec::new(); nv],
            capped: vec![Vec::new(); nv],
            pooled: (0..nv).map(|v| vec![Vec::new(); metrics(v)]).collect(),
            series: vec![None; nv],
            visit: Vec::new(),
            round_trip: Vec::new(),
            trials: 0,
        }
    }

    /// Appends one trial of visit `visit`, tagged `round_trip` (see the field): `samples[v]` is
    /// None for a variant that did not run.
    pub fn push(
        &mut self,
        plan: &Plan<'_>,
        layout: &Layout,
        visit: u32,
        round_trip: f64,
        samples: Vec<Option<Sample>>,
    ) {
        self.visit.push(visit);
        self.round_trip.push(round_trip);
        for (v, sample) in samples.into_iter().enumerate() {
            let metrics = &plan.sections[layout.section_of[v]].metrics;
            for (m, metric) in metrics.iter().enumerate() {
                let value = sample.as_ref().and_then(|s| s.value(metric.id));
                self.values[v][m].push(value.unwrap_or(f64::NAN));
                if let Some((_, pool)) = sample
                    .as_ref()
                    .and_then(|s| s.pooled.iter().find(|(id, _)| *id == metric.id))
                {
                    self.pooled[v][m].extend_from_slice(pool);
                }
            }
            self.ran[v].push(sample.is_some());
            self.capped[v].push(sample.as_ref().is_some_and(|s| s.capped));
            if let Some((metric, step_s, values)) = sample.and_then(|s| s.series) {
                self.series[v] = Some(Series {
                    metric: metric.into(),
                    step_s,
                    values,
                });
            }
        }
        self.trials += 1;
    }
}
