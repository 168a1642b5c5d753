//! What a lab run produces, as plain data: the schema of `results.json`.
//!
//! Everything here serialises to JSON and reads back (`--baseline` and `--markdown` read the
//! files of earlier runs), and nothing here measures or draws: the runner fills these types,
//! the `report` module renders them.

use serde::{Deserialize, Serialize};
use spindle_stats::quantile_interval;

use crate::machine::Machine;

/// Version of this schema; bumped when a field changes meaning. Files of other versions are
/// refused with a message rather than misread, except version 2, whose fields are a subset
/// (claims decided by a sign test in a band, no planner record), read with defaults.
pub const SCHEMA: u32 = 3;

/// Oldest schema [`LabReport::from_json`] reads.
pub const OLDEST_READABLE_SCHEMA: u32 = 2;

/// How a verdict is reached, for every report: two sentences a user can check against the
/// numbers beside them.
pub const VERDICT_RULE: &str = "Each trial runs both sides of a claim back to back and takes the ratio of \
their costs; a claim holds when the confidence sequence for the median of those ratios lies more than 2% \
inside its bound, is violated when it lies more than 2% beyond it, and is otherwise undecided. A verdict \
is wrong with probability at most ε per claim however early the lab stops; a later batch of trials must \
not contradict it, and trials measured while other processes loaded the CPUs are discarded.";

/// JSON has no NaN: non-finite numbers are written as `null` and read back as NaN (a
/// variant that did not report a metric in a trial, the median of no values).
mod finite {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
        if v.is_finite() {
            s.serialize_f64(*v)
        } else {
            s.serialize_none()
        }
    }

    pub fn deserialize<'d, D: Deserializer<'d>>(d: D) -> Result<f64, D::Error> {
        Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
    }
}

/// [`finite`] for vectors.
mod finite_vec {
    use serde::ser::SerializeSeq;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[f64], s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(v.len()))?;
        for x in v {
            seq.serialize_element(&x.is_finite().then_some(*x))?;
        }
        seq.end()
    }

    pub fn deserialize<'d, D: Deserializer<'d>>(d: D) -> Result<Vec<f64>, D::Error> {
        Ok(Vec::<Option<f64>>::deserialize(d)?
            .into_iter()
            .map(|x| x.unwrap_or(f64::NAN))
            .collect())
    }
}

/// How much work the lab does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Profile {
    /// Tiny budgets: checks that everything runs (tests); figures are meaningless.
    Smoke,
    /// The default: the whole lab in about three minutes on any machine.
    Quick,
    /// Six times the quick budgets, for figures worth publishing.
    Full,
}

impl Profile {
    pub fn as_str(self) -> &'static str {
        match self {
            Profile::Smoke => "smoke",
            Profile::Quick => "quick",
            Profile::Full => "full",
        }
    }
}

/// Where a run stands: a report is written many times while the lab runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunState {
    /// Experiments are still running; the figures so far are valid but incomplete.
    Running,
    /// Stopped by the user (Ctrl-C) before the end.
    Interrupted,
    /// Every selected experiment ran to its end (or failed with a reason).
    Complete,
}

/// The unit of a metric. Values are stored in the base unit (nanoseconds, events per second,
/// counts); reports pick a display scale per column.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    Nanoseconds,
    /// TSC ticks.
    Ticks,
    /// Events per second.
    PerSecond,
    Count,
    Ratio,
}

/// Which direction is good for a metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Better {
    Lower,
    Higher,
}

/// A column of a section.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MetricInfo {
    pub id: String,
    /// What it measures, e.g. "per increment", "longest wait".
    pub label: String,
    pub unit: Unit,
    pub better: Better,
    /// The largest per-trial value is worth showing (longest waits, peak garbage).
    pub show_max: bool,
    /// Not a column of the section's table (used by claims and derived tables).
    #[serde(default)]
    pub hidden: bool,
}

/// Order statistics of a sample, with a confidence interval for the median.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub struct Summary {
    pub n: u64,
    #[serde(with = "finite")]
    pub min: f64,
    #[serde(with = "finite")]
    pub p10: f64,
    #[serde(with = "finite")]
    pub median: f64,
    /// The median's confidence interval (None: too few samples), at the lab's ε.
    pub median_lo: Option<f64>,
    pub median_hi: Option<f64>,
    #[serde(with = "finite")]
    pub p90: f64,
    #[serde(with = "finite")]
    pub max: f64,
    #[serde(with = "finite")]
    pub mean: f64,
}

