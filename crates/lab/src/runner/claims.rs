//! Claims: each claim's sequential test, its verdict in words, and how far it is from one.
//!
//! A claim bounds the ratio `r` of two values measured in the same trial ("ours / floor ≤
//! 1.25"). The runner normalises it so that small is good — `r' = r / b` for "at most b",
//! `r' = b / r` for "at least b" — and the claim is a statement about the median of `r'`: at
//! most 1. A [`ToleranceGate`] with tolerance τ (the claim's margin, 2% by default) reads that
//! median off Robbins' confidence sequence (order statistics, ε/2 for each end), intersected
//! over all trials so far:
//!
//! | the interval for the median of r' | verdict |
//! |---|---|
//! | below 1 / (1 + τ) | holds: the median ratio is more than τ inside the bound |
//! | above 1 + τ | violated: more than τ beyond the bound |
//! | inside [1 / (1 + τ), 1 + τ] | undecided, at the bound: the runner stops spending time on it |
//! | reaches past either end | undecided so far: more trials |
//!
//! Whenever the runner stops, the verdict (and the interval) is wrong with probability at most
//! ε: the test runs at ε/2, and at most one restart (below) at ε/2 again. The margin is what keeps verdicts from flipping between runs: two runs can only disagree
//! if their medians differ by more than 2τ, not whenever a median sits next to its bound.
//!
//! **Confirmation.** The test assumes independent trials, and a machine does not always oblige:
//! on a virtual machine the hypervisor moves vCPUs between cores every few seconds, and a
//! two-CPU ratio measured in one burst of trials describes where the vCPUs happened to be. So a
//! verdict needs trials from two visits of the planner, tens of seconds apart: a test that
//! decides in a visit makes the verdict *provisional*, and a later visit runs a batch of
//! [`confirm_trials`] more trials. The verdict stands unless some visit's trials *contradict*
//! it: a one-sided sign test on that visit's normalised ratios alone (how many lie on the wrong
//! side of the bound, against Binomial(n, ½)) finds them beyond the bound at level
//! [`CONTRADICTION_LEVEL`]. A contradicted claim is undecided ("the ratio changed during the
//! run"). A visit's median merely lying across the bound is not a contradiction: a visit of a
//! few dozen trials of a noisy ratio (a wake-up latency) puts its median a few percent either
//! side of the truth, and taking that as a veto left claims undecided whose median lay 10% inside
//! their bound. This costs nothing in ε (a final verdict still needs the test's decision) and
//! turns a run whose ratio really moved into "undecided" instead of a verdict the next run
//! would contradict.
//!
//! **Restart.** The gate's knowledge is an intersection over all trials, each end learnt once
//! and kept, which assumes the trials come from one distribution. When the ratio moves during
//! the run (a per-CPU add against `lock xadd` drifted from 4 to 7 on a 2-vCPU VM as the host
//! moved its vCPUs), early trials can teach "not above the band" and later ones "not below
//! it", and the gate concludes "at the bound" with the median of its trials far outside the
//! band. So when it concludes "at the bound" while that median lies more than 2τ from 1, the
//! claim starts its test again on the trials that follow — once, with the other half of ε —
//! and the verdict rests on the trials since the restart. (The median's position only
//! triggers the restart; it decides nothing.)
//!
//! The test is the gate's sign counting, so a trial costs O(1); the ranks depend on the number
//! of trials only. [`ClaimState::outlook`] runs the same ranks forward to say how many more
//! trials a claim would need at its current proportions, which is what the planner spends time
//! by.

use spindle_stats::{quantile_bounds, quantile_interval, sign_tail, GateVerdict, ToleranceGate};

use crate::report::format::{num, plain};
use crate::results::{ClaimResult, Operand, Summary, Verdict};
use crate::spec::{Claim, Plan, Relation};

use super::data::{Data, Layout};

/// No outlook beyond this many trials: a claim that far away is at its bound.
const OUTLOOK_CAP: u64 = 1 << 20;

/// A visit's trials contradict a provisional verdict when a sign test on them alone puts the
/// median beyond the bound at this level (one-sided): with the batch of 10 trials that a later
/// visit runs, 9 or 10 on the wrong side. A visit drawn from the distribution that decided the
/// test almost never does (at most this often when that median sits at the bound itself).
pub const CONTRADICTION_LEVEL: f64 = 0.05;

/// Trials a later visit runs to confirm a provisional verdict: 10, or the profile's minimum of
/// trials where that is less.
pub fn confirm_trials(min_trials: u64) -> u64 {
    min_trials.clamp(1, 10)
}

