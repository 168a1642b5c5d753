//! Do runs of the lab agree? Given the results of several runs (on one machine), lists the
//! claims whose verdict flipped between "holds" and "violated", and the claims left undecided
//! although their median ratio lay far from the bound. An instrument whose verdicts depend on
//! the run is not one to trust: `spindle lab --flips` checks it.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::results::{ClaimKind, LabReport, Verdict};

/// A median this far (relative) from its bound should be decided in a quick run.
pub const FAR: f64 = 0.05;

/// One claim across the runs.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ClaimAcross {
    pub experiment: String,
    pub claim: String,
    pub kind: ClaimKind,
    pub statement: String,
    /// Each run's verdict and median ratio (None: the run did not test the claim).
    pub runs: Vec<Option<(Verdict, f64)>>,
}

/// What the comparison found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Stability {
    pub runs: usize,
    /// Seconds each run took, and the budget it had.
    pub seconds: Vec<(f64, f64)>,
    /// Held in one run and was violated in another.
    pub flipped: Vec<ClaimAcross>,
    /// Undecided in some run although that run's median lay at least [`FAR`] from the bound.
    pub undecided_far: Vec<ClaimAcross>,
    /// Per run: guarantees that hold, are violated, are undecided.
    pub guarantees: Vec<[usize; 3]>,
}

impl Stability {
    /// Guarantees (Spindle's promises) that flipped: what `--flips` fails on.
    pub fn flipped_guarantees(&self) -> usize {
        self.flipped
            .iter()
            .filter(|c| c.kind == ClaimKind::Guarantee)
            .count()
    }
}

/// Compares the verdicts of `reports`, claim by claim (matched by experiment and claim id).
pub fn compare(reports: &[LabReport]) -> Stability {
    let mut claims: BTreeMap<(String, String), ClaimAcross> = BTreeMap::new();
    for (i, r) in reports.iter().enumerate() {
        for e in &r.experiments {
            for c in &e.claims {
                let entry = claims
                    .entry((e.name.clone(), c.id.clone()))
                    .or_insert_with(|| ClaimAcross {
                        experiment: e.name.clone(),
                        claim: c.id.clone(),
                        kind: c.kind,
                        statement: c.statement.clone(),
                        runs: vec![None; reports.len()],
                    });
                entry.runs[i] = Some((c.verdict, c.ratio.median));
            }
        }
    }
    let mut out = Stability {
        runs: reports.len(),
        seconds: reports
            .iter()
            .map(|r| (r.lab_seconds, r.budget_s))
            .collect(),
        guarantees: reports
            .iter()
            .map(|r| {
                let g = r.claims_by_kind(ClaimKind::Guarantee);
                let n = |v: Verdict| g.iter().filter(|(_, c)| c.verdict == v).count();
                [
                    n(Verdict::Holds),
                    n(Verdict::Violated),
                    n(Verdict::Undecided),
                ]
            })
            .collect(),
        ..Stability::default()
    };
    for ((experiment, id), across) in claims {
        let verdicts: Vec<Verdict> = across.runs.iter().flatten().map(|(v, _)| *v).collect();
        if verdicts.contains(&Verdict::Holds) && verdicts.contains(&Verdict::Violated) {
            out.flipped.push(across.clone());
        }
        let bound = reports.iter().find_map(|r| {
            r.experiments
                .iter()
                .find(|e| e.name == experiment)
                .and_then(|e| e.claims.iter().find(|c| c.id == id))
                .map(|c| c.bound)
        });
        let far = |m: f64| bound.is_some_and(|b| m.is_finite() && (m / b - 1.0).abs() >= FAR);
        if across
            .runs
            .iter()
            .flatten()
            .any(|(v, m)| *v == Verdict::Undecided && far(*m))
        {
            out.undecided_far.push(across);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(verdicts: &[(&str, Verdict, f64)]) -> LabReport {
        let mut v: serde_json::Value =
            serde_json::from_str(include_str!("../../tests/data/minimal-report.json")).unwrap();
        let claim = v["experiments"][0]["claims"][0].clone();
        let claims: Vec<serde_json::Value> = verdicts
            .iter()
            .map(|(id, verdict, median)| {
                let mut c = claim.clone();
                c["id"] = (*id).into();
                c["verdict"] = serde_json::to_value(verdict).unwrap();
                c["bound"] = 1.0.into();
                c["kind"] = "guarantee".into();
                c["ratio"]["median"] = (*median).into();
                c
            })
            .collect();
        v["experiments"][0]["claims"] = claims.into();
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn flips_and_far_undecided_claims_are_found() {
        // The template claim bounds a ratio by 1.
        let a = report(&[
            ("steady", Verdict::Holds, 0.5),
            ("flip", Verdict::Holds, 0.97),
            ("near", Verdict::Undecided, 1.01),
            ("far", Verdict::Undecided, 1.2),
        ]);
        let b = report(&[
            ("steady", Verdict::Holds, 0.5),
            ("flip", Verdict::Violated, 1.03),
            ("near", Verdict::Holds, 0.97),
            ("far", Verdict::Violated, 1.2),
        ]);
        let s = compare(&[a, b]);
        let ids = |v: &[ClaimAcross]| v.iter().map(|c| c.claim.clone()).collect::<Vec<_>>();
        assert_eq!(ids(&s.flipped), ["flip"]);
        assert_eq!(s.flipped_guarantees(), 1);
        assert_eq!(ids(&s.undecided_far), ["far"]);
        assert_eq!(s.guarantees, [[2, 0, 2], [2, 2, 0]]);
    }
}