impl Summary {
    /// Summary of `values` (non-finite values are ignored); the median's interval excludes the
    /// true median with probability at most `eps`, however many values there are.
    pub fn of(values: &[f64], eps: f64) -> Summary {
        let v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        let at = |q: f64| quantile_interval(&v, q, eps.ln());
        let median = at(0.5);
        Summary {
            n: v.len() as u64,
            min: v.iter().copied().fold(f64::INFINITY, f64::min),
            p10: at(0.1).map_or(f64::NAN, |q| q.estimate),
            median: median.map_or(f64::NAN, |q| q.estimate),
            median_lo: median.and_then(|q| q.lower),
            median_hi: median.and_then(|q| q.upper),
            p90: at(0.9).map_or(f64::NAN, |q| q.estimate),
            max: v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            mean: v.iter().sum::<f64>() / v.len().max(1) as f64,
        }
    }
}

/// Many observations of one metric pooled over every trial (e.g. the latency of every single
/// barrier), summarised by their quantiles.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub struct Pooled {
    pub n: u64,
    #[serde(with = "finite")]
    pub median: f64,
    #[serde(with = "finite")]
    pub p90: f64,
    #[serde(with = "finite")]
    pub p99: f64,
    #[serde(with = "finite")]
    pub max: f64,
}

impl Pooled {
    pub fn of(values: &[f64]) -> Pooled {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        v.sort_by(f64::total_cmp);
        let q = |p: f64| {
            if v.is_empty() {
                f64::NAN
            } else {
                v[((v.len() - 1) as f64 * p).round() as usize]
            }
        };
        Pooled {
            n: v.len() as u64,
            median: q(0.5),
            p90: q(0.9),
            p99: q(0.99),
            max: v.last().copied().unwrap_or(f64::NAN),
        }
    }
}

/// One metric of one variant over all trials.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MetricResult {
    pub id: String,
    /// Every trial's value, in trial order (NaN where the variant did not report it).
    #[serde(with = "finite_vec")]
    pub values: Vec<f64>,
    pub summary: Summary,
    /// Per-trial ratio to the section's baseline variant, same metric, same trial.
    pub ratio_to_baseline: Option<Summary>,
    /// Pooled observations, when the variant reports them (see [`Pooled`]).
    pub pooled: Option<Pooled>,
    /// This median over the median of the same variant and metric in the `--baseline` report.
    /// Unpaired: the two medians come from different runs.
    pub vs_baseline_run: Option<f64>,
}

/// A time series the variant reported in its last trial (e.g. throughput per interval).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Series {
    pub metric: String,
    /// Seconds between points.
    pub step_s: f64,
    #[serde(with = "finite_vec")]
    pub values: Vec<f64>,
}

/// One contestant.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct VariantResult {
    pub id: String,
    pub label: String,
    pub threads: usize,
    /// Trials in which this variant hit a time cap (its values there are lower bounds).
    pub capped: Vec<bool>,
    pub metrics: Vec<MetricResult>,
    /// The reference document's ratio to the section's baseline, when it has one.
    pub reference_ratio: Option<f64>,
    pub series: Option<Series>,
}

impl VariantResult {
    pub fn metric(&self, id: &str) -> Option<&MetricResult> {
        self.metrics.iter().find(|m| m.id == id)
    }

    pub fn capped_count(&self) -> usize {
        self.capped.iter().filter(|&&c| c).count()
    }
}

/// A table of variants measured in one unit per column, against one baseline.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SectionResult {
    pub id: String,
    pub title: String,
    /// Variant every ratio in this section is relative to.
    pub baseline: Option<String>,
    pub metrics: Vec<MetricInfo>,
    pub variants: Vec<VariantResult>,
    /// Trials of this section kept (the runner runs a section only while it has work to do).
    #[serde(default)]
    pub trials: u64,
    /// Why the runner stopped running this section.
    #[serde(default)]
    pub stop_reason: String,
    /// Trials measured and then discarded because other processes loaded the CPUs.
    #[serde(default)]
    pub discarded_trials: u64,
    /// The load other processes put on the machine while this section ran.
    #[serde(default)]
    pub load: Option<LoadRecord>,
    /// The cache-line round trip between the two CPUs of the section's two-thread variants, over
    /// the windows of trials it ran in (sections with such variants only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub round_trip: Option<RoundTripRecord>,
}

