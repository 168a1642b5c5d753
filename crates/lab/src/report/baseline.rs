//! `--baseline OLD/results.json`: each median beside the same variant's median in an earlier
//! run. The two runs are *unpaired* (different times, possibly different machines), so the
//! ratio is shown as information, never judged.

use crate::results::{ExperimentResult, LabReport};

/// Sets `vs_baseline_run` on every metric that the baseline report also has.
pub fn annotate(result: &mut ExperimentResult, baseline: &LabReport) {
    let Some(old) = baseline.experiments.iter().find(|e| e.name == result.name) else {
        return;
    };
    for section in &mut result.sections {
        let Some(old_section) = old.section(&section.id) else {
            continue;
        };
        for variant in &mut section.variants {
            let Some(old_variant) = old_section.variants.iter().find(|v| v.id == variant.id) else {
                continue;
            };
            for metric in &mut variant.metrics {
                if let Some(old_metric) = old_variant.metric(&metric.id) {
                    let r = metric.summary.median / old_metric.summary.median;
                    metric.vs_baseline_run = r.is_finite().then_some(r);
                }
            }
        }
    }
}
