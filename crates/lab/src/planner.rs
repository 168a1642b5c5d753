//! The lab's time planner: one budget for the whole run, shared so that the lab ends on time
//! however many experiments exist, and spent where it decides the most claims.
//!
//! Two phases:
//!
//! 1. **First pass.** Every selected experiment gets a minimum share of the budget,
//!    [`FIRST_PASS`] of it split in proportion to the experiments' weights
//!    ([`Info::quick_seconds`]). An experiment stops early once every section has decided its
//!    claims and filled its table, and the time it did not use stays in the pool.
//! 2. **Open claims.** The rest goes, one visit at a time, to the experiment whose open
//!    claims the remaining time is most likely to settle. A claim is open while its test runs,
//!    and while its verdict is *provisional*: a verdict needs a batch of trials from a later
//!    visit that agrees with it (see `runner/claims.rs`), so every experiment whose tests
//!    decided comes back once. For each open claim the runner estimates how many more trials
//!    it needs ([`Saved::outlook`]: a batch for a provisional verdict, the test's estimate at
//!    its current proportions otherwise), and the planner picks the experiment whose next
//!    visit settles the most claims per second (setup of a visit included; guarantees count
//!    double), preferring experiments it has not visited in the last [`MIN_GAP_S`] seconds,
//!    so that a confirmation comes from a different stretch of the machine's life. A visit is
//!    priced by the runs its trials make, so claims that compare the same two variants share
//!    their cost, and a visit that confirms a few claims cheaply is not judged by the cost of
//!    the one beside them that needs a thousand trials (see `prospect_of`). A claim whose
//!    median sits at its bound has no finite estimate and gets no time; one that needs more
//!    than what is left counts for the share of its trials that fits, so the end of the run
//!    goes to the claims closest to a verdict.
//!
//! A visit never starts a trial it expects to overrun its slice, and no slice reaches past the
//! end of the budget, so the whole run ends within the budget (plus at most one run of one
//! variant, whose length the runner predicts from the runs before it).

use std::time::Duration;

use crate::results::Profile;
use crate::runner::{Outlook, Saved};
use crate::spec::Info;

/// Fraction of the budget shared out as minimum shares in the first pass.
pub const FIRST_PASS: f64 = 0.55;

/// Seconds kept back for the fingerprint at the start, the second cache-line round trip at
/// the end and the last report writes.
const RESERVE_S: f64 = 6.0;

/// No visit of the second phase is shorter than this (a visit pays for its setup again).
const MIN_VISIT_S: f64 = 3.0;

/// Visits per experiment, at most (the first included).
const MAX_VISITS: usize = 4;

/// A later visit of an experiment comes at least this long after its previous one, when
/// another experiment has work to do meanwhile.
pub const MIN_GAP_S: f64 = 15.0;

/// No visit of the second phase takes more than this share of the time left, so that one
/// experiment whose estimates were too hopeful cannot take it all.
const MAX_VISIT_SHARE: f64 = 0.5;

/// Seconds the whole lab may take in a profile.
pub fn profile_budget(profile: Profile, experiments: usize) -> Duration {
    match profile {
        Profile::Smoke => Duration::from_secs(3 * experiments as u64 + 3),
        Profile::Quick => Duration::from_secs(180),
        Profile::Full => Duration::from_secs(20 * 60),
    }
}