/// The range of a quick cache-line round trip between the two CPUs that two-thread variants
/// pin to, over the windows of trials whose two ends agreed (see `runner/placement.rs`): a host
/// that moves its vCPUs during a run shows here.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct RoundTripRecord {
    pub windows: u64,
    pub min_ns: f64,
    pub max_ns: f64,
}

/// Two round trips within this factor of each other are one placement of the two CPUs: far
/// above a quiet machine's jitter of the median of three batches, far below the factor between
/// hyperthreads of one core and cores of different chiplets.
pub const SAME_PLACEMENT: f64 = 1.5;

/// "60 ns", or "60–75 ns" when the two ends differ by 5 % or more: a range of round trips as
/// the reports print it.
pub fn ns_range(lo: f64, hi: f64) -> String {
    if hi >= 1.05 * lo {
        format!("{lo:.0}–{hi:.0} ns")
    } else {
        format!("{lo:.0} ns")
    }
}

impl RoundTripRecord {
    /// Whether the host moved the two CPUs while the section ran: its slowest window's round
    /// trip at least [`SAME_PLACEMENT`] × its fastest's.
    pub fn moved(&self) -> bool {
        self.windows >= 2 && self.max_ns >= SAME_PLACEMENT * self.min_ns
    }
}

/// What the runner saw of other processes' load while a section ran, over windows of trials
/// (see `load.rs`).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct LoadRecord {
    pub windows: u64,
    /// Windows whose trials were discarded.
    pub loaded_windows: u64,
    /// The most CPU time (in CPUs) other processes took in one window.
    pub max_others_cpus: f64,
    /// The most steal time (in CPUs) in one window.
    pub max_steal_cpus: f64,
    /// The most runnable threads seen on the machine (the lab's own included).
    pub max_runnable: u32,
}

/// One stretch of time the planner gave an experiment.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Visit {
    /// "first pass" (every experiment's minimum share) or "open claims" (time left over,
    /// given to the experiments most likely to settle their open claims: confirm provisional
    /// verdicts, decide the others).
    pub phase: String,
    /// Seconds the planner gave.
    pub slice_s: f64,
    /// Seconds it took.
    pub used_s: f64,
    /// Trials run in this visit (each runs only the sections still at work).
    pub trials: u64,
    /// Claims decided in this visit.
    pub decided: u32,
    pub stop_reason: String,
}

/// A document a reproduction re-measures.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Reference {
    pub id: String,
    pub title: String,
    pub author: String,
    /// None when the document carries no date.
    pub year: Option<u32>,
    /// Where it appeared.
    pub venue: String,
    /// The machine its figures come from.
    pub machine: String,
}

/// Spindle's promise about its own code, or a source document's figure re-measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClaimKind {
    /// A violation is a defect in Spindle.
    Guarantee,
    /// A violation says this machine differs from the reference's.
    Reproduction,
}

/// The verdict on a claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Holds,
    Violated,
    Undecided,
}

impl Verdict {
    /// The word a report shows: guarantees hold or are violated; reproductions agree or
    /// differ.
    pub fn word(self, kind: ClaimKind) -> &'static str {
        match (kind, self) {
            (ClaimKind::Guarantee, Verdict::Holds) => "holds",
            (ClaimKind::Guarantee, Verdict::Violated) => "VIOLATED",
            (ClaimKind::Reproduction, Verdict::Holds) => "agrees",
            (ClaimKind::Reproduction, Verdict::Violated) => "differs",
            (_, Verdict::Undecided) => "undecided",
        }
    }
}

/// One side of a claim's ratio: a variant's metric.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Operand {
    pub variant: String,
    pub metric: String,
}

