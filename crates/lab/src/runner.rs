//! The one runner every experiment uses: budgets, calibration and warm-up, interleaved
//! trials, CSM drivers, progress, and results written as they come.
//!
//! A *trial* runs every variant once, in a fresh random order, so that slow drifts of the
//! machine (frequency, other tenants, cache state) hit all variants alike. Claims compare two
//! variants *within* a trial, and each claim's stream of yes/no answers feeds a CSM
//! [`Driver`]. Trials continue until every claim is decided (and the profile's minimum number
//! of trials has run), or the experiment's time budget would be overrun by one more trial.
//! A claim the budget cannot decide is reported undecided.

use std::time::{Duration, Instant};

use spindle_stats::rng::SplitMix64;
use spindle_stats::{Decision, Driver, DriverConfig, StopRule};

use crate::kit::calibrate;
use crate::machine::Machine;
use crate::progress::{Progress, Status};
use crate::results::{
    ClaimResult, ExperimentResult, MetricInfo, MetricResult, Operand, Param, Pooled, Profile,
    SectionResult, Series, Summary, VariantResult, Verdict,
};
use crate::spec::{Body, Claim, Info, Plan, Relation, Sample};

/// How many trials a profile aims for.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Always run at least this many (summaries need data even when claims are easy).
    pub min_trials: u64,
    /// Experiments without claims stop here; per-run work is sized so that this many fit.
    pub target_trials: u64,
    /// Never run more.
    pub max_trials: u64,
}

impl Limits {
    pub fn of(profile: Profile) -> Limits {
        match profile {
            Profile::Smoke => Limits {
                min_trials: 2,
                target_trials: 3,
                max_trials: 5,
            },
            Profile::Quick => Limits {
                min_trials: 10,
                target_trials: 30,
                max_trials: 500,
            },
            Profile::Full => Limits {
                min_trials: 30,
                target_trials: 100,
                max_trials: 5000,
            },
        }
    }
}

/// Seconds an experiment may take in a profile.
pub fn budget(profile: Profile, info: &Info) -> Duration {
    match profile {
        Profile::Smoke => Duration::from_secs(2),
        Profile::Quick => Duration::from_secs(u64::from(info.quick_seconds)),
        Profile::Full => Duration::from_secs(6 * u64::from(info.quick_seconds)),
    }
}

/// Where an experiment's results and progress go (the lab's run loop implements it).
pub(crate) trait Session {
    fn progress(&self) -> &dyn Progress;
    /// A snapshot of the experiment so far (partial until the last call).
    fn snapshot(&mut self, result: &ExperimentResult);
}

/// What an experiment gets from the lab.
pub struct Ctx<'r> {
    pub machine: &'r Machine,
    pub profile: Profile,
    /// False-positive rate of each claim.
    pub eps: f64,
    pub info: Info,
    budget: Duration,
    started: Instant,
    rng: SplitMix64,
    session: &'r mut dyn Session,
    pub(crate) result: Option<ExperimentResult>,
}

/// One claim's driver and bookkeeping.
struct ClaimState {
    driver: Driver,
    /// (variant index, metric index) of each operand.
    num: (usize, usize),
    den: (usize, usize),
    /// The operands as the report names them.
    names: [Operand; 2],
    /// Trials whose operands hit a cap before the driver decided.
    capped: u64,
    announced: bool,
}

impl ClaimState {
    fn decided(&self) -> bool {
        self.capped > 0 || matches!(self.driver.finished(), Some(d) if d != Decision::Undecided)
    }
}

/// Every value measured so far: `values[variant][metric][trial]` (NaN where not reported).
struct Data {
    values: Vec<Vec<Vec<f64>>>,
    capped: Vec<Vec<bool>>,
    pooled: Vec<Vec<Vec<f64>>>,
    series: Vec<Option<Series>>,
    trials: u64,
}

