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
//!    its current proportions otherwise), and the planner picks the experiment that settles the
//!    most claims per second (setup of a visit included; guarantees count double), preferring
//!    experiments it has not visited in the last [`MIN_GAP_S`] seconds, so that a confirmation
//!    comes from a different stretch of the machine's life. A claim whose median sits at its
//!    bound has no finite estimate and gets no time; one that needs more than what is left
//!    counts for the share of its trials that fits, so the end of the run goes to the claims
//!    closest to a verdict.
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
            let Some((decided, seconds)) = prospect(s, left) else {
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
            // A third more than the estimate: the estimate assumes the proportions seen so far.
            let slice = (seconds * 1.33)
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

/// [`prospect`] from the claims' outlooks. Claims are taken cheapest first; their costs add
/// up, which overestimates when they share sections (a trial serves them all): the visit ends
/// as soon as its sections are done, so a slice too long costs nothing. A claim that needs
/// more than what is left counts for the fraction of its trials that fits: the estimate
/// assumes the proportions seen so far, and a test often decides before it, so the time left
/// at the end of a run goes to the claim closest to a verdict instead of to nobody.
fn prospect_of(outlooks: &[Outlook], setup_s: f64, left: f64) -> Option<(f64, f64)> {
    let mut costs: Vec<(f64, f64)> = outlooks
        .iter()
        .filter_map(|o| {
            let worth = if o.guarantee { 2.0 } else { 1.0 };
            o.trials.map(|n| (n as f64 * o.trial_s.max(1e-4), worth))
        })
        .collect();
    costs.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut seconds = setup_s;
    let mut decided = 0.0;
    for (cost, worth) in costs {
        if seconds + cost > left {
            if seconds < left && cost > 0.0 {
                decided += worth * (left - seconds) / cost;
                seconds = left;
            }
            break;
        }
        seconds += cost;
        decided += worth;
    }
    (decided > 0.0).then_some((decided, seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn a_claim_that_needs_more_than_the_time_left_gets_what_is_left() {
        let o = |trials, guarantee| Outlook {
            trials: Some(trials),
            trial_s: 0.1,
            guarantee,
        };
        // Fits: 100 trials of 0.1 s after 1 s of setup.
        assert_eq!(prospect_of(&[o(100, true)], 1.0, 30.0), Some((2.0, 11.0)));
        // 500 trials (50 s) in 30 s: the share that fits, and all of the time.
        let (decided, seconds) = prospect_of(&[o(500, true)], 1.0, 30.0).unwrap();
        assert_eq!(seconds, 30.0);
        assert!((decided - 2.0 * 29.0 / 50.0).abs() < 1e-12, "{decided}");
        // Cheapest first; the next one counts in part.
        let (decided, seconds) = prospect_of(&[o(500, false), o(100, false)], 0.0, 20.0).unwrap();
        assert_eq!(seconds, 20.0);
        assert!((decided - (1.0 + 10.0 / 50.0)).abs() < 1e-12, "{decided}");
        // At its bound (no estimate): nothing to gain.
        let at_bound = Outlook {
            trials: None,
            trial_s: 0.1,
            guarantee: true,
        };
        assert_eq!(prospect_of(&[at_bound], 1.0, 30.0), None);
    }
}