/// A claim and what the CSM driver made of it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ClaimResult {
    pub id: String,
    pub kind: ClaimKind,
    pub statement: String,
    /// For reproductions: the document (short form; the experiment's references give the full
    /// citation) and its figure, in words ("Thompson 2011: 15.7 × (4 700 ms vs 300 ms)").
    pub reference: Option<String>,
    pub numerator: Operand,
    pub denominator: Operand,
    /// "at_most" or "at_least".
    pub relation: String,
    pub bound: f64,
    pub verdict: Verdict,
    /// One sentence on why.
    pub explanation: String,
    /// Trials the test used: up to its decision, or all of them for an undecided claim.
    pub trials: u64,
    /// Of those, trials whose ratio satisfied the relation.
    pub successes: u64,
    /// Trials left out because an operand hit its time cap.
    pub capped_trials: u64,
    /// Relative distance from the bound inside which a median is "at the bound" (schema 3).
    #[serde(default)]
    pub margin: Option<f64>,
    /// The batches that confirmed (or contradicted) the test's verdict: each visit's trials
    /// and median ratio (schema 3; empty for a claim that never reached a verdict).
    #[serde(default)]
    pub confirmation: Vec<(u64, f64)>,
    /// Schema 2 only: the interval of P(relation holds in a trial) and its band.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success_interval: Option<[f64; 2]>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub band: Option<[f64; 2]>,
    pub eps: f64,
    /// The per-trial ratio over the trials the test used: median, and (schema 3) the
    /// confidence sequence's interval for it as `median_lo`/`median_hi`.
    pub ratio: Summary,
    /// Those trials' ratios.
    #[serde(with = "finite_vec")]
    pub ratios: Vec<f64>,
}

impl ClaimResult {
    pub fn symbol(&self) -> &'static str {
        if self.relation == "at_most" {
            "≤"
        } else {
            "≥"
        }
    }
}

/// A named parameter of an experiment, for the record.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Param {
    pub name: String,
    pub value: String,
}

/// A table an experiment derives from its results (e.g. the reference's own table beside ours).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Table {
    pub title: String,
    pub columns: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

/// Everything one experiment produced.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ExperimentResult {
    pub name: String,
    pub title: String,
    pub question: String,
    pub references: Vec<Reference>,
    pub parameters: Vec<Param>,
    /// Seconds the planner gave this experiment, over all its visits.
    pub budget_s: f64,
    pub trials: u64,
    pub stop_reason: String,
    pub wall_s: f64,
    pub sections: Vec<SectionResult>,
    pub claims: Vec<ClaimResult>,
    pub tables: Vec<Table>,
    pub notes: Vec<String>,
    /// False while trials are still running (or were interrupted).
    pub complete: bool,
    /// The stretches of time the planner gave this experiment.
    #[serde(default)]
    pub visits: Vec<Visit>,
}

impl ExperimentResult {
    pub fn section(&self, id: &str) -> Option<&SectionResult> {
        self.sections.iter().find(|s| s.id == id)
    }

    pub fn variant(&self, id: &str) -> Option<(&SectionResult, &VariantResult)> {
        self.sections
            .iter()
            .find_map(|s| s.variants.iter().find(|v| v.id == id).map(|v| (s, v)))
    }
}

/// An experiment that could not finish, kept in the report with the reason.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ExperimentFailure {
    pub name: String,
    pub error: String,
}

/// The `--baseline` report a run was compared with.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BaselineInfo {
    pub path: String,
    pub started_utc: String,
    pub machine: String,
    pub commit: String,
}

/// A whole lab run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LabReport {
    pub schema: u32,
    pub tool: String,
    pub version: String,
    /// The commit the binary was built from ("unknown" outside a git checkout).
    pub commit: String,
    /// Seconds since the Unix epoch when the run started.
    pub started_unix: u64,
    /// The same, readable.
    pub started_utc: String,
    /// Seconds of lab time so far (fingerprint included).
    pub lab_seconds: f64,
    pub profile: Profile,
    /// Seconds the planner had for the whole run (schema 3).
    #[serde(default)]
    pub budget_s: f64,
    pub eps: f64,
    pub state: RunState,
    pub machine: Machine,
    pub baseline: Option<BaselineInfo>,
    pub experiments: Vec<ExperimentResult>,
    pub failures: Vec<ExperimentFailure>,
}