/// Whether one visit's normalised ratios (small is good, the bound at 1) contradict a verdict
/// that the claim holds (`holds`) or is violated: a one-sided sign test of "the median lies on
/// the verdict's side" rejects at [`CONTRADICTION_LEVEL`].
fn contradicts(normalised: &[f64], holds: bool) -> bool {
    let wrong = normalised
        .iter()
        .filter(|&&r| if holds { r > 1.0 } else { r < 1.0 })
        .count() as u64;
    sign_tail(normalised.len() as u64, wrong) < CONTRADICTION_LEVEL
}

/// One claim's test and bookkeeping.
pub(crate) struct ClaimState {
    gate: ToleranceGate,
    relation: Relation,
    /// (variant, metric) of each operand.
    num: (usize, usize),
    den: (usize, usize),
    /// Sections of the two operands (the claim keeps them running while it is open).
    pub sections: [usize; 2],
    pub guarantee: bool,
    names: [Operand; 2],
    /// An operand runs on the lab's CPU pair (two threads): its figures depend on where the
    /// host puts those CPUs (see `placement.rs`).
    two_thread: bool,
    /// Trials whose operands hit a cap in a way that leaves the relation unknown.
    capped: u64,
    /// Trials whose raw ratio satisfied the relation.
    satisfied: u64,
    /// Normalised ratios below 1 / (1 + τ), and above 1 + τ.
    good: u64,
    bad: u64,
    /// The test decided in visit `.1`: the verdict waits for a later visit's batch of trials.
    provisional: Option<(ClaimResult, u32)>,
    /// The final verdict with its figures, fixed at the trial that decided it (and confirmed):
    /// every report shows the same numbers for a claim, whatever ran after.
    pub frozen: Option<ClaimResult>,
    /// [`Self::outlook`] as of the last kept trial.
    pub expected: Option<u64>,
    /// The first trial the test reads: 0, or the trial after a restart.
    since: usize,
    /// Trials the test had read when it restarted (None: it has not).
    restarted_after: Option<u64>,
}

impl ClaimState {
    pub fn new(spec: &Claim, plan: &Plan<'_>, layout: &Layout, eps: f64) -> Result<Self, String> {
        let n = layout.variant(plan, &spec.numerator.0);
        let d = layout.variant(plan, &spec.denominator.0);
        let (nm, dm) = (
            layout.metric(plan, n, spec.numerator.1),
            layout.metric(plan, d, spec.denominator.1),
        );
        let name = |v: usize, m: usize| Operand {
            variant: plan.variants[v].id.clone(),
            metric: plan.sections[layout.section_of[v]].metrics[m].id.into(),
        };
        if !(spec.relation.bound() > 0.0 && spec.relation.bound().is_finite()) {
            return Err(format!(
                "claim {}: the bound {} is not a positive number",
                spec.id,
                spec.relation.bound()
            ));
        }
        let mut state = ClaimState {
            gate: ToleranceGate::new(spec.margin, eps / 2.0)
                .map_err(|e| format!("claim {}: {e}", spec.id))?,
            relation: spec.relation,
            num: (n, nm),
            den: (d, dm),
            sections: [layout.section_of[n], layout.section_of[d]],
            guarantee: spec.kind == crate::results::ClaimKind::Guarantee,
            names: [name(n, nm), name(d, dm)],
            two_thread: super::placement::on_the_pair(&plan.variants[n])
                || super::placement::on_the_pair(&plan.variants[d]),
            capped: 0,
            satisfied: 0,
            good: 0,
            bad: 0,
            provisional: None,
            frozen: None,
            expected: None,
            since: 0,
            restarted_after: None,
        };
        state.expected = state.outlook();
        Ok(state)
    }

    /// No final verdict yet (its test is running, or its verdict awaits confirmation).
    pub fn is_open(&self) -> bool {
        self.frozen.is_none()
    }

    /// Its test is still running.
    pub fn testing(&self) -> bool {
        self.frozen.is_none() && self.provisional.is_none()
    }

    /// Whether it needs trials in visit `visit`: its test is running, or its verdict awaits a
    /// batch of trials from a visit after the one that decided it.
    pub fn needs_trials(&self, visit: u32) -> bool {
        self.testing()
            || (self.provisional() && self.provisional.as_ref().is_some_and(|(_, v)| *v != visit))
    }

    /// The two variants whose ratio the claim bounds.
    pub fn operands(&self) -> [usize; 2] {
        [self.num.0, self.den.0]
    }

    /// A provisional verdict, awaiting confirmation.
    pub fn provisional(&self) -> bool {
        self.frozen.is_none() && self.provisional.is_some()
    }