impl<'r> Ctx<'r> {
    pub(crate) fn new(
        machine: &'r Machine,
        profile: Profile,
        eps: f64,
        info: Info,
        seed: u64,
        session: &'r mut dyn Session,
    ) -> Self {
        // Whatever ran before (a probe, an experiment) must not leave this thread pinned:
        // every thread an experiment spawns inherits its affinity, and "unpinned" variants
        // would silently share one CPU.
        crate::sys::unpin_current_thread(&machine.cpus_allowed);
        Ctx {
            machine,
            profile,
            eps,
            info,
            budget: budget(profile, &info),
            started: Instant::now(),
            rng: SplitMix64::new(seed),
            session,
            result: None,
        }
    }

    /// Time this experiment may take, setup included.
    pub fn budget(&self) -> Duration {
        self.budget
    }

    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    pub fn limits(&self) -> Limits {
        Limits::of(self.profile)
    }

    /// How long one run of one variant should last so that the profile's target number of
    /// trials of `variants` variants fits in three quarters of the budget.
    pub fn run_target(&self, variants: usize) -> Duration {
        let l = self.limits();
        let share =
            self.budget.as_secs_f64() * 0.75 / (l.target_trials as f64 * variants.max(1) as f64);
        let (lo, hi) = match self.profile {
            Profile::Smoke => (50e-6, 2e-3),
            _ => (1e-3, 0.25),
        };
        Duration::from_secs_f64(share.clamp(lo, hi))
    }

    /// The CPUs this process may use.
    pub fn cpus(&self) -> &[usize] {
        &self.machine.cpus_allowed
    }

    /// Number of CPUs this process may use: "cores" in thread counts such as 4 × cores.
    pub fn cores(&self) -> usize {
        self.machine.cpus_allowed.len().max(1)
    }

    /// The two CPUs two-thread experiments pin to (those of the fingerprint's cache-line round
    /// trip), or None with a single CPU.
    pub fn cpu_pair(&self) -> Option<[usize; 2]> {
        self.machine.round_trip_cpus.or_else(|| {
            let c = &self.machine.cpus_allowed;
            (c.len() >= 2).then(|| [c[0], c[1]])
        })
    }

    /// Tells the user what a long setup step is doing.
    pub fn status(&self, phase: &str) {
        self.session.progress().status(
            self.info.name,
            &Status {
                phase,
                trials: 0,
                elapsed: self.elapsed(),
                budget: self.budget,
                claims_decided: 0,
                claims: 0,
            },
        );
    }

    fn stop_requested(&self) -> bool {
        self.session.progress().stop_requested()
    }