impl LabReport {
    /// Every claim of the run with its experiment's name, guarantees first.
    pub fn claims_by_kind(&self, kind: ClaimKind) -> Vec<(&str, &ClaimResult)> {
        self.experiments
            .iter()
            .flat_map(|e| e.claims.iter().map(move |c| (e.name.as_str(), c)))
            .filter(|(_, c)| c.kind == kind)
            .collect()
    }

    /// Guarantees this run found violated.
    pub fn violated_guarantees(&self) -> usize {
        self.claims_by_kind(ClaimKind::Guarantee)
            .iter()
            .filter(|(_, c)| c.verdict == Verdict::Violated)
            .count()
    }

    /// Windows of trials over the run, those discarded under other processes' load, and the
    /// most CPUs other processes took in one window: (windows, loaded, worst).
    pub fn load(&self) -> (u64, u64, f64) {
        let mut out = (0, 0, 0.0f64);
        for r in self
            .experiments
            .iter()
            .flat_map(|e| &e.sections)
            .filter_map(|s| s.load)
        {
            out.0 += r.windows;
            out.1 += r.loaded_windows;
            out.2 = out.2.max(r.max_others_cpus + r.max_steal_cpus);
        }
        out
    }

    /// One sentence on other processes' load, when some window was discarded for it.
    pub fn load_sentence(&self) -> Option<String> {
        let (windows, loaded, worst) = self.load();
        (loaded > 0).then(|| {
            format!(
                "other processes loaded the CPUs (up to {worst:.2} CPUs) in {loaded} of {windows} windows of trials; those trials were discarded and measured again, and claims whose trials were all discarded stay undecided"
            )
        })
    }

    /// A sentence when the host moved the CPUs of two-thread variants during some section (see
    /// [`RoundTripRecord::moved`]); None otherwise.
    pub fn placement_sentence(&self) -> Option<String> {
        let moved: Vec<(&str, &str, RoundTripRecord)> = self
            .experiments
            .iter()
            .flat_map(|e| e.sections.iter().map(move |s| (e, s)))
            .filter_map(|(e, s)| {
                s.round_trip
                    .filter(RoundTripRecord::moved)
                    .map(|r| (e.name.as_str(), s.id.as_str(), r))
            })
            .collect();
        let lo = moved
            .iter()
            .map(|m| m.2.min_ns)
            .fold(f64::INFINITY, f64::min);
        let hi = moved.iter().map(|m| m.2.max_ns).fold(0.0, f64::max);
        (!moved.is_empty()).then(|| {
            const NAMED: usize = 6;
            let mut names: Vec<String> = moved
                .iter()
                .take(NAMED)
                .map(|(e, s, _)| format!("{e}/{s}"))
                .collect();
            if moved.len() > NAMED {
                names.push(format!("{} more", moved.len() - NAMED));
            }
            format!(
                "the round trip between the two CPUs that two-thread variants run on changed during {} of their sections ({}): a cache line took from {lo:.0} to {hi:.0} ns to go there and back, from one window of trials to another (on a virtual machine, the host moved its vCPUs). Two-thread figures of those sections mix placements; a claim with enough trials in two placements gives the median ratio of each in its explanation",
                moved.len(),
                names.join(", ")
            )
        })
    }

    /// Reads a `results.json`, refusing other schemas with a sentence that says so.
    pub fn from_json(text: &str) -> Result<LabReport, String> {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        match value.get("schema").and_then(|s| s.as_u64()) {
            Some(s) if (u64::from(OLDEST_READABLE_SCHEMA)..=u64::from(SCHEMA)).contains(&s) => {}
            Some(s) => {
                return Err(format!(
                    "written by a lab with results schema {s}; this lab reads schemas {OLDEST_READABLE_SCHEMA} to {SCHEMA}"
                ))
            }
            None => {
                return Err(format!(
                    "no 'schema' field: not a results.json of this lab (schema {SCHEMA}), or written by an older one"
                ))
            }
        }
        serde_json::from_value(value).map_err(|e| format!("malformed results: {e}"))
    }
}