    /// What a provisional verdict amounts to if no visit confirms it: undecided, with the
    /// test's figures and the verdict it would have been.
    pub fn unconfirmed(&self) -> Option<ClaimResult> {
        let (mut result, _) = self.provisional.clone().filter(|_| self.frozen.is_none())?;
        result.explanation = format!(
            "the test decided ({}: {}) but no later visit confirmed it before the time ran out",
            result.verdict.word(result.kind),
            result.explanation
        );
        result.verdict = Verdict::Undecided;
        Some(result)
    }

    /// Small is good: the claim holds iff the median of this is at most 1.
    fn normalise(&self, ratio: f64) -> f64 {
        match self.relation {
            Relation::AtMost(b) => ratio / b,
            Relation::AtLeast(b) => b / ratio,
        }
    }

    fn ratio_at(&self, data: &Data, t: usize) -> f64 {
        data.values[self.num.0][self.num.1][t] / data.values[self.den.0][self.den.1][t]
    }

    /// Feeds trial `t` (kept in visit `visit`) and moves the claim on: a test that decides
    /// makes the verdict provisional (or final, when its trials already span two visits that
    /// agree); a provisional verdict with a full batch of trials from a later visit becomes
    /// final. Returns the final result when this trial made it final.
    pub fn keep(
        &mut self,
        spec: &Claim,
        data: &Data,
        t: usize,
        visit: u32,
        eps: f64,
        min_trials: u64,
    ) -> Option<ClaimResult> {
        if !self.is_open() {
            return None;
        }
        let batch = confirm_trials(min_trials);
        if self.testing() {
            if !self.observe(data, t) {
                return None;
            }
            let result = self.judge(spec, data, eps, "");
            if result.verdict == Verdict::Undecided {
                // Not judged (a cap) or at the bound: nothing to confirm.
                self.frozen = Some(result.clone());
                return Some(result);
            }
            self.provisional = Some((result, visit));
        }
        let (result, decided_in) = self.provisional.clone()?;
        let batches = self.batches(data);
        let later = batches
            .iter()
            .filter(|(v, ratios)| *v != decided_in && ratios.len() as u64 >= batch)
            .count();
        if later == 0 {
            return None;
        }
        let final_result = self.confirmed(result, data, &batches, batch);
        self.frozen = Some(final_result.clone());
        Some(final_result)
    }

    /// The claim's normalised ratios, grouped by the visit that kept them.
    fn batches(&self, data: &Data) -> Vec<(u32, Vec<f64>)> {
        let mut out: Vec<(u32, Vec<f64>)> = Vec::new();
        for t in self.since..data.trials as usize {
            let r = self.ratio_at(data, t);
            if r.is_nan() {
                continue;
            }
            let v = data.visit[t];
            match out.iter_mut().find(|(x, _)| *x == v) {
                Some((_, list)) => list.push(self.normalise(r)),
                None => out.push((v, vec![self.normalise(r)])),
            }
        }
        out
    }

    /// The provisional `result` checked against every visit's batch of at least `batch`
    /// trials: it stands unless a batch's own trials put the median across the bound
    /// ([`contradicts`]).
    fn confirmed(
        &self,
        mut result: ClaimResult,
        data: &Data,
        batches: &[(u32, Vec<f64>)],
        batch: u64,
    ) -> ClaimResult {
        // The decision's placement clause gives way to one over every trial so far, after the
        // visits' medians: a move between visits shows there.
        let decided = super::placement::without_clause(&result.explanation).to_string();
        let placements = self.placement_clause(data);
        let holds = result.verdict == Verdict::Holds;
        let visits: Vec<(usize, f64, bool)> = batches
            .iter()
            .filter(|(_, r)| r.len() as u64 >= batch)
            .map(|(_, r)| {
                let mut sorted = r.clone();
                sorted.sort_by(f64::total_cmp);
                let median = sorted[(sorted.len() - 1) / 2];
                (r.len(), median, contradicts(r, holds))
            })
            .collect();
        let raw = |m: f64| match self.relation {
            Relation::AtMost(b) => m * b,
            Relation::AtLeast(b) => b / m,
        };
        let list = visits
            .iter()
            .map(|&(n, m, _)| format!("{} ({n} trials)", num(raw(m))))
            .collect::<Vec<_>>()
            .join(", ");
        result.confirmation = visits.iter().map(|&(n, m, _)| (n as u64, raw(m))).collect();
        if visits.iter().any(|&(_, _, c)| c) {
            result.explanation = format!(
                "the test decided ({decided}) but one visit's trials put the median ratio across the bound (each visit's median ratio: {list}). The machine changed during the run (a hypervisor moving vCPUs, other tenants), so no verdict{placements}"
            );
            result.verdict = Verdict::Undecided;
        } else {
            result.explanation = format!(
                "{decided}; no visit's trials contradict it (each visit's median ratio: {list}){placements}"
            );
        }
        result
    }