    /// Runs the plan's trials and stores the experiment's result.
    pub fn measure(&mut self, mut plan: Plan<'_>) -> Result<(), String> {
        plan.validate()?;
        let limits = self.limits();
        let nv = plan.variants.len();
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
        let metric_index = |variant: usize, metric: Option<&str>| -> usize {
            let s = &plan.sections[section_of[variant]];
            metric.map_or(0, |m| {
                s.metrics.iter().position(|x| x.id == m).expect("validated")
            })
        };
        let variant_index = |id: &str| {
            plan.variants
                .iter()
                .position(|v| v.id == id)
                .expect("validated")
        };
        let mut claims: Vec<ClaimState> = plan
            .claims
            .iter()
            .map(|c| {
                let (n, d) = (
                    variant_index(&c.numerator.0),
                    variant_index(&c.denominator.0),
                );
                let (nm, dm) = (
                    metric_index(n, c.numerator.1),
                    metric_index(d, c.denominator.1),
                );
                let name = |v: usize, m: usize| Operand {
                    variant: plan.variants[v].id.clone(),
                    metric: plan.sections[section_of[v]].metrics[m].id.into(),
                };
                Ok(ClaimState {
                    names: [name(n, nm), name(d, dm)],
                    driver: Driver::new(
                        // The three-way decision (holds / violated / borderline), not the
                        // first rejection: a claim reports which side of the band it is on.
                        DriverConfig::band(c.band.0, c.band.1, self.eps)
                            .rule(StopRule::FullDecision),
                    )
                    .map_err(|e| format!("claim {}: {e}", c.id))?,
                    num: (n, nm),
                    den: (d, dm),
                    capped: 0,
                    announced: false,
                })
            })
            .collect::<Result<_, String>>()?;
        let mut data = Data {
            values: (0..nv)
                .map(|i| vec![Vec::new(); plan.sections[section_of[i]].metrics.len()])
                .collect(),
            capped: vec![Vec::new(); nv],
            pooled: (0..nv)
                .map(|i| vec![Vec::new(); plan.sections[section_of[i]].metrics.len()])
                .collect(),
            series: vec![None; nv],
            trials: 0,
        };

        // Calibration and warm-up: size each calibrated variant's work to the run target, then
        // one unrecorded run of every variant (page faults, lazy initialisation, caches).
        let target = self.run_target(nv) / plan.run_divisor.max(1);
        let mut work = vec![1u64; nv];
        for (i, v) in plan.variants.iter_mut().enumerate() {
            if self.stop_requested() {
                break;
            }
            self.status(&format!("calibrating and warming up ({}/{nv})", i + 1));
            match (&mut v.body, v.fixed_work) {
                (Body::PerOp(f), Some(n)) => {
                    work[i] = n;
                    f(n);
                }
                (Body::Calibrated(f), Some(n)) => {
                    work[i] = n;
                    f(n);
                }
                (Body::PerOp(f), None) => {
                    work[i] = calibrate(target, 1, v.max_work, |n| f(n).as_duration());
                    f(work[i]);
                }
                (Body::Calibrated(f), None) => {
                    work[i] = calibrate(target, 1, v.max_work, |n| {
                        let t = Instant::now();
                        let s = f(n);
                        s.elapsed.unwrap_or_else(|| t.elapsed())
                    });
                    f(work[i]);
                }
                (Body::Fixed(f), _) => {
                    f();
                }
            }
        }

        let mut order: Vec<usize> = (0..nv).collect();
        let mut trial_times: Vec<Duration> = Vec::new();
        let mut last_write = Instant::now();
        let stop_reason = loop {
            let n = data.trials;
            let decided = claims.iter().filter(|c| c.decided()).count();
            if n >= limits.min_trials && !claims.is_empty() && decided == claims.len() {
                break format!("every claim decided after {n} trials");
            }
            if n >= limits.target_trials && claims.is_empty() {
                break format!("{n} trials, the profile's target");
            }
            if n >= limits.max_trials {
                break format!("trial cap ({n}) reached");
            }
            let next = trial_times
                .iter()
                .rev()
                .take(3)
                .max()
                .copied()
                .unwrap_or_default();
            if n >= 1 && self.elapsed() + next > self.budget {
                break format!(
                    "time budget ({:.0} s) reached after {n} trials",
                    self.budget.as_secs_f64()
                );
            }
            if self.stop_requested() {
                break format!("interrupted after {n} trials");
            }
            self.rng.shuffle(&mut order);
            let t0 = Instant::now();
            let mut samples: Vec<Option<Sample>> = (0..nv).map(|_| None).collect();
            for &i in &order {
                if self.stop_requested() {
                    break;
                }
                samples[i] = Some(match &mut plan.variants[i].body {
                    Body::PerOp(f) => {
                        let span = f(work[i]);
                        Sample::new()
                            .with("time", span.ns / work[i] as f64)
                            .with("ticks", span.ticks / work[i] as f64)
                    }
                    Body::Calibrated(f) => f(work[i]),
                    Body::Fixed(f) => f(),
                });
            }
            if samples.iter().any(|s| s.is_none()) {
                // Interrupted in the middle of a trial: an incomplete trial is not recorded.
                break format!("interrupted after {n} trials");
            }
            trial_times.push(t0.elapsed());
            let samples: Vec<Sample> = samples.into_iter().flatten().collect();
            self.record(&plan, &section_of, &mut data, samples);
            self.feed_claims(&plan.claims, &mut claims, &data);
            let decided = claims.iter().filter(|c| c.decided()).count();
            self.session.progress().status(
                self.info.name,
                &Status {
                    phase: "trials",
                    trials: data.trials,
                    elapsed: self.elapsed(),
                    budget: self.budget,
                    claims_decided: decided,
                    claims: claims.len(),
                },
            );
            if last_write.elapsed() >= Duration::from_secs(2) {
                let partial = self.assemble(
                    &plan,
                    &section_of,
                    &data,
                    &claims,
                    work.clone(),
                    "running",
                    false,
                );
                self.session.snapshot(&partial);
                last_write = Instant::now();
            }
        };

        let complete = !stop_reason.starts_with("interrupted");
        let result = self.assemble(
            &plan,
            &section_of,
            &data,
            &claims,
            work,
            &stop_reason,
            complete,
        );
        for (c, state) in result.claims.iter().zip(&claims) {
            if !state.announced {
                self.session.progress().claim_decided(self.info.name, c);
            }
        }
        self.session.snapshot(&result);
        self.result = Some(result);
        Ok(())
    }