/// `2026-11-21 09:28 UTC` from seconds since the Unix epoch (Hinnant's civil-from-days).
pub fn utc_string(unix: u64) -> String {
    let days = (unix / 86_400) as i64;
    let secs = unix % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02} UTC",
        secs / 3600,
        secs % 3600 / 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        assert_eq!(utc_string(0), "1970-01-01 00:00 UTC");
        assert_eq!(utc_string(951_782_400), "2000-02-29 00:00 UTC");
        assert_eq!(utc_string(1_795_253_336), "2026-11-21 09:28 UTC");
    }

    #[test]
    fn summary_of_known_values() {
        let v: Vec<f64> = (1..=101).map(|x| x as f64).collect();
        let s = Summary::of(&v, 1e-3);
        assert_eq!((s.n, s.min, s.median, s.max), (101, 1.0, 51.0, 101.0));
        assert_eq!(s.mean, 51.0);
        assert!(s.median_lo.unwrap() < 51.0 && s.median_hi.unwrap() > 51.0);
        // Non-finite values (a variant that did not report) are left out.
        let s = Summary::of(&[1.0, f64::NAN, 3.0], 1e-3);
        assert_eq!((s.n, s.median), (2, 1.0));
    }

    #[test]
    fn pooled_quantiles() {
        let v: Vec<f64> = (0..=100).map(|x| x as f64).collect();
        let p = Pooled::of(&v);
        assert_eq!(
            (p.n, p.median, p.p90, p.p99, p.max),
            (101, 50.0, 90.0, 99.0, 100.0)
        );
        assert!(Pooled::of(&[]).median.is_nan());
    }

    #[test]
    fn a_section_whose_cpus_moved_is_named_and_older_files_read() {
        // Written before sections recorded round trips: they read as None.
        let mut r = LabReport::from_json(include_str!("../tests/data/minimal-report.json"))
            .expect("the fixture reads");
        assert_eq!(r.experiments[0].sections[0].round_trip, None);
        assert_eq!(r.placement_sentence(), None);
        let steady = RoundTripRecord {
            windows: 9,
            min_ns: 60.0,
            max_ns: 75.0,
        };
        r.experiments[0].sections[0].round_trip = Some(steady);
        assert!(!steady.moved());
        assert_eq!(r.placement_sentence(), None);
        let moved = RoundTripRecord {
            max_ns: 480.0,
            ..steady
        };
        assert!(moved.moved());
        r.experiments[0].sections[0].round_trip = Some(moved);
        let sentence = r.placement_sentence().expect("a sentence");
        assert!(
            sentence.contains("(spawn/spawn)") && sentence.contains("from 60 to 480 ns"),
            "{sentence}"
        );
    }

    #[test]
    fn verdict_words_differ_by_kind() {
        assert_eq!(Verdict::Violated.word(ClaimKind::Guarantee), "VIOLATED");
        assert_eq!(Verdict::Violated.word(ClaimKind::Reproduction), "differs");
        assert_eq!(Verdict::Holds.word(ClaimKind::Reproduction), "agrees");
    }

    #[test]
    fn nan_survives_a_round_trip_through_json() {
        let s = Summary::of(&[], 1e-3);
        let text = serde_json::to_string(&s).unwrap();
        assert!(text.contains("\"median\":null"), "{text}");
        let back: Summary = serde_json::from_str(&text).unwrap();
        assert!(back.median.is_nan() && back.n == 0);
        let r = ClaimResult {
            id: "c".into(),
            kind: ClaimKind::Guarantee,
            statement: String::new(),
            reference: None,
            numerator: Operand {
                variant: "a".into(),
                metric: "m".into(),
            },
            denominator: Operand {
                variant: "b".into(),
                metric: "m".into(),
            },
            relation: "at_most".into(),
            bound: 1.0,
            verdict: Verdict::Undecided,
            explanation: String::new(),
            trials: 0,
            successes: 0,
            capped_trials: 0,
            margin: Some(0.02),
            confirmation: Vec::new(),
            success_interval: None,
            band: None,
            eps: 1e-3,
            ratio: s,
            ratios: vec![1.0, f64::NAN],
        };
        let back: ClaimResult = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back.ratios[0], 1.0);
        assert!(back.ratios[1].is_nan());
    }

    #[test]
    fn other_schemas_are_refused_with_a_reason() {
        assert!(LabReport::from_json("{}").unwrap_err().contains("schema"));
        assert!(LabReport::from_json("{\"schema\": 1}")
            .unwrap_err()
            .contains("schema 1"));
        assert!(LabReport::from_json("not json")
            .unwrap_err()
            .contains("not JSON"));
    }
}
