//! Turning the runner's state into an [`ExperimentResult`]: sections with their summaries,
//! claims with their verdicts, parameters, the planner's visits, the experiment's own tables.

use crate::results::{
    ClaimResult, ExperimentResult, MetricInfo, MetricResult, Param, Pooled, SectionResult, Summary,
    VariantResult,
};
use crate::spec::{Plan, Section};

use super::data::Layout;
use super::state::{is_fixed, State};
use super::Ctx;

impl Ctx<'_> {
    /// The experiment's result so far (`complete` once its last visit ended normally).
    pub(super) fn assemble(
        &self,
        plan: &Plan<'_>,
        layout: &Layout,
        state: &State,
        stop_reason: &str,
        complete: bool,
    ) -> ExperimentResult {
        let mut result = ExperimentResult {
            name: self.info.name.into(),
            title: self.info.title.into(),
            question: self.info.question.into(),
            references: self
                .info
                .references
                .iter()
                .map(|d| d.to_reference())
                .collect(),
            parameters: self.parameters(plan, state),
            budget_s: state.visits.iter().map(|v| v.slice_s).sum::<f64>()
                + if complete {
                    0.0
                } else {
                    self.slice.as_secs_f64()
                },
            trials: state.data.trials,
            stop_reason: stop_reason.into(),
            wall_s: state.visits.iter().map(|v| v.used_s).sum::<f64>()
                + if complete {
                    0.0
                } else {
                    self.elapsed().as_secs_f64()
                },
            sections: self.sections(plan, layout, state),
            claims: self.claims(plan, state),
            tables: Vec::new(),
            notes: plan.notes.clone(),
            complete,
            visits: state.visits.clone(),
        };
        for f in &plan.finish {
            f(&mut result);
        }
        result
    }

    fn sections(&self, plan: &Plan<'_>, layout: &Layout, state: &State) -> Vec<SectionResult> {
        plan.sections
            .iter()
            .enumerate()
            .map(|(s, section)| {
                let st = &state.sections[s];
                SectionResult {
                    id: section.id.into(),
                    title: section.title.clone(),
                    baseline: section.baseline.clone(),
                    metrics: section.metrics.iter().map(metric_info).collect(),
                    variants: layout.members[s]
                        .iter()
                        .map(|&v| self.variant(plan, section, state, v))
                        .collect(),
                    trials: st.trials,
                    stop_reason: st.done.clone().unwrap_or_else(|| "still running".into()),
                    discarded_trials: st.discarded,
                    load: (st.load.windows > 0).then_some(st.load),
                    round_trip: st.round_trip,
                }
            })
            .collect()
    }

    fn variant(
        &self,
        plan: &Plan<'_>,
        section: &Section,
        state: &State,
        i: usize,
    ) -> VariantResult {
        let data = &state.data;
        let v = &plan.variants[i];
        let base = section
            .baseline
            .as_ref()
            .and_then(|b| plan.variants.iter().position(|x| &x.id == b));
        // The trials this variant's section ran in: its values are those trials' values.
        let ran: Vec<usize> = (0..data.trials as usize)
            .filter(|&t| data.ran[i][t])
            .collect();
        let metrics = section
            .metrics
            .iter()
            .enumerate()
            .map(|(m, metric)| {
                let values: Vec<f64> = ran.iter().map(|&t| data.values[i][m][t]).collect();
                // Only trials that ran both: past a table's minimum, a section runs only the
                // variants its open claims compare.
                let ratio_to_baseline = base.map(|b| {
                    let ratios: Vec<f64> = ran
                        .iter()
                        .filter(|&&t| data.ran[b][t])
                        .map(|&t| data.values[i][m][t] / data.values[b][m][t])
                        .collect();
                    Summary::of(&ratios, self.eps)
                });
                MetricResult {
                    id: metric.id.into(),
                    summary: Summary::of(&values, self.eps),
                    values,
                    ratio_to_baseline,
                    pooled: (!data.pooled[i][m].is_empty()).then(|| Pooled::of(&data.pooled[i][m])),
                    vs_baseline_run: None,
                }
            })
            .collect();
        VariantResult {
            id: v.id.clone(),
            label: v.label.clone(),
            threads: v.threads,
            capped: ran.iter().map(|&t| data.capped[i][t]).collect(),
            metrics,
            reference_ratio: v.reference_ratio,
            series: data.series[i].clone(),
        }
    }

    /// Frozen verdicts as they were decided; open claims judged on everything so far.
    fn claims(&self, plan: &Plan<'_>, state: &State) -> Vec<ClaimResult> {
        plan.claims
            .iter()
            .zip(&state.claims)
            .map(|(spec, c)| match &c.frozen {
                Some(r) => r.clone(),
                None => {
                    let loaded: u64 = c.sections.iter().map(|&s| state.sections[s].discarded).sum();
                    let capped = c.sections.iter().any(|&s| state.sections[s].at_cap);
                    if let Some(r) = c.unconfirmed() {
                        return r;
                    }
                    let note = match c.outlook() {
                        _ if capped => format!(
                            " when its sections reached the profile's cap of {} trials",
                            self.limits().max_trials
                        ),
                        _ if loaded > 0 => format!(
                            "; {loaded} trial(s) of its sections were discarded because other processes loaded the CPUs"
                        ),
                        Some(n) => format!(" when its time ran out (about {n} more trials needed)"),
                        None => " and its median sits at the bound".to_string(),
                    };
                    c.judge(spec, &state.data, self.eps, &note)
                }
            })
            .collect()
    }

    fn parameters(&self, plan: &Plan<'_>, state: &State) -> Vec<Param> {
        let mut parameters: Vec<Param> = plan
            .params
            .iter()
            .map(|(name, value)| Param {
                name: name.clone(),
                value: value.clone(),
            })
            .collect();
        if let Some(work) = &state.work {
            let calibrated: Vec<String> = plan
                .variants
                .iter()
                .zip(work)
                .filter(|(v, _)| !is_fixed(&v.body))
                .map(|(v, n)| format!("{} {n}", v.id))
                .collect();
            if !calibrated.is_empty() {
                parameters.push(Param {
                    name: "work per run (calibrated)".into(),
                    value: calibrated.join(", "),
                });
            }
        }
        let l = self.limits();
        parameters.push(Param {
            name: "trials".into(),
            value: format!(
                "every variant of a section runs at least {} times for its table; past that, a trial runs only the two variants of each claim still open, until it is decided (at most {} trials), in the time the planner gives",
                l.min_trials, l.max_trials
            ),
        });
        if !plan.claims.is_empty() {
            parameters.push(Param {
                name: "verdicts".into(),
                value: format!(
                    "median per-trial ratio more than the claim's margin (2% unless stated) inside its bound: holds; beyond it: violated; ε = {} per claim",
                    self.eps
                ),
            });
        }
        parameters
    }
}

fn metric_info(m: &crate::spec::Metric) -> MetricInfo {
    MetricInfo {
        id: m.id.into(),
        label: m.label.clone(),
        unit: m.unit,
        better: m.better,
        show_max: m.show_max,
        hidden: m.hidden,
    }
}