    fn record(&self, plan: &Plan<'_>, section_of: &[usize], data: &mut Data, samples: Vec<Sample>) {
        for (i, s) in samples.into_iter().enumerate() {
            let metrics = &plan.sections[section_of[i]].metrics;
            for (m, metric) in metrics.iter().enumerate() {
                data.values[i][m].push(s.value(metric.id).unwrap_or(f64::NAN));
                if let Some((_, pool)) = s.pooled.iter().find(|(id, _)| *id == metric.id) {
                    data.pooled[i][m].extend_from_slice(pool);
                }
            }
            data.capped[i].push(s.capped);
            if let Some((metric, step_s, values)) = s.series {
                data.series[i] = Some(Series {
                    metric: metric.into(),
                    step_s,
                    values,
                });
            }
        }
        data.trials += 1;
    }

    fn feed_claims(&self, specs: &[Claim], claims: &mut [ClaimState], data: &Data) {
        let t = data.trials as usize - 1;
        for (spec, c) in specs.iter().zip(claims.iter_mut()) {
            if c.decided() {
                continue;
            }
            let ratio = data.values[c.num.0][c.num.1][t] / data.values[c.den.0][c.den.1][t];
            if ratio.is_nan() {
                continue;
            }
            let (num_capped, den_capped) = (data.capped[c.num.0][t], data.capped[c.den.0][t]);
            if num_capped || den_capped {
                // A capped run's value is a lower bound on what the full run would have
                // measured. That still settles the relation when the bound points the right way
                // (the numerator's lower bound already reaches an "at least", the denominator's
                // already satisfies an "at most"); otherwise this trial's answer is unknown, and
                // leaving it out would bias the test, so the claim is not judged.
                let settled = match spec.relation {
                    Relation::AtLeast(b) => num_capped && !den_capped && ratio >= b,
                    Relation::AtMost(b) => den_capped && !num_capped && ratio <= b,
                };
                if settled {
                    c.driver.observe(true);
                } else {
                    c.capped += 1;
                }
            } else {
                c.driver.observe(spec.relation.holds(ratio));
            }
            if c.decided() && !c.announced {
                c.announced = true;
                let r = judge(spec, c, data, self.eps, self.budget, self.limits());
                self.session.progress().claim_decided(self.info.name, &r);
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn assemble(
        &self,
        plan: &Plan<'_>,
        section_of: &[usize],
        data: &Data,
        claims: &[ClaimState],
        work: Vec<u64>,
        stop_reason: &str,
        complete: bool,
    ) -> ExperimentResult {
        let eps = self.eps;
        let mut sections: Vec<SectionResult> = plan
            .sections
            .iter()
            .map(|s| SectionResult {
                id: s.id.into(),
                title: s.title.clone(),
                baseline: s.baseline.clone(),
                metrics: s
                    .metrics
                    .iter()
                    .map(|m| MetricInfo {
                        id: m.id.into(),
                        label: m.label.clone(),
                        unit: m.unit,
                        better: m.better,
                        show_max: m.show_max,
                        hidden: m.hidden,
                    })
                    .collect(),
                variants: Vec::new(),
            })
            .collect();
        for (i, v) in plan.variants.iter().enumerate() {
            let s = &plan.sections[section_of[i]];
            let base = s
                .baseline
                .as_ref()
                .and_then(|b| plan.variants.iter().position(|x| &x.id == b));
            let metrics = s
                .metrics
                .iter()
                .enumerate()
                .map(|(m, metric)| {
                    let values = data.values[i][m].clone();
                    let ratio_to_baseline = base.map(|b| {
                        let ratios: Vec<f64> = values
                            .iter()
                            .zip(&data.values[b][m])
                            .map(|(x, y)| x / y)
                            .collect();
                        Summary::of(&ratios, eps)
                    });
                    MetricResult {
                        id: metric.id.into(),
                        summary: Summary::of(&values, eps),
                        values,
                        ratio_to_baseline,
                        pooled: (!data.pooled[i][m].is_empty())
                            .then(|| Pooled::of(&data.pooled[i][m])),
                        vs_baseline_run: None,
                    }
                })
                .collect();
            sections[section_of[i]].variants.push(VariantResult {
                id: v.id.clone(),
                label: v.label.clone(),
                threads: v.threads,
                capped: data.capped[i].clone(),
                metrics,
                reference_ratio: v.reference_ratio,
                series: data.series[i].clone(),
            });
        }
        let mut parameters: Vec<Param> = plan
            .params
            .iter()
            .map(|(name, value)| Param {
                name: name.clone(),
                value: value.clone(),
            })
            .collect();
        let calibrated: Vec<String> = plan
            .variants
            .iter()
            .zip(&work)
            .filter(|(v, _)| !matches!(v.body, Body::Fixed(_)))
            .map(|(v, n)| format!("{} {n}", v.id))
            .collect();
        if !calibrated.is_empty() {
            parameters.push(Param {
                name: "work per run (calibrated)".into(),
                value: calibrated.join(", "),
            });
        }
        let l = self.limits();
        parameters.push(Param {
            name: "trials".into(),
            value: format!(
                "at least {}, at most {}, within {:.0} s (claimless experiments stop at {})",
                l.min_trials,
                l.max_trials,
                self.budget.as_secs_f64(),
                l.target_trials
            ),
        });
        if !plan.claims.is_empty() {
            parameters.push(Param {
                name: "claim band".into(),
                value: format!("P(relation holds in a trial) > 0.6: holds, < 0.4: violated; ε = {eps} per claim"),
            });
        }
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
            parameters,
            budget_s: self.budget.as_secs_f64(),
            trials: data.trials,
            stop_reason: stop_reason.into(),
            wall_s: self.elapsed().as_secs_f64(),
            sections,
            claims: plan
                .claims
                .iter()
                .zip(claims)
                .map(|(spec, c)| judge(spec, c, data, eps, self.budget, self.limits()))
                .collect(),
            tables: Vec::new(),
            notes: plan.notes.clone(),
            complete,
        };
        for f in &plan.finish {
            f(&mut result);
        }
        result
    }
}

/// The verdict and its explanation.
fn judge(
    spec: &Claim,
    c: &ClaimState,
    data: &Data,
    eps: f64,
    budget: Duration,
    limits: Limits,
) -> ClaimResult {
    let out = c.driver.outcome();
    let ratios: Vec<f64> = data.values[c.num.0][c.num.1]
        .iter()
        .zip(&data.values[c.den.0][c.den.1])
        .map(|(a, b)| a / b)
        .collect();
    let ratio = Summary::of(&ratios, eps);
    let rel = format!("ratio {} {}", spec.relation.symbol(), spec.relation.bound());
    let (lo, hi) = spec.band;
    let (verdict, explanation) = if c.capped > 0 {
        (
            Verdict::Undecided,
            format!(
                "in {} trial(s) a run hit its time cap, which leaves the ratio unknown (a capped value is only a lower bound), so the claim is not judged",
                c.capped
            ),
        )
    } else {
        match c.driver.finished().unwrap_or(Decision::Undecided) {
            Decision::Above => (
                Verdict::Holds,
                format!(
                    "{rel} in {} of {} trials: P(yes) > {hi} (median ratio {:.3})",
                    out.successes, out.n, ratio.median
                ),
            ),
            Decision::Below => (
                Verdict::Violated,
                format!(
                    "{rel} in only {} of {} trials: P(yes) < {lo} (median ratio {:.3})",
                    out.successes, out.n, ratio.median
                ),
            ),
            Decision::Within => (
                Verdict::Undecided,
                format!(
                    "borderline: {rel} in between {:.0}% and {:.0}% of trials (median ratio {:.3}, at the bound)",
                    lo * 100.0,
                    hi * 100.0,
                    ratio.median
                ),
            ),
            Decision::Undecided => (
                Verdict::Undecided,
                format!(
                    "not decided in {} trials (the profile allows at most {} trials or {:.0} s): {rel} in {} of {} (median ratio {:.3})",
                    data.trials,
                    limits.max_trials,
                    budget.as_secs_f64(),
                    out.successes,
                    out.n,
                    ratio.median
                ),
            ),
        }
    };
    ClaimResult {
        id: spec.id.into(),
        kind: spec.kind,
        statement: spec.statement.clone(),
        reference: spec
            .reference
            .as_ref()
            .map(|(doc, figure)| format!("{}: {figure}", doc.short())),
        numerator: c.names[0].clone(),
        denominator: c.names[1].clone(),
        relation: spec.relation.name().into(),
        bound: spec.relation.bound(),
        verdict,
        explanation,
        trials: out.n,
        successes: out.successes,
        capped_trials: c.capped,
        success_interval: [out.confidence.0, out.confidence.1],
        band: [lo, hi],
        eps,
        ratio,
        ratios,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Metric, Section, Variant};
    use std::cell::Cell;

    struct Collect {
        snapshots: usize,
    }
    impl Progress for Collect {}
    impl Session for Collect {
        fn progress(&self) -> &dyn Progress {
            self
        }
        fn snapshot(&mut self, _: &ExperimentResult) {
            self.snapshots += 1;
        }
    }

    fn info() -> Info {
        Info {
            name: "synthetic",
            title: "t",
            summary: "s",
            question: "q",
            references: &[],
            quick_seconds: 60,
        }
    }

    /// Runs a plan of two fixed variants whose values come from `a` and `b` (trial index in).
    fn run(
        machine: &Machine,
        a: impl Fn(u64) -> Sample,
        b: impl Fn(u64) -> Sample,
        claims: Vec<Claim>,
    ) -> ExperimentResult {
        let mut session = Collect { snapshots: 0 };
        let mut ctx = Ctx::new(machine, Profile::Quick, 1e-3, info(), 1, &mut session);
        let (ta, tb) = (Cell::new(0u64), Cell::new(0u64));
        let mut plan = Plan::new();
        plan.section(
            Section::new("s", "s")
                .baseline("b")
                .metric(Metric::time("v", "value")),
        );
        plan.variant(Variant::fixed("s", "a", "a", || {
            ta.set(ta.get() + 1);
            a(ta.get())
        }));
        plan.variant(Variant::fixed("s", "b", "b", || {
            tb.set(tb.get() + 1);
            b(tb.get())
        }));
        for c in claims {
            plan.claim(c);
        }
        ctx.measure(plan).unwrap();
        let result = ctx.result.take().unwrap();
        assert!(session.snapshots >= 1);
        result
    }

    fn v(x: f64) -> Sample {
        Sample::new().with("v", x)
    }

    /// A ratio of exactly 3 in every trial: "≥ 2" holds, "≤ 2" is violated, and trials stop
    /// once both are decided.
    #[test]
    fn claims_are_decided_and_trials_stop() {
        let m = Machine::detect();
        let r = run(
            &m,
            |_| v(3.0),
            |_| v(1.0),
            vec![
                Claim::guarantee("ge", "a ≥ 2 b")
                    .ratio("a", "b")
                    .at_least(2.0),
                Claim::guarantee("le", "a ≤ 2 b")
                    .ratio("a", "b")
                    .at_most(2.0),
            ],
        );
        assert_eq!(r.claims[0].verdict, Verdict::Holds);
        assert_eq!(r.claims[1].verdict, Verdict::Violated);
        assert!(
            r.trials < 100 && r.stop_reason.contains("every claim decided"),
            "{}",
            r.stop_reason
        );
        assert_eq!(r.claims[0].ratio.median, 3.0);
        let a = &r.sections[0].variants[0];
        assert_eq!(
            a.metric("v").unwrap().ratio_to_baseline.unwrap().median,
            3.0
        );
        assert_eq!(a.metric("v").unwrap().values.len() as u64, r.trials);

        // A ratio on the bound half the time is borderline: never a verdict.
        let r = run(
            &m,
            |t| v(if t % 2 == 0 { 3.0 } else { 1.0 }),
            |_| v(1.0),
            vec![Claim::guarantee("half", "a ≥ 2 b")
                .ratio("a", "b")
                .at_least(2.0)],
        );
        assert_eq!(r.claims[0].verdict, Verdict::Undecided);

        // A capped numerator already past an "at least" bound settles the trial; a capped
        // denominator leaves it unknown, and the claim is not judged.
        let r = run(
            &m,
            |_| v(3.0).capped(true),
            |_| v(1.0),
            vec![Claim::guarantee("ge", "a ≥ 2 b")
                .ratio("a", "b")
                .at_least(2.0)],
        );
        assert_eq!(r.claims[0].verdict, Verdict::Holds);
        assert_eq!(r.sections[0].variants[0].capped_count() as u64, r.trials);
        let r = run(
            &m,
            |_| v(3.0),
            |t| v(1.0).capped(t == 3),
            vec![Claim::guarantee("ge", "a ≥ 2 b")
                .ratio("a", "b")
                .at_least(2.0)],
        );
        assert_eq!(r.claims[0].verdict, Verdict::Undecided);
        assert!(
            r.claims[0].explanation.contains("time cap"),
            "{}",
            r.claims[0].explanation
        );
    }

    #[test]
    fn a_plan_naming_unknown_things_is_refused() {
        let mut plan = Plan::new();
        plan.section(Section::new("s", "s").metric(Metric::time("v", "value")));
        plan.variant(Variant::fixed("s", "a", "a", Sample::new));
        plan.claim(Claim::guarantee("c", "c").ratio("a", "nope").at_most(1.0));
        assert!(plan.validate().unwrap_err().contains("nope"));
        let mut plan = Plan::new();
        plan.variant(Variant::fixed("missing", "a", "a", Sample::new));
        assert!(plan.validate().unwrap_err().contains("missing"));
        let mut plan = Plan::new();
        plan.section(Section::new("s", "s").metric(Metric::count("n", "n")));
        plan.variant(Variant::per_op("s", "a", "a", |_| {
            crate::kit::Span::default()
        }));
        assert!(plan.validate().unwrap_err().contains("per_op"));
    }

    #[test]
    fn budgets_scale_with_the_profile() {
        let i = info();
        assert_eq!(budget(Profile::Quick, &i), Duration::from_secs(60));
        assert_eq!(budget(Profile::Full, &i), Duration::from_secs(360));
        assert!(budget(Profile::Smoke, &i) < budget(Profile::Quick, &i));
    }
}
