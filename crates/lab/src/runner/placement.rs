//! Where the host has put the two CPUs that two-thread variants pin to, window by window.
//!
//! A virtual machine's vCPUs are threads of its host, and the host may move them while the lab
//! runs: two vCPUs that were hyperthreads of one core (a cache line goes there and back in tens
//! of nanoseconds) can become cores of different chiplets (hundreds). Every two-thread figure
//! changes with it, and not every contestant's by the same factor: paired ratios from two
//! placements describe two machines, and a claim whose trials mix them can stay undecided
//! between two answers that are each clear.
//!
//! So when an experiment has two-thread variants, the runner times a short cache-line ping-pong
//! between those two CPUs (`sys::quick_round_trip_ns`) as each window of trials opens and
//! closes, and tags the window's trials with the closing figure when the opening one agrees and
//! the window was not loaded (NaN otherwise: the CPUs moved during the window, or other work
//! may have slowed the probe). Nothing here changes a verdict: each section with two-thread
//! variants reports the range of its tags ([`RoundTripRecord`]), and a claim whose trials fall
//! into clearly separate placements gets the median ratio of each appended to its explanation
//! ([`by_placement`]).

use crate::report::format::num;
use crate::results::{ns_range, RoundTripRecord, SAME_PLACEMENT};

/// Fewest trials a placement needs for its median to be reported.
const MIN_TRIALS: usize = 5;

/// How [`by_placement`]'s clause begins: a result's explanation holds at most one, at its end.
const CLAUSE: &str = "; the round trip between the two CPUs changed during these trials";

/// Whether a variant runs on the lab's CPU pair (`Ctx::cpu_pair`): a two-thread variant.
/// Those of `rings` and most others pin there; an unpinned one shares the pair's placement
/// only on a 2-CPU machine, where the pair is every CPU (elsewhere its tags describe the pair,
/// not necessarily its own CPUs). Variants of more threads spread over the machine, where
/// one pair's round trip says little.
pub fn on_the_pair(v: &crate::spec::Variant<'_>) -> bool {
    v.threads == 2
}

/// `explanation` without the clause [`by_placement`] gave it, if any.
pub fn without_clause(explanation: &str) -> &str {
    explanation
        .find(CLAUSE)
        .map_or(explanation, |i| &explanation[..i])
}

/// The tag of a window's trials: the round trip measured as it closed, if the one measured as it
/// opened agrees (NaN otherwise, and when either is unknown).
pub fn window_tag(opened: Option<f64>, closed: Option<f64>) -> f64 {
    match (opened, closed) {
        (Some(a), Some(b)) if a > 0.0 && b > 0.0 && a.max(b) < SAME_PLACEMENT * a.min(b) => b,
        _ => f64::NAN,
    }
}

/// Adds one window's tag (see [`window_tag`]; NaN adds nothing) to a section's record.
pub fn record(r: &mut Option<RoundTripRecord>, ns: f64) {
    if !(ns.is_finite() && ns > 0.0) {
        return;
    }
    match r {
        Some(r) => {
            r.windows += 1;
            r.min_ns = r.min_ns.min(ns);
            r.max_ns = r.max_ns.max(ns);
        }
        None => {
            *r = Some(RoundTripRecord {
                windows: 1,
                min_ns: ns,
                max_ns: ns,
            })
        }
    }
}

