//! The trial loop: calibration, warm-up, interleaved trials of the sections still at work, and
//! windows of trials kept only when no other process loaded the machine.

use std::time::{Duration, Instant};

use crate::kit::calibrate;
use crate::load::{Load, Reading};
use crate::progress::Status;
use crate::results::Profile;
use crate::spec::{Body, Claim, Plan, Sample, Variant};

use super::data::Layout;
use super::state::{is_fixed, State};
use super::Ctx;

/// Trials are kept or discarded a window at a time; a window closes after this long.
const WINDOW: Duration = Duration::from_millis(500);

/// A window may close early, once the trials in it may settle a claim or fill a table — but
/// not before this long: a shorter one holds too few ticks of CPU time to see a competing
/// process in.
const MIN_WINDOW: Duration = Duration::from_millis(100);

/// The root of `i` in a union-find forest (`parent`), halving the path on the way.
fn root(parent: &mut [usize], mut i: usize) -> usize {
    while parent[i] != i {
        parent[i] = parent[parent[i]];
        i = parent[i];
    }
    i
}

/// The variants of a trial in *blocks* that run one after another: a section's variants
/// together, and sections that a claim joins (its two variants in different sections, as wal's
/// writer against the `fsync` floor) in one block, so that every claim's two runs fall in one
/// block (see `one_trial`).
fn blocks(plan: &Plan<'_>, layout: &Layout) -> Vec<Vec<usize>> {
    let sections = layout.members.len();
    let mut parent: Vec<usize> = (0..sections).collect();
    let section = |id: &str| {
        plan.variants
            .iter()
            .position(|v| v.id == id)
            .map(|v| layout.section_of[v])
    };
    for c in &plan.claims {
        if let (Some(a), Some(b)) = (section(&c.numerator.0), section(&c.denominator.0)) {
            let (ra, rb) = (root(&mut parent, a), root(&mut parent, b));
            parent[ra] = rb;
        }
    }
    let mut blocks: Vec<Vec<usize>> = vec![Vec::new(); sections];
    for (s, members) in layout.members.iter().enumerate() {
        let r = root(&mut parent, s);
        blocks[r].extend(members);
    }
    blocks.retain(|b| !b.is_empty());
    blocks
}

/// Gives the variants that claims compare one size of work per run.
///
/// A section's variants do the same operation (their metric is its time, or a quantile of its
/// latency), and a run of `n` of them includes costs that do not grow with `n`: threads that
/// start and finish, a tail in which some wait for others. Sized apart, a claim's two variants
/// were compared at different `n`, as far apart as their calibrations were noisy: on the
/// 2-vCPU Zen 4 guest, four `lab rings` runs sized 8 threads through Spindle's channel and
/// kanal's to 74 021 and 111 919, 66 699 and 71 902, 44 919 and 58 597, 34 275 and 119 579
/// messages, and the verdict of `mpmc-vs-kanal` depended on the sizes as much as on the code.
///
/// Variants joined by claims (a claim joins its two variants when they are of one section and
/// one kind, and calibrated within [`NEAR`] × of each other) form groups; a group runs at the
/// smaller median of its members' calibrated sizes, at most 4 × the smallest (so that no run
/// takes more than about 4 × the target) and within every member's `max_work`. Two variants
/// further apart than [`NEAR`] (a `membarrier` against `mprotect`, a padded counter against a
/// contended one) keep their sizes: one size would make the cheap one's runs too short to time
/// or the dear one's too long for the budget, and a cost that far from the other is not turned
/// by a fixed cost per run. Variants no claim compares, fixed sizes and variants that size
/// their own work are left alone.
fn equal_work(variants: &[Variant<'_>], claims: &[Claim], work: &mut [u64]) {
    let kind = |b: &Body<'_>| match b {
        Body::PerOp(_) => 0,
        Body::Calibrated(_) => 1,
        Body::Fixed(_) => 2,
    };
    let index = |id: &str| variants.iter().position(|v| v.id == id);
    // Union-find over the variants, joined by the claims that compare them.
    let mut parent: Vec<usize> = (0..variants.len()).collect();
    for c in claims {
        let (Some(a), Some(b)) = (index(&c.numerator.0), index(&c.denominator.0)) else {
            continue;
        };
        let (va, vb) = (&variants[a], &variants[b]);
        let (lo, hi) = (work[a].min(work[b]), work[a].max(work[b]));
        if a == b
            || va.section != vb.section
            || kind(&va.body) != kind(&vb.body)
            || is_fixed(&va.body)
            || va.fixed_work.is_some()
            || vb.fixed_work.is_some()
            || hi > lo.saturating_mul(NEAR)
        {
            continue;
        }
        let (ra, rb) = (root(&mut parent, a), root(&mut parent, b));
        parent[ra] = rb;
    }
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut group_of = vec![usize::MAX; variants.len()];
    for i in 0..variants.len() {
        let r = root(&mut parent, i);
        if group_of[r] == usize::MAX {
            group_of[r] = groups.len();
            groups.push(Vec::new());
        }
        groups[group_of[r]].push(i);
    }
    for group in groups.iter().filter(|g| g.len() >= 2) {
        let mut sizes: Vec<u64> = group.iter().map(|&j| work[j]).collect();
        sizes.sort_unstable();
        let cap = group
            .iter()
            .map(|&j| variants[j].max_work)
            .min()
            .unwrap_or(1);
        let common = sizes[(sizes.len() - 1) / 2]
            .min(sizes[0].saturating_mul(4))
            .min(cap)
            .max(1);
        for &j in group {
            work[j] = common;
        }
    }
}