    /// Feeds trial `t` to the test; true when this trial settled it.
    fn observe(&mut self, data: &Data, t: usize) -> bool {
        let ratio = self.ratio_at(data, t);
        if ratio.is_nan() {
            return false;
        }
        let r = self.normalise(ratio);
        let (num_capped, den_capped) = (data.capped[self.num.0][t], data.capped[self.den.0][t]);
        if num_capped || den_capped {
            // A capped run's value is a lower bound on what the full run would have measured.
            // When that bound already puts r' below 1 / (1 + τ) — a capped numerator past an
            // "at least", a capped denominator under an "at most" — the true r' is lower still
            // and the trial counts as measured; otherwise its answer is unknown, and leaving it
            // out would bias the test, so the claim is not judged.
            let bound_is_upper = match self.relation {
                Relation::AtLeast(_) => num_capped && !den_capped,
                Relation::AtMost(_) => den_capped && !num_capped,
            };
            if !(bound_is_upper && r < self.gate.lower_ratio()) {
                self.capped += 1;
                return true;
            }
        }
        self.satisfied += u64::from(self.relation.holds(ratio));
        self.good += u64::from(r < self.gate.lower_ratio());
        self.bad += u64::from(r > self.gate.upper_ratio());
        match self.gate.observe(r) {
            Some(GateVerdict::Within) if self.restarted_after.is_none() => {
                if self.median_far_from_band(data) {
                    self.restart(t + 1);
                    return false;
                }
                true
            }
            Some(_) => true,
            None => false,
        }
    }

    /// Whether the median of the test's normalised ratios lies more than 2τ from 1 (see
    /// "Restart" in the module documentation).
    fn median_far_from_band(&self, data: &Data) -> bool {
        let mut normalised: Vec<f64> = self
            .ratios(data)
            .iter()
            .map(|&r| self.normalise(r))
            .collect();
        if normalised.is_empty() {
            return false;
        }
        normalised.sort_by(f64::total_cmp);
        let median = normalised[(normalised.len() - 1) / 2];
        let (lo, hi) = (self.gate.lower_ratio(), self.gate.upper_ratio());
        median < lo * lo || median > hi * hi
    }

    /// Starts the test again at trial `from`.
    fn restart(&mut self, from: usize) {
        self.restarted_after = Some(self.gate.pairs());
        self.since = from;
        self.gate.restart();
        (self.satisfied, self.good, self.bad) = (0, 0, 0);
    }

    /// About how many more trials the test needs at its current proportions (None: it sits at
    /// the bound, or it is not open).
    pub fn outlook(&self) -> Option<u64> {
        if !self.is_open() {
            return None;
        }
        if self.provisional() {
            // A batch in the next visit.
            return Some(10);
        }
        let n = self.gate.pairs();
        if n < 10 {
            // Too few trials to estimate anything (its windows were discarded, say): at least
            // the 17 that Robbins' sequence needs at ε/2 = 5 × 10⁻⁴ with every trial on one side.
            return Some(18 - n);
        }
        let log_eps = self.gate.log_eps();
        // Shrunk towards ½, so that a few lucky trials do not promise a quick decision.
        let p = |k: u64| (k as f64 + 1.0) / (n as f64 + 2.0);
        let needed = |p: f64, good: bool| -> Option<u64> {
            if p <= 0.5 {
                return None;
            }
            let decides = |m: u64| {
                let ranks = quantile_bounds(m, 0.5, log_eps);
                if good {
                    ranks
                        .upper
                        .is_some_and(|u| (p * m as f64).floor() as u64 >= u)
                } else {
                    ranks
                        .lower
                        .is_some_and(|l| (((1.0 - p) * m as f64).ceil() as u64) < l)
                }
            };
            let mut hi = (n + 1).max(16);
            while !decides(hi) {
                hi *= 2;
                if hi > OUTLOOK_CAP {
                    return None;
                }
            }
            let mut lo = n.max(hi / 2);
            while lo + 1 < hi {
                let mid = lo + (hi - lo) / 2;
                if decides(mid) {
                    hi = mid;
                } else {
                    lo = mid;
                }
            }
            Some(hi - n)
        };
        [needed(p(self.good), true), needed(p(self.bad), false)]
            .into_iter()
            .flatten()
            .min()
    }