/// The median ratio of a claim's trials in each placement, as a clause for the end of its
/// explanation; `trials` holds each trial's (round-trip tag, raw ratio). None unless the tags
/// fall into two groups split by a gap of at least [`SAME_PLACEMENT`] (the largest gap between
/// consecutive tags), each with at least [`MIN_TRIALS`] trials.
pub fn by_placement(trials: &[(f64, f64)]) -> Option<String> {
    let mut tagged: Vec<(f64, f64)> = trials
        .iter()
        .copied()
        .filter(|&(ns, r)| ns.is_finite() && ns > 0.0 && !r.is_nan())
        .collect();
    if tagged.len() < 2 * MIN_TRIALS {
        return None;
    }
    tagged.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (split, gap) = tagged
        .windows(2)
        .enumerate()
        .map(|(i, w)| (i + 1, w[1].0 / w[0].0))
        .max_by(|a, b| a.1.total_cmp(&b.1))?;
    if gap < SAME_PLACEMENT {
        return None;
    }
    let (near, far) = tagged.split_at(split);
    if near.len() < MIN_TRIALS || far.len() < MIN_TRIALS {
        return None;
    }
    let describe = |group: &[(f64, f64)]| {
        let mut ratios: Vec<f64> = group.iter().map(|&(_, r)| r).collect();
        ratios.sort_by(f64::total_cmp);
        let median = ratios[(ratios.len() - 1) / 2];
        format!(
            "{} over {} trials at {}",
            num(median),
            group.len(),
            range_of(group)
        )
    };
    Some(format!(
        "{CLAUSE} (a cache-line round trip took {} in some windows and {} in others; on a virtual machine, the host moved its vCPUs): median ratio {}, {}",
        range_of(near),
        range_of(far),
        describe(near),
        describe(far)
    ))
}

/// The range of a group's round trips, sorted by them.
fn range_of(group: &[(f64, f64)]) -> String {
    ns_range(group[0].0, group[group.len() - 1].0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_is_tagged_only_when_its_two_ends_agree() {
        assert_eq!(window_tag(Some(70.0), Some(72.0)), 72.0);
        assert!(window_tag(Some(70.0), Some(460.0)).is_nan());
        assert!(window_tag(None, Some(70.0)).is_nan());
        assert!(window_tag(Some(70.0), None).is_nan());
        assert!(window_tag(Some(0.0), Some(0.0)).is_nan());
    }

    #[test]
    fn the_record_keeps_the_range_and_ignores_unknowns() {
        let mut r = None;
        record(&mut r, f64::NAN);
        assert_eq!(r, None);
        record(&mut r, 70.0);
        record(&mut r, 460.0);
        record(&mut r, 65.0);
        assert_eq!(
            r,
            Some(RoundTripRecord {
                windows: 3,
                min_ns: 65.0,
                max_ns: 460.0
            })
        );
    }

    #[test]
    fn two_placements_get_a_median_each() {
        // 8 trials near 60–75 ns at ratio 1.08, 6 near 430–480 ns at 0.99, one untagged.
        let mut trials: Vec<(f64, f64)> = (0..8).map(|i| (60.0 + 2.0 * i as f64, 1.08)).collect();
        trials.extend((0..6).map(|i| (430.0 + 10.0 * i as f64, 0.99)));
        trials.push((f64::NAN, 5.0));
        let note = by_placement(&trials).expect("two placements");
        assert!(
            note.contains("median ratio 1.08 over 8 trials at 60–74 ns"),
            "{note}"
        );
        assert!(note.contains("0.990 over 6 trials at 430–480 ns"), "{note}");
    }

    #[test]
    fn the_clause_can_be_taken_off_again() {
        let mut trials: Vec<(f64, f64)> = (0..6).map(|_| (60.0, 1.1)).collect();
        trials.extend((0..6).map(|_| (460.0, 0.9)));
        let clause = by_placement(&trials).expect("two placements");
        let explanation = format!("median ratio 1.00 after 12 trials{clause}");
        assert_eq!(
            without_clause(&explanation),
            "median ratio 1.00 after 12 trials"
        );
        assert_eq!(without_clause("no clause"), "no clause");
    }

    #[test]
    fn one_placement_or_a_thin_group_says_nothing() {
        let steady: Vec<(f64, f64)> = (0..20).map(|i| (70.0 + (i % 3) as f64, 1.0)).collect();
        assert_eq!(by_placement(&steady), None);
        let mut thin = steady.clone();
        thin.extend((0..4).map(|_| (460.0, 0.9)));
        assert_eq!(by_placement(&thin), None);
        assert_eq!(by_placement(&[]), None);
    }
}