/// Two variants a claim compares share a size of work only when their calibrated sizes are
/// within this factor of each other (see [`equal_work`]).
const NEAR: u64 = 16;

/// A trial measured but not yet kept: `samples[v]` is None for variants that did not run.
struct Pending {
    samples: Vec<Option<Sample>>,
    active: Vec<bool>,
}

/// Trials since the last load reading.
struct Window {
    start: Option<Reading>,
    /// The two-thread CPUs' round trip as the window opened (see `placement.rs`).
    round_trip: Option<f64>,
    opened: Instant,
    trials: Vec<Pending>,
}

impl Window {
    /// Trials of each of `sections` sections in the window.
    fn counts(&self, sections: usize) -> Vec<u64> {
        (0..sections)
            .map(|s| self.trials.iter().filter(|t| t.active[s]).count() as u64)
            .collect()
    }
}

impl Ctx<'_> {
    /// Whether this visit must go on past its slice until the experiment has a trial: in the
    /// smoke profile only, whose job is to prove that every experiment runs and reports. Its
    /// slices (2 s, then at least 3 s) are sized for the release build on a quiet machine; the
    /// debug build of `wal` (48 appending runs to warm up, then as many in its first trial)
    /// outlasted both on a quiet 2-vCPU guest, and `fences` did beside a CPU hog, and an
    /// experiment without a trial fails the test command's smoke test. Measuring profiles keep
    /// their slices: there a starved experiment is the planner's business (`next_visit`).
    fn owes_a_trial(&self, trials: u64) -> bool {
        matches!(self.profile, Profile::Smoke) && trials == 0
    }

    /// Sizes each variant's work to the run target (first visit only; the variants a claim
    /// compares then get one size, see [`equal_work`]), then runs every
    /// variant that will run once without recording it: page faults, lazy initialisation,
    /// caches, and on later visits whatever ran in between (a variant that calibration has
    /// just run in this visit is warm already). False when the slice ran out first (a machine
    /// so loaded that calibrating took it all): the sizes found so far are kept
    /// (`State::partial`), and the next visit goes on from there. Before, it started again,
    /// and on a loaded machine an experiment whose calibration and warm-up outlast a slice
    /// (`fences`: global membarriers and batches of loaded threads) could spend every visit
    /// calibrating and never run a trial.
    pub(super) fn prepare(
        &mut self,
        plan: &mut Plan<'_>,
        layout: &Layout,
        state: &mut State,
    ) -> bool {
        let limits = self.limits();
        let active = state.active_sections(limits.min_trials, limits.max_trials, &[]);
        let running = state.running(layout, &active, limits.min_trials, &[]);
        let target = self.run_target(plan.variants.len()) / plan.run_divisor.max(1);
        let calibrating = state.work.is_none();
        let nv = plan.variants.len();
        let (mut work, from) = match (&state.work, state.partial.take()) {
            (Some(w), _) => (w.clone(), nv),
            (None, Some((w, k))) => (w, k),
            (None, None) => (vec![1; nv], 0),
        };
        // Variants run by this visit's calibration (warm: no warm-up run for them).
        let mut warm = vec![false; nv];
        if calibrating {
            for (i, v) in plan.variants.iter_mut().enumerate().skip(from) {
                if self.stop_requested() {
                    state.work = Some(work);
                    return true;
                }
                if self.elapsed() >= self.slice && !self.owes_a_trial(state.data.trials) {
                    state.partial = Some((work, i));
                    return false;
                }
                self.status(&format!("calibrating ({}/{nv})", i + 1));
                work[i] = match (&mut v.body, v.fixed_work) {
                    (Body::Fixed(_), _) => work[i],
                    (_, Some(n)) => n,
                    (Body::PerOp(f), None) => {
                        warm[i] = true;
                        calibrate(target, 1, v.max_work, |n| f(n).as_duration())
                    }
                    (Body::Calibrated(f), None) => {
                        warm[i] = true;
                        calibrate(target, 1, v.max_work, |n| {
                            let t = Instant::now();
                            let s = f(n);
                            s.elapsed.unwrap_or_else(|| t.elapsed())
                        })
                    }
                };
            }
            let calibrated = work.clone();
            equal_work(&plan.variants, &plan.claims, &mut work);
            // A variant whose size `equal_work` changed has not run at that size yet.
            for (w, (a, b)) in warm.iter_mut().zip(work.iter().zip(&calibrated)) {
                *w &= a == b;
            }
            // Calibration is done: keep it even if the warm-up below runs out of slice.
            state.work = Some(work.clone());
        }
        for (i, v) in plan.variants.iter_mut().enumerate() {
            if self.stop_requested() {
                break;
            }
            if self.elapsed() >= self.slice && !self.owes_a_trial(state.data.trials) {
                return false;
            }
            if (!calibrating && !running[i]) || warm[i] {
                continue;
            }
            self.status(&format!("warming up ({}/{nv})", i + 1));
            let t = Instant::now();
            run_once(&mut v.body, work[i]);
            state.ran(i, t.elapsed().as_secs_f64());
        }
        true
    }

    /// Runs trials until every section is done, the slice is spent or the user stops; returns
    /// why it stopped.
    pub(super) fn run_trials(
        &mut self,
        plan: &mut Plan<'_>,
        layout: &Layout,
        state: &mut State,
    ) -> String {
        let limits = self.limits();
        let mut window = Window {
            start: self.load.read(),
            round_trip: self.placement(plan),
            opened: Instant::now(),
            trials: Vec::new(),
        };
        let mut last_write = Instant::now();
        let first = state.data.trials;
        let sections = plan.sections.len();
        let reason = loop {
            let pending = window.counts(sections);
            let active = state.active_sections(limits.min_trials, limits.max_trials, &pending);
            let ran = state.data.trials + window.trials.len() as u64 - first;
            if !active.contains(&true) {
                break format!("every section finished ({ran} trials in this visit)");
            }
            let running = state.running(layout, &active, limits.min_trials, &pending);
            let next = state.predict(&running);
            let spent = self.elapsed() >= self.slice
                && !self.owes_a_trial(state.data.trials + window.trials.len() as u64);
            if spent || (ran > 0 && self.elapsed() + next > self.slice) {
                break format!(
                    "its {:.0} s were spent ({ran} trials in this visit)",
                    self.slice.as_secs_f64()
                );
            }
            if self.stop_requested() {
                break format!("interrupted ({ran} trials in this visit)");
            }
            let Some(trial) = self.one_trial(plan, layout, state, active, &running) else {
                break format!("interrupted ({ran} trials in this visit)");
            };
            window.trials.push(trial);
            let age = window.opened.elapsed();
            if age >= WINDOW
                || (age >= MIN_WINDOW
                    && state.pending_may_settle(limits.min_trials, &window.counts(sections)))
            {
                self.close_window(plan, layout, state, &mut window);
            }
            self.report_status(state);
            if last_write.elapsed() >= Duration::from_secs(2) {
                let partial = self.assemble(plan, layout, state, "running", false);
                self.session.snapshot(&partial);
                last_write = Instant::now();
            }
        };
        self.close_window(plan, layout, state, &mut window);
        reason
    }

    /// Every variant marked in `running` once, in a fresh random order: the *blocks* (see
    /// [`blocks`]) in a random order, and each block's variants, in a random order, one after
    /// another. A host whose speed changes from one tenth of a second to the next (a neighbour
    /// taking the core's caches, on a cloud VM) slows a run by up to 3 × (figures in the stop
    /// note of 2026-11-29): the closer in time a claim's two runs are, the less such a change
    /// falls between them and makes its per-trial ratio say more about the host than about the
    /// code. Shuffled over the whole experiment, a claim's two variants were dozens of runs
    /// apart in experiments of many sections. None when the user stopped in the middle (an
    /// incomplete trial is not kept).
    fn one_trial(
        &mut self,
        plan: &mut Plan<'_>,
        layout: &Layout,
        state: &mut State,
        active: Vec<bool>,
        running: &[bool],
    ) -> Option<Pending> {
        let mut blocks = blocks(plan, layout);
        self.rng.shuffle(&mut blocks);
        let mut order = Vec::with_capacity(plan.variants.len());
        for block in blocks {
            let start = order.len();
            order.extend(block.into_iter().filter(|&v| running[v]));
            self.rng.shuffle(&mut order[start..]);
        }
        let work = state.work.clone().expect("prepared");
        let mut samples: Vec<Option<Sample>> = (0..plan.variants.len()).map(|_| None).collect();
        for v in order {
            if self.stop_requested() {
                return None;
            }
            let t = Instant::now();
            samples[v] = Some(run_once(&mut plan.variants[v].body, work[v]));
            state.ran(v, t.elapsed().as_secs_f64());
        }
        Some(Pending { samples, active })
    }

    /// Reads the load since the window opened: keeps its trials (feeding the claims) when it
    /// was quiet, discards them otherwise. Opens the next window.
    fn close_window(
        &mut self,
        plan: &Plan<'_>,
        layout: &Layout,
        state: &mut State,
        window: &mut Window,
    ) {
        // A window too short to count a competing process's ticks (the last of a visit) waits
        // out the minimum: the load while it waits stands for the load while it measured.
        let age = window.opened.elapsed();
        if !window.trials.is_empty() && age < MIN_WINDOW {
            std::thread::sleep(MIN_WINDOW - age);
        }
        // The probe before the load reading: its own CPU time belongs to this window, whose
        // trials are over, not to the next one's.
        let round_trip = self.placement(plan);
        let now = self.load.read();
        let load = match (&window.start, &now) {
            (Some(a), Some(b)) => Some(Load::between(a, b, self.load.ticks_per_second())),
            _ => None,
        };
        let loaded = load.is_some_and(|l| l.disturbs(self.cores()));
        let discard = loaded && self.load.discards();
        // A loaded window's probes may have waited for the other work: no placement.
        let tag = if loaded {
            f64::NAN
        } else {
            super::placement::window_tag(window.round_trip, round_trip)
        };
        let trials = std::mem::take(&mut window.trials);
        for (s, section) in state.sections.iter_mut().enumerate() {
            let ran = trials.iter().filter(|t| t.active[s]).count() as u64;
            if ran > 0 {
                if let Some(load) = &load {
                    section.window(load, loaded, discard, ran);
                }
                let pair = layout.members[s]
                    .iter()
                    .any(|&v| super::placement::on_the_pair(&plan.variants[v]));
                if pair {
                    super::placement::record(&mut section.round_trip, tag);
                }
            }
        }
        if !discard {
            for trial in trials {
                self.keep(plan, layout, state, trial, tag);
            }
        }
        *window = Window {
            start: now,
            round_trip,
            opened: Instant::now(),
            trials: Vec::new(),
        };
    }

    /// The round trip between the CPUs of the plan's two-thread variants now (None without
    /// such variants, or a second CPU): the placement the next window's trials run in.
    fn placement(&self, plan: &Plan<'_>) -> Option<f64> {
        if !plan.variants.iter().any(super::placement::on_the_pair) {
            return None;
        }
        let [a, b] = self.cpu_pair()?;
        crate::sys::quick_round_trip_ns(a, b)
    }

    /// Records a trial (placement tag `round_trip`, see `placement.rs`) and feeds it to the
    /// open claims, freezing those it decides.
    fn keep(
        &mut self,
        plan: &Plan<'_>,
        layout: &Layout,
        state: &mut State,
        trial: Pending,
        round_trip: f64,
    ) {
        for (s, &a) in trial.active.iter().enumerate() {
            state.sections[s].trials += u64::from(a);
        }
        let visit = state.visit();
        state
            .data
            .push(plan, layout, visit, round_trip, trial.samples);
        let t = state.data.trials as usize - 1;
        let min_trials = self.limits().min_trials;
        for (spec, claim) in plan.claims.iter().zip(state.claims.iter_mut()) {
            if let Some(result) = claim.keep(spec, &state.data, t, visit, self.eps, min_trials) {
                self.session
                    .progress()
                    .claim_decided(self.info.name, &result);
            }
            claim.expected = claim.outlook();
        }
    }

    fn report_status(&self, state: &State) {
        let claims = state.claims.len();
        self.session.progress().status(
            self.info.name,
            &Status {
                phase: "trials",
                trials: state.data.trials,
                elapsed: self.elapsed(),
                budget: self.slice,
                claims_decided: claims - state.open_claims(),
                claims,
            },
        );
    }
}