    /// The ratios of every trial the test reads in which both operands ran, in trial order.
    fn ratios(&self, data: &Data) -> Vec<f64> {
        (self.since..data.trials as usize)
            .map(|t| self.ratio_at(data, t))
            .filter(|r| !r.is_nan())
            .collect()
    }

    /// Trials from separate placements of the two CPUs (see `placement.rs`): each one's
    /// median, a clause for the end of the explanation (empty if there is nothing to say).
    fn placement_clause(&self, data: &Data) -> String {
        if !self.two_thread {
            return String::new();
        }
        super::placement::by_placement(
            &(self.since..data.trials as usize)
                .map(|t| (data.round_trip[t], self.ratio_at(data, t)))
                .collect::<Vec<_>>(),
        )
        .unwrap_or_default()
    }

    /// The confidence sequence's interval for the median ratio (in the claim's own units),
    /// narrowed to what the gate has established over all trials.
    fn interval(&self, ratios: &[f64]) -> (f64, f64) {
        let normalised: Vec<f64> = ratios.iter().map(|&r| self.normalise(r)).collect();
        let q = quantile_interval(&normalised, 0.5, self.gate.log_eps());
        let lo = q.and_then(|q| q.lower).unwrap_or(0.0);
        let hi = q.and_then(|q| q.upper).unwrap_or(f64::INFINITY);
        let (lo, hi) = self.gate.clamp((lo, hi));
        match self.relation {
            Relation::AtMost(b) => (lo * b, hi * b),
            Relation::AtLeast(b) => (b / hi, b / lo),
        }
    }

    /// The verdict and its explanation from the trials so far; `open_note` says why an open
    /// claim is still open (the time ran out, the section was loaded …).
    pub fn judge(&self, spec: &Claim, data: &Data, eps: f64, open_note: &str) -> ClaimResult {
        let ratios = self.ratios(data);
        let mut ratio = Summary::of(&ratios, eps);
        let (lo, hi) = self.interval(&ratios);
        ratio.median_lo = (lo > 0.0 && lo.is_finite()).then_some(lo);
        ratio.median_hi = hi.is_finite().then_some(hi);
        let margin = format!("{}%", plain(spec.margin * 100.0));
        let bound = format!(
            "{} {}",
            spec.relation.symbol(),
            plain(spec.relation.bound())
        );
        let restart = self.restarted_after.map_or(String::new(), |n| {
            format!(
                " since the test restarted (its first {n} trials put the median at the bound while their own interval lay outside it: the ratio moved during the run)"
            )
        });
        let figure = if lo > 0.0 || hi.is_finite() {
            format!(
                "median ratio {}, interval [{}, {}] after {} trials{restart}",
                num(ratio.median),
                num(lo),
                if hi.is_finite() {
                    num(hi)
                } else {
                    "∞".into()
                },
                self.gate.pairs()
            )
        } else {
            format!(
                "median ratio {} after {} trials{restart}, too few for an interval",
                num(ratio.median),
                self.gate.pairs()
            )
        };
        let (verdict, mut explanation) = if self.capped > 0 {
            (
                Verdict::Undecided,
                format!(
                    "not judged: in {} trial(s) a run hit its time cap, which leaves the ratio unknown (a capped value is only a lower bound)",
                    self.capped
                ),
            )
        } else {
            match self.gate.verdict() {
                GateVerdict::Faster => (
                    Verdict::Holds,
                    format!("{figure}: more than {margin} inside the bound ({bound})"),
                ),
                GateVerdict::Slower => (
                    Verdict::Violated,
                    format!("{figure}: more than {margin} beyond the bound ({bound})"),
                ),
                GateVerdict::Within => (
                    Verdict::Undecided,
                    format!("{figure}: within {margin} of the bound ({bound}), too close to call"),
                ),
                GateVerdict::Undecided => (
                    Verdict::Undecided,
                    format!("{figure}: the interval still reaches within {margin} of the bound ({bound}){open_note}"),
                ),
            }
        };
        explanation.push_str(&self.placement_clause(data));
        ClaimResult {
            id: spec.id.into(),
            kind: spec.kind,
            statement: spec.statement.clone(),
            reference: spec
                .reference
                .as_ref()
                .map(|(doc, figure)| format!("{}: {figure}", doc.short())),
            numerator: self.names[0].clone(),
            denominator: self.names[1].clone(),
            relation: spec.relation.name().into(),
            bound: spec.relation.bound(),
            verdict,
            explanation,
            trials: self.gate.pairs(),
            successes: self.satisfied,
            capped_trials: self.capped,
            margin: Some(spec.margin),
            confirmation: Vec::new(),
            success_interval: None,
            band: None,
            eps,
            ratio,
            ratios,
        }
    }
}