/// The plan of a run: its budget and each selected experiment's first slice.
#[derive(Clone, Debug)]
pub struct LabPlan {
    pub profile: Profile,
    /// Seconds for the whole run, fingerprint included.
    pub budget: Duration,
    /// (experiment, first-pass slice), in run order.
    pub first: Vec<(&'static str, Duration)>,
}

impl LabPlan {
    /// Plans a run of `selected` out of the whole `catalogue`. Minimum shares are computed as
    /// if the whole catalogue ran, so an experiment gets the same first slice alone as among
    /// the others; a selection's budget is twice its first slices, up to the profile's.
    pub fn new(profile: Profile, catalogue: &[Info], selected: &[Info]) -> LabPlan {
        let full = profile_budget(profile, catalogue.len()).as_secs_f64();
        let spendable = (full - RESERVE_S).max(1.0);
        let total_weight: f64 = catalogue.iter().map(weight).sum::<f64>().max(1.0);
        let first: Vec<(&'static str, Duration)> = selected
            .iter()
            .map(|i| {
                let s = match profile {
                    Profile::Smoke => 2.0,
                    _ => FIRST_PASS * spendable * weight(i) / total_weight,
                };
                (i.name, Duration::from_secs_f64(s))
            })
            .collect();
        let firsts: f64 = first.iter().map(|(_, d)| d.as_secs_f64()).sum();
        let budget = if selected.len() == catalogue.len() {
            full
        } else {
            (2.0 * firsts + RESERVE_S).min(full)
        };
        LabPlan {
            profile,
            budget: Duration::from_secs_f64(budget),
            first,
        }
    }

    /// Time left for visits, `elapsed` after the run started.
    pub fn remaining(&self, elapsed: Duration) -> Duration {
        self.budget
            .saturating_sub(elapsed)
            .saturating_sub(Duration::from_secs_f64(RESERVE_S / 2.0))
    }

    /// The first-pass slice of experiment `index`, shortened to what is left.
    pub fn first_slice(&self, index: usize, elapsed: Duration) -> Duration {
        self.first[index].1.min(self.remaining(elapsed))
    }

    /// The next visit of the second phase: (experiment index, slice), or None when no open
    /// claim is likely to be decided in the time left. `saved[i]` is experiment `i`'s state
    /// (None if it failed or never ran).
    pub fn next_visit(
        &self,
        elapsed: Duration,
        saved: &[Option<&Saved>],
    ) -> Option<(usize, Duration)> {
        let left = self.remaining(elapsed).as_secs_f64();
        if left < MIN_VISIT_S {
            return None;
        }
        // An experiment whose visits were all spent calibrating and warming up (a loaded or
        // slow machine) would end in the report without a trial: it goes first, for twice what
        // its latest visit spent (its calibration goes on where it stopped).
        let starved = saved.iter().enumerate().find_map(|(i, s)| {
            s.filter(|s| s.trials() == 0 && s.visits() < MAX_VISITS && s.open_claims() > 0)
                .map(|s| (i, s))
        });
        if let Some((i, s)) = starved {
            let slice = (2.0 * s.setup_s())
                .max(MIN_VISIT_S)
                .min(MAX_VISIT_SHARE * left)
                .max(MIN_VISIT_S)
                .min(left);
            return Some((i, Duration::from_secs_f64(slice)));
        }
        // (rate, index, seconds, recently visited)
        let mut best: Option<(f64, usize, f64, bool)> = None;
        for (i, s) in saved.iter().enumerate() {
            let Some(s) = s else { continue };
            if s.visits() >= MAX_VISITS || s.open_claims() == 0 {
                continue;
            }
            let Some((decided, seconds)) = prospect(s, MAX_VISIT_SHARE * left) else {
                continue;
            };
            let rate = decided / seconds;
            let recent = s.since_last_visit().as_secs_f64() < MIN_GAP_S;
            let better = match best {
                None => true,
                Some((r, _, _, was_recent)) => {
                    (!recent && was_recent) || (recent == was_recent && rate > r)
                }
            };
            if better {
                best = Some((rate, i, seconds, recent));
            }
        }
        best.map(|(_, i, seconds, _)| {
            // A third more than the estimate (which assumes the proportions seen so far), and
            // some slack.
            let slice = (seconds * 1.33 + SLACK_S)
                .min(MAX_VISIT_SHARE * left)
                .max(MIN_VISIT_S)
                .min(left);
            (i, Duration::from_secs_f64(slice))
        })
    }
}

/// An experiment's weight in the first pass.
fn weight(info: &Info) -> f64 {
    f64::from(info.quick_seconds.max(1))
}

/// How much another visit of an experiment could decide within `left` seconds — open claims
/// counted once each, guarantees (Spindle's promises) twice — and in how many seconds (its
/// setup included).
fn prospect(saved: &Saved, left: f64) -> Option<(f64, f64)> {
    prospect_of(&saved.outlook(), saved.setup_s(), left)
}

/// Seconds a visit's slice gets beyond its estimate's third: a window of trials discarded
/// under load, the pause between windows, a setup slower than the last one. Without it a
/// batch of 10 confirming trials priced to the second could fall a trial short, and a batch
/// short of 10 confirms nothing.
const SLACK_S: f64 = 1.0;

/// A run predicted to take less than this is priced at this (a variant that has not run yet
/// has no prediction).
const MIN_RUN_S: f64 = 5e-5;

/// [`prospect`] from an experiment's outlook: the best visit among those that run its trials
/// up to one of its open claims' needs, as (claims decided, seconds).
///
/// Variant `v` runs in each of the next `reach(v)` trials: the most that a claim comparing it, or
/// its section's table, needs. So `k` more trials cost `Σ_v run_s(v) · min(k, reach(v))` after the
/// setup, plus `run_s(v) · k` for the variants of claims still testing without an estimate, which
/// run in every trial. This counts once a run that several claims share (an allocator's throughput,
/// RSS and p99.9 come from the same two runs), and it counts the runs of every claim still testing,
/// because a visit runs them all whatever it was planned for. For `k` = each claim's need in turn,
/// a visit of `k` trials decides the claims that need at most `k` (guarantees count double); the
/// best of them per second is the prospect, so a batch that confirms ten claims in a few seconds is
/// not judged by the cost of a claim beside them that needs a thousand trials. The longest visit
/// that fits in `left` also counts each claim that needs more for the share of its trials that
/// fits: the estimate assumes the proportions seen so far and a test often decides before it, so
/// the end of a run goes to the claims closest to a verdict instead of to nobody.
fn prospect_of(outlook: &Outlook, setup_s: f64, left: f64) -> Option<(f64, f64)> {
    let mut reach = vec![0u64; outlook.run_s.len()];
    // Variants that run in every trial: a claim still testing with no estimate.
    let mut always = vec![false; outlook.run_s.len()];
    for &(v, trials) in &outlook.fill {
        reach[v] = reach[v].max(trials);
    }
    let needs: Vec<(u64, f64)> = outlook
        .claims
        .iter()
        .filter_map(|c| {
            let Some(trials) = c.trials else {
                for &v in c.variants.iter().filter(|_| c.testing) {
                    always[v] = true;
                }
                return None;
            };
            let trials = trials.max(1);
            for &v in &c.variants {
                reach[v] = reach[v].max(trials);
            }
            Some((trials, if c.guarantee { 2.0 } else { 1.0 }))
        })
        .collect();
    let cost = |k: u64| -> f64 {
        setup_s
            + reach
                .iter()
                .zip(&always)
                .zip(&outlook.run_s)
                .map(|((&r, &every), &s)| {
                    s.max(MIN_RUN_S) * if every { k } else { k.min(r) } as f64
                })
                .sum::<f64>()
    };
    // The most trials that fit in `left` (cost grows with k: binary search), up to the most
    // that a claim with an estimate, or a table, needs.
    let top = reach.iter().copied().max().unwrap_or(0);
    let fits = if cost(top) <= left {
        top
    } else {
        let (mut lo, mut hi) = (0, top); // cost(lo) may exceed left only at lo = 0
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if cost(mid) <= left {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        lo
    };
    if fits == 0 {
        return None;
    }
    let mut best: Option<(f64, f64)> = None;
    let mut candidates: Vec<u64> = needs
        .iter()
        .map(|&(t, _)| t)
        .filter(|&t| t < fits)
        .chain([fits])
        .collect();
    // Shortest first: of two visits that settle as much per second, the shorter one.
    candidates.sort_unstable();
    candidates.dedup();
    for k in candidates {
        let decided: f64 = needs
            .iter()
            .map(|&(t, worth)| {
                if t <= k {
                    worth
                } else if k == fits {
                    worth * k as f64 / t as f64
                } else {
                    0.0
                }
            })
            .sum();
        let seconds = cost(k);
        if decided > 0.0 && best.is_none_or(|(d, s)| decided / seconds > d / s) {
            best = Some((decided, seconds));
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::ClaimOutlook;

    fn info(name: &'static str, w: u32) -> Info {
        Info {
            name,
            title: "t",
            summary: "s",
            question: "q",
            references: &[],
            quick_seconds: w,
        }
    }

    #[test]
    fn the_whole_catalogue_fits_the_profile_and_shares_follow_weights() {
        let all = [info("a", 10), info("b", 30), info("c", 20)];
        for (profile, total) in [(Profile::Quick, 180.0), (Profile::Full, 1200.0)] {
            let plan = LabPlan::new(profile, &all, &all);
            assert_eq!(plan.budget.as_secs_f64(), total);
            let firsts: Vec<f64> = plan.first.iter().map(|(_, d)| d.as_secs_f64()).collect();
            let sum: f64 = firsts.iter().sum();
            assert!(
                (sum - FIRST_PASS * (total - RESERVE_S)).abs() < 1e-6,
                "{sum}"
            );
            assert!((firsts[1] / firsts[0] - 3.0).abs() < 1e-9);
        }
    }

    #[test]
    fn a_selection_gets_the_same_first_slice_and_a_budget_of_its_own() {
        let all = [info("a", 10), info("b", 30), info("c", 20)];
        let whole = LabPlan::new(Profile::Quick, &all, &all);
        let one = LabPlan::new(Profile::Quick, &all, &all[1..2]);
        assert_eq!(one.first[0], whole.first[1]);
        let expect = 2.0 * whole.first[1].1.as_secs_f64() + RESERVE_S;
        assert!((one.budget.as_secs_f64() - expect).abs() < 1e-6);
        assert!(one.budget < whole.budget);
    }

    #[test]
    fn time_left_shrinks_and_slices_never_pass_the_end() {
        let all = [info("a", 10)];
        let plan = LabPlan::new(Profile::Quick, &all, &all);
        assert!(plan.remaining(Duration::from_secs(179)).is_zero());
        assert!(
            plan.first_slice(0, Duration::from_secs(178))
                <= plan.remaining(Duration::from_secs(178))
        );
        assert!(plan.next_visit(Duration::from_secs(179), &[None]).is_none());
    }

    /// An outlook of claims that each compare two variants of their own, whose runs take
    /// `run_s` each: (trials needed, guarantee).
    fn apart(claims: &[(Option<u64>, bool)], run_s: f64) -> Outlook {
        Outlook {
            claims: claims
                .iter()
                .enumerate()
                .map(|(i, &(trials, guarantee))| ClaimOutlook {
                    trials,
                    testing: true,
                    guarantee,
                    variants: [2 * i, 2 * i + 1],
                })
                .collect(),
            fill: Vec::new(),
            run_s: vec![run_s; 2 * claims.len()],
        }
    }

    #[test]
    fn a_claim_that_needs_more_than_the_time_left_gets_what_is_left() {
        // Fits: 100 trials of 0.1 s after 1 s of setup.
        let one = |trials| apart(&[(Some(trials), true)], 0.05);
        assert_eq!(prospect_of(&one(100), 1.0, 30.0), Some((2.0, 11.0)));
        // 500 trials (50 s) in 30 s: the share that fits, and all of the time.
        let (decided, seconds) = prospect_of(&one(500), 1.0, 30.05).unwrap();
        assert!((seconds - 30.0).abs() < 1e-9, "{seconds}");
        assert!((decided - 2.0 * 290.0 / 500.0).abs() < 1e-12, "{decided}");
        // The claim that needs 100 trials pays for the other's runs in those trials too (a
        // visit runs every claim still testing): 100 trials take all 20 s, and the other
        // counts for the fifth of its trials that they give it.
        let two = apart(&[(Some(500), false), (Some(100), false)], 0.05);
        let (decided, seconds) = prospect_of(&two, 0.0, 20.05).unwrap();
        assert!((seconds - 20.0).abs() < 1e-9, "{seconds}");
        assert!((decided - (1.0 + 100.0 / 500.0)).abs() < 1e-12, "{decided}");
        // At its bound (no estimate): nothing to gain.
        assert_eq!(prospect_of(&apart(&[(None, true)], 0.05), 1.0, 30.0), None);
        // Not even one trial fits.
        assert_eq!(prospect_of(&one(10), 29.95, 30.0), None);
    }

    #[test]
    fn a_claim_still_testing_without_an_estimate_runs_in_every_trial() {
        // A batch of 10 on one pair, beside a claim whose test runs on with no estimate on
        // another pair: its runs are in each of the 10 trials too (0.4 s a trial, not 0.2).
        let mut o = apart(&[(Some(10), true), (None, false)], 0.1);
        let (decided, seconds) = prospect_of(&o, 1.0, 60.0).unwrap();
        assert_eq!(decided, 2.0);
        assert!((seconds - 5.0).abs() < 1e-9, "{seconds}");
        // Once its sections are at the trial cap it no longer runs.
        o.claims[1].testing = false;
        let (_, seconds) = prospect_of(&o, 1.0, 60.0).unwrap();
        assert!((seconds - 3.0).abs() < 1e-9, "{seconds}");
    }

    #[test]
    fn claims_on_the_same_runs_share_their_cost() {
        // Three claims on one pair of variants (throughput, RSS and p99.9 of one workload):
        // ten trials of two runs, not thirty.
        let same = Outlook {
            claims: vec![
                ClaimOutlook {
                    trials: Some(10),
                    testing: false,
                    guarantee: true,
                    variants: [0, 1],
                };
                3
            ],
            fill: Vec::new(),
            run_s: vec![0.1, 0.1],
        };
        let (decided, seconds) = prospect_of(&same, 1.0, 60.0).unwrap();
        assert_eq!(decided, 6.0);
        assert!((seconds - 3.0).abs() < 1e-9, "{seconds}");
    }

    #[test]
    fn a_table_below_its_minimum_runs_every_variant_of_its_section() {
        // A section of five variants with 4 of its 10 trials: the next 6 trials run all five
        // (0.1 s each), the later ones only the claim's two.
        let o = Outlook {
            claims: vec![ClaimOutlook {
                trials: Some(20),
                testing: true,
                guarantee: false,
                variants: [0, 1],
            }],
            fill: (0..5).map(|v| (v, 6)).collect(),
            run_s: vec![0.1; 5],
        };
        let (decided, seconds) = prospect_of(&o, 0.0, 60.0).unwrap();
        assert_eq!(decided, 1.0);
        assert!(
            (seconds - (6.0 * 0.5 + 14.0 * 0.2)).abs() < 1e-9,
            "{seconds}"
        );
    }

    #[test]
    fn a_cheap_confirmation_is_not_judged_by_an_expensive_neighbour() {
        // Ten guarantees whose verdicts await a batch of 10 trials on one pair of variants,
        // beside a claim on another pair that needs 1000 trials: the visit worth making is the
        // batch (10 trials of four runs), at 20 claims in 5 s.
        let mut claims = vec![
            ClaimOutlook {
                trials: Some(10),
                testing: false,
                guarantee: true,
                variants: [0, 1],
            };
            10
        ];
        claims.push(ClaimOutlook {
            trials: Some(1000),
            testing: true,
            guarantee: false,
            variants: [2, 3],
        });
        let o = Outlook {
            claims,
            fill: Vec::new(),
            run_s: vec![0.1; 4],
        };
        let (decided, seconds) = prospect_of(&o, 1.0, 100.05).unwrap();
        assert_eq!(decided, 20.0);
        assert!((seconds - 5.0).abs() < 1e-9, "{seconds}");
    }
}