/// One run of a variant with `work` units.
fn run_once(body: &mut Body<'_>, work: u64) -> Sample {
    match body {
        Body::PerOp(f) => {
            let span = f(work);
            Sample::new()
                .with("time", span.ns / work as f64)
                .with("ticks", span.ticks / work as f64)
        }
        Body::Calibrated(f) => f(work),
        Body::Fixed(f) => f(),
    }
}

#[cfg(test)]
mod tests {
    use super::{blocks, equal_work};
    use crate::kit::Span;
    use crate::runner::data::Layout;
    use crate::spec::{Claim, Plan, Sample, Section, Variant};

    fn op(section: &'static str, id: &str) -> Variant<'static> {
        Variant::per_op(section, id, id, |_| Span::default())
    }

    fn claim(a: &str, b: &str) -> Claim {
        Claim::guarantee("c", "").ratio(a, b).at_most(1.0)
    }

    /// A section's variants stay together; a claim across two sections puts both in one block.
    #[test]
    fn a_trial_runs_each_section_and_each_claim_in_one_block() {
        let mut plan = Plan::new();
        for s in ["a", "b", "c", "d"] {
            plan.section(Section::per_op(s, s, "op"));
        }
        for (s, id) in [
            ("a", "a1"),
            ("b", "b1"),
            ("a", "a2"),
            ("c", "c1"),
            ("c", "c2"),
        ] {
            plan.variant(op(s, id));
        }
        plan.variant(op("d", "d1"));
        plan.claim(claim("a1", "a2"));
        plan.claim(claim("c2", "a1"));
        let layout = Layout::of(&plan);
        let mut got: Vec<Vec<&str>> = blocks(&plan, &layout)
            .into_iter()
            .map(|b| {
                let mut ids: Vec<&str> = b.iter().map(|&v| plan.variants[v].id.as_str()).collect();
                ids.sort_unstable();
                ids
            })
            .collect();
        got.sort();
        assert_eq!(got, [vec!["a1", "a2", "c1", "c2"], vec!["b1"], vec!["d1"]]);
    }

    #[test]
    fn the_variants_a_claim_compares_get_one_size_of_work() {
        let variants = vec![
            // Three variants joined by two claims: their median size; the fourth, which no
            // claim compares, keeps its own.
            op("a", "a1"),
            op("a", "a2"),
            op("a", "a3"),
            op("a", "a4"),
            // Two within 16 × of each other: the smaller size, so that neither runs long.
            op("b", "b1"),
            op("b", "b2"),
            // Two further apart keep their own sizes.
            op("c", "c1"),
            op("c", "c2"),
            // A stalled calibration cannot make the others run more than 4 × its size.
            op("d", "d1"),
            op("d", "d2"),
            op("d", "d3"),
            // Fixed sizes, self-sized variants, other kinds and other sections are left alone.
            op("e", "e1").work(7),
            op("e", "e2"),
            Variant::fixed("e", "e3", "e3", Sample::new),
            Variant::calibrated("e", "e4", "e4", |_| Sample::new()),
            op("f", "f1"),
            // The smallest maximum of a group caps its size.
            op("g", "g1").max_work(1000),
            op("g", "g2"),
        ];
        let claims = vec![
            claim("a1", "a2"),
            claim("a3", "a1"),
            claim("b1", "b2"),
            claim("c1", "c2"),
            claim("d1", "d2"),
            claim("d1", "d3"),
            claim("e1", "e2"),
            claim("e2", "e3"),
            claim("e2", "e4"),
            claim("e2", "f1"),
            claim("g1", "g2"),
            claim("nobody", "g2"),
        ];
        let mut work = vec![
            52_421, 17_751, 90_000, 5, //
            1_000, 10_000, //
            1_000, 100_000, //
            10_000, 60_000, 80_000, //
            7, 3, 1, 9, 4, //
            1_000, 6_000,
        ];
        equal_work(&variants, &claims, &mut work);
        assert_eq!(
            work,
            vec![
                52_421, 52_421, 52_421, 5, //
                1_000, 1_000, //
                1_000, 100_000, //
                40_000, 40_000, 40_000, //
                7, 3, 1, 9, 4, //
                1_000, 1_000,
            ]
        );
    }
}
