//! `spindle`: the command line. Parses arguments, calls the crates, prints, exits with a code
//! that scripts can branch on (see `exit.rs` and the README).

#[macro_use]
mod output;
mod alloc_cmd;
mod compare;
mod exec;
mod exit;
mod interrupt;
mod lab;
mod recorder;
mod samples;
mod slo;
mod stats_cmd;
mod units;
mod wal;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::exec::CommandLine;
use crate::exit::CliResult;

// Help texts are paragraphs on one line each, which clap wraps to the terminal; only tables and
// examples carry their own line breaks, and those lines stay under 79 columns so that an
// 80-column terminal shows them whole (tests/help.rs checks every subcommand).
const EXIT_CODES: &str = "\
Exit codes:
  0    holds / A faster / significant / enough / stop (stats csm) / success
  1    violated / A slower / not significant / not enough
  2    undecided, within the tolerance (compare), continue (stats csm)
  3    usage error (bad flag, value or file)
  4    execution error (a command could not run, a file could not be written)
  130  interrupted by Ctrl-C (compare, slo, lab)";

const SLO_HELP: &str = "\
A run succeeds when the command exits 0 (and, with --under, finishes within DURATION). The test \
stops the moment the evidence suffices; the probability of a wrong verdict is at most --eps.

Durations need a unit (50ms, 1.5s, 2m) and must be positive: a bare number is refused. \
--max-time bounds the whole test: no run starts that would, judging by the longest run so far, \
end after it (the first run always starts). The command runs without a shell: write its words \
after --, or use -- sh -c '...' for pipes and quoting.

Examples:
  spindle slo -- true                               holds after 2210 runs
  spindle slo --rate 0.9 --under 50ms -- ./client   p90 latency under 50 ms?

Ctrl-C stops after the run in flight (which a terminal's Ctrl-C reaches too; it does not count) and \
prints what was measured, undecided; the exit code is then 130. A second Ctrl-C exits at once.

Exit codes: 0 holds, 1 violated, 2 undecided (--max-runs or --max-time reached), 3 usage error, \
4 the command could not run, 130 interrupted.";

const COMPARE_HELP: &str = "\
Each pair runs A and B back to back in random order; r = time(A) / time(B). The verdict is about \
the median of r, the typical pair:
  A slower   median r > 1 + T                    (exit 1)
  A faster   median r < 1 / (1 + T)              (exit 0)
  within     1 / (1 + T) <= median r <= 1 + T    (exit 2)
with T = --tolerance (\"within\": no difference beyond the tolerance). It is read off Robbins' \
confidence sequence for that median, valid however and whenever the test stops: a wrong verdict \
has probability at most --eps, a wrong \"A slower\" at most eps/2. Identical commands get \
\"within\" in a few dozen pairs; a 2x difference in about 15. P(A faster in a pair) is reported \
too, as a secondary statistic.

--max-time bounds the whole test, warm-up included: no pair, warm-up or measured, starts that \
would, judging by the longest pair so far, end after it (the first pair always runs).

--samples A B decides from two files instead of running commands: hyperfine --export-json \
(FILE#N picks a command), criterion's target/criterion/<bench>/<baseline>/sample.json, or plain \
numbers. Those samples are not paired, so the verdict is about the ratio of the medians, \
median(A) / median(B), each median with an order-statistic confidence interval at eps/2.

Ctrl-C stops after the current pair and prints the verdict so far (undecided, with what is \
already known and its intervals, which stay valid); the exit code is then 130. A second Ctrl-C \
exits at once.

Examples:
  spindle compare -- ./new ::: ./old
      a CI gate: fails (exit 1) only if ./new is more than 5% slower
  spindle compare --tolerance 2% --max-time 5m -- ./new in ::: ./old in
  spindle compare --samples new.json old.json
      two hyperfine exports, nothing re-run

Exit codes: 0 A faster, 1 A slower, 2 within the tolerance or undecided, 3 usage error, 4 a \
command failed, 130 interrupted.";

const CSM_HELP: &str = "\
Example (the CSM post's):
  $ spindle stats csm 4000 0.98 3972 0.001
  stop: success rate above 0.98 (estimate 0.993, false-positive rate < 0.001)
  log level -17.238559826956475 < ln(eps) = -6.90775527898214
  $ spindle stats csm 1000 0.98 995 0.001
  continue: 995/1000 cannot yet be told apart from 0.98 at eps = 0.001
  log level -3.0115331544604658 >= ln(eps) = -6.90775527898214

Exit codes: 0 stop (the test rejects ALPHA: the success rate is known to be above it, or below \
it, as printed), 2 continue (not yet), 3 usage error.";

const BETA_ICDF_HELP: &str = "\
Example (the CSM post's 99.9% interval after 3972 successes in 4000 trials):
  $ spindle stats beta-icdf 3972 28 0.001
  0.9882119750976562
  $ spindle stats beta-icdf 3972 28 0.001 --upper
  0.9963832682169742";

const STREAM_HELP: &str = "\
Lines are outcomes (1/0, true/false, yes/no, ok/pass/fail) or, with --under, measurements in \
seconds; blank lines and lines that start with # are skipped.

With --rate-hi the verdict is 'holds' once the rate is known to be above --rate, 'violated' once \
it is known to be below --rate-hi (rates in between may get either); each is wrong with \
probability at most --eps.

Examples:
  ./latencies.sh | spindle stats stream --rate 0.99 --under 50ms
  ./check.sh | spindle stats stream --rate 0.98 --rate-hi 0.99 --trace

Exit codes: 0 holds, 1 violated, 2 undecided at end of input (or within the band), 3 bad input.";

const POWER_HELP: &str = "\
Example (the CSM post's): thresholds 96% and 98%, true rate 97%, eps 0.1%. 1000 runs are not \
enough (exit 1), 10000 are (exit 0):
  spindle stats power 0.97 --alpha 0.96 --alpha-hi 0.98 --eps 1e-3 \\
      --max-runs 1000

Each simulated driver draws up to --max-runs observations, and at least 100 drivers are simulated \
(a narrow band with a large --max-runs can take minutes): on a terminal, a line on stderr shows \
how far the simulation has got.

Exit codes: 0 enough, 1 not enough, 2 undecided, 3 usage error.";

const EXACT_HELP: &str = "\
Shuffles the pooled values, splits them into groups of the original sizes, and counts how often \
the shuffled difference is as extreme as the observed one: that rate is the p-value, and the CSM \
stops as soon as it is known to be below --alpha (significant) or above it. With --alpha-hi, it \
stops at the first of 'below --alpha-hi' (significant) and 'above --alpha' (not significant).

Example (the CSM post's thresholds):
  spindle stats exact new.txt old.txt --alpha 0.005 --alpha-hi 0.01 --eps 1e-9

Exit codes: 0 significant, 1 not significant, 2 undecided or between the thresholds, 3 usage \
error.";

#[derive(Parser)]
#[command(
    name = "spindle",
    version,
    about = "Scheduler-aware synchronisation primitives, and a lab that decides performance claims \
             with a bounded false-positive rate",
    long_about = None,
    after_help = EXIT_CODES
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the lab: reproduce Spindle's performance claims on this machine, side by side with
    /// the alternatives, and write a report.
    #[command(allow_negative_numbers = true)]
    Lab(LabArgs),
    /// Test a success-rate objective: run a command until the CSM decides whether
    /// "at least RATE of runs succeed".
    #[command(allow_negative_numbers = true, after_help = SLO_HELP)]
    Slo(SloCli),
    /// CI gate: is A slower than B by more than a tolerance? Paired, order-randomised runs until
    /// the median time ratio A/B is known to lie above, below or within the tolerance band.
    #[command(allow_negative_numbers = true, after_help = COMPARE_HELP)]
    Compare(CompareCli),
    /// The statistics engine as calculators and a stream filter for shell pipelines.
    #[command(subcommand)]
    Stats(StatsCommand),
    /// Flight recordings (spindle-recorder): read the last records of a process, dead or alive.
    #[command(subcommand)]
    Recorder(RecorderCommand),
    /// Write-ahead logs (spindle-wal): what a log directory holds, and whether it is damaged.
    #[command(subcommand)]
    Wal(WalCommand),
    /// Allocation traces (spindle-alloc): record a program's calls, replay them on allocators.
    #[command(subcommand)]
    Alloc(AllocCommand),
}

const ALLOC_HELP: &str = "\
record runs CMD with libspindle_alloc_preload.so preloaded (build it with `cargo build --release \
-p spindle-alloc-preload`; it is looked for next to this executable) and keeps every malloc, free, \
calloc, realloc and aligned allocation of CMD's own process (not of processes it starts) as a \
compact trace. replay plays a trace back in a child process on each allocator, one copy per \
thread, and prints what the lab's `alloc` experiment measures.

Examples:
  spindle alloc record -o py.spat -- python3 -c 'import json; json.dumps(list(range(10**5)))'
  spindle alloc replay py.spat --threads 4
  spindle alloc replay py.spat --allocator spindle --allocator mimalloc --json

Exit codes: 0 done, 3 usage (no command, unknown allocator, unreadable trace, library not \
built), 4 execution (the command could not start, a child crashed, a file could not be written).";

#[derive(Subcommand)]
enum AllocCommand {
    /// Record the allocation calls of a command into a compact trace.
    #[command(after_help = ALLOC_HELP)]
    Record {
        /// Where the trace goes.
        #[arg(short, long, default_value = "trace.spat")]
        output: PathBuf,
        /// The preload library (default: next to this executable).
        #[arg(long)]
        library: Option<PathBuf>,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<OsString>,
    },
    /// Replay a trace on allocators (all of them unless --allocator is given).
    #[command(allow_negative_numbers = true, after_help = ALLOC_HELP)]
    Replay {
        /// A trace written by `spindle alloc record`.
        trace: PathBuf,
        /// spindle, glibc, mimalloc, jemalloc or snmalloc (repeat for several).
        #[arg(long)]
        allocator: Vec<String>,
        /// Threads, each replaying its own copy.
        #[arg(long, default_value = "1", value_parser = clap::value_parser!(u64).range(1..=4096))]
        threads: u64,
        /// One JSON document.
        #[arg(long)]
        json: bool,
    },
}

const WAL_HELP: &str = "\
DIR is the directory a program passed to spindle_wal::Wal::open. It is only read: opening it \
as a log would cut a torn tail. A torn tail in the last segment is what a crash leaves (it never \
holds an acknowledged record); damage is anything else: a bad record or header before it, \
segments that do not follow each other, a file that is not a segment.

Examples:
  spindle wal inspect /var/lib/app/wal
  spindle wal verify /var/lib/app/wal && echo intact
  spindle wal inspect /var/lib/app/wal --json | jq '.segments[] | select(.problem)'

Exit codes: inspect: 0 read (damaged or not); verify: 0 intact, 1 damaged; both: 3 the \
directory is missing or unreadable, 4 the output could not be written.";

#[derive(Subcommand)]
enum WalCommand {
    /// Each segment (first LSN, records, bytes, where a scan stops and why), and the totals.
    #[command(after_help = WAL_HELP)]
    Inspect {
        /// The log's directory.
        dir: PathBuf,
        /// One JSON document.
        #[arg(long)]
        json: bool,
    },
    /// Whether the log opens without losing a record: exit 0 if so, 1 if it is damaged.
    #[command(after_help = WAL_HELP)]
    Verify {
        /// The log's directory.
        dir: PathBuf,
        /// One JSON document.
        #[arg(long)]
        json: bool,
    },
}

const RECORDER_DUMP_HELP: &str = "\
FILE is the file a program passed to spindle_recorder::install. It is read as the recording \
process left it: after a crash, a SIGKILL or the OOM killer, it holds every record completed \
before the process died (the last --last of each thread); a record being written at that moment \
is left out, never shown torn. Records come out in time order, one line each (UTC time, level, \
section, [thread id and name], file:line: message); a summary goes to stderr.

Examples:
  spindle recorder dump /tmp/app.rec
  spindle recorder dump /tmp/app.rec --section net --since 2026-11-24T19:14:00Z
  spindle recorder dump /tmp/app.rec --json | jq '.records[-1]'

Exit codes: 0 success, 3 the file is missing or not a readable recording (the message says \
why: truncated, damaged header, newer format), 4 the output could not be written.";

#[derive(Subcommand)]
enum RecorderCommand {
    /// Print the last records of every thread of a recording, in time order.
    #[command(allow_negative_numbers = true, after_help = RECORDER_DUMP_HELP)]
    Dump {
        /// The recording file.
        file: PathBuf,
        /// One JSON document (records with their fields, and what was skipped).
        #[arg(long)]
        json: bool,
        /// Records per thread, at most (a ring holds at most its size).
        #[arg(long, default_value = "1000", value_parser = positive_count_parser)]
        last: u64,
        /// Only records at or after this time: seconds since 1970 or a UTC time
        /// (2026-11-24T19:14:11Z).
        #[arg(long, value_parser = recorder::since_parser)]
        since: Option<u64>,
        /// Only records of this section (repeat for several).
        #[arg(long)]
        section: Vec<String>,
    },
    /// The lab's crash-recall child: records numbered records with one logger until killed.
    #[command(hide = true)]
    Child {
        /// spindle, tracing-nb or tracing-file.
        #[arg(long)]
        peer: String,
        /// Where the logger writes, with the progress word and the ready file.
        #[arg(long)]
        dir: PathBuf,
    },
}

#[derive(Args)]
struct LabArgs {
    /// Experiments to run (default: all). See --list.
    experiments: Vec<String>,
    /// Quick profile (the default): the whole lab in at most three minutes.
    #[arg(long, conflicts_with = "full")]
    quick: bool,
    /// Full profile: the whole lab in at most 20 minutes, for figures worth publishing.
    #[arg(long)]
    full: bool,
    /// List the experiments (all, or those named), with their references, and exit.
    #[arg(long)]
    list: bool,
    /// Print results.json to stdout instead of the summary (progress still goes to stderr).
    #[arg(long)]
    json: bool,
    /// Report directory.
    #[arg(long, value_name = "DIR", default_value = "spindle-report")]
    out: PathBuf,
    /// False-positive rate of each claim's verdict.
    #[arg(long, default_value = "1e-3", value_parser = eps_parser)]
    eps: f64,
    /// Seed for the order of variants within trials (default: from the clock).
    #[arg(long)]
    seed: Option<u64>,
    /// No progress display.
    #[arg(long, short)]
    quiet: bool,
    /// Exit 1 when a guarantee (Spindle's promise about its own code) is violated.
    #[arg(long)]
    strict: bool,
    /// Keep trials measured while other processes loaded the CPUs (by default they are
    /// discarded and measured again): for machines that are never idle. The load is still
    /// recorded for each section; verdicts may then describe the load as much as the code.
    #[arg(long)]
    keep_loaded: bool,
    /// An earlier run's results.json: show each median's ratio to that run's (unpaired).
    #[arg(long, value_name = "RESULTS_JSON")]
    baseline: Option<PathBuf>,
    /// Render these results.json files (one per machine) as Markdown on stdout, and exit.
    #[arg(long, value_name = "RESULTS_JSON", num_args = 1.., conflicts_with_all = ["baseline", "list", "json"])]
    markdown: Vec<PathBuf>,
    /// Compare the verdicts of these results.json files (runs on one machine): list claims that
    /// held in one run and were violated in another, and claims left undecided far from their
    /// bound; exit 1 if a guarantee flipped.
    #[arg(long, value_name = "RESULTS_JSON", num_args = 2.., conflicts_with_all = ["baseline", "list", "markdown"])]
    flips: Vec<PathBuf>,
    /// Tiny budgets that only check that everything runs (figures are meaningless); an
    /// experiment overruns its slice until it has one trial.
    #[arg(long, hide = true, conflicts_with_all = ["quick", "full"])]
    smoke: bool,
}

/// Output flags shared by the subcommands that run other programs.
#[derive(Args)]
struct RunOutput {
    /// Let the command(s) print to the terminal (default: their output is discarded).
    #[arg(long)]
    show_output: bool,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
    /// No progress line.
    #[arg(long, short)]
    quiet: bool,
}

#[derive(Args)]
struct SloCli {
    /// Objective: the fraction of runs that must succeed, in (0, 1).
    #[arg(long, default_value = "0.99", value_parser = rate_parser)]
    rate: f64,
    /// A run also has to finish within this time (e.g. 50ms, 1.5s; a unit is required).
    #[arg(long, value_name = "DURATION", value_parser = units::parse_positive_duration, allow_hyphen_values = true)]
    under: Option<Duration>,
    /// Bound on the probability of a wrong verdict, in (0, 0.5).
    #[arg(long, default_value = "1e-6", value_parser = eps_parser)]
    eps: f64,
    /// Collect this many runs before testing (so that a slow start cannot decide on its own).
    #[arg(long, default_value_t = 1, value_parser = positive_count_parser)]
    min_runs: u64,
    /// Give up (exit 2) after this many runs.
    #[arg(long, default_value_t = 100_000, value_parser = positive_count_parser)]
    max_runs: u64,
    /// Kill a run after this long (it counts as a failure): the command and every process it
    /// started that is still its descendant (a daemon that left the tree is not found).
    #[arg(long, value_name = "DURATION", value_parser = units::parse_positive_duration, allow_hyphen_values = true)]
    timeout: Option<Duration>,
    /// Give up (exit 2) rather than start a run that would end after this much wall-clock time.
    #[arg(long, value_name = "DURATION", value_parser = units::parse_positive_duration, allow_hyphen_values = true)]
    max_time: Option<Duration>,
    #[command(flatten)]
    output: RunOutput,
    /// The command and its arguments (run directly, no shell; need not be UTF-8).
    #[arg(last = true, required = true, value_name = "CMD", value_parser = clap::value_parser!(OsString))]
    command: Vec<OsString>,
}

#[derive(Args)]
struct CompareCli {
    /// The tolerance T: "A slower" means A takes more than T longer than B in the typical pair.
    /// A percentage: 5%, 5 or 2.5%.
    #[arg(long, value_name = "PCT", default_value = "5%", value_parser = tolerance_parser, allow_hyphen_values = true)]
    tolerance: f64,
    /// Bound on the probability of a wrong verdict, in (0, 0.5); a wrong "A slower" has at most
    /// half of it.
    #[arg(long, default_value = "1e-3", value_parser = eps_parser)]
    eps: f64,
    /// Give up (exit 2) after this many pairs.
    #[arg(
        long,
        visible_alias = "max-pairs",
        value_name = "PAIRS",
        default_value_t = 1000,
        value_parser = positive_count_parser
    )]
    max_runs: u64,
    /// Give up (exit 2) rather than start a pair that would end after this much wall-clock time
    /// (e.g. 90s, 10m).
    #[arg(long, value_name = "DURATION", value_parser = units::parse_positive_duration, allow_hyphen_values = true)]
    max_time: Option<Duration>,
    /// Unmeasured runs of each command before measuring.
    #[arg(long, default_value_t = 1, value_parser = count_parser)]
    warmup: u64,
    /// Seed for the order of runs within each pair (default: from the clock).
    #[arg(long)]
    seed: Option<u64>,
    /// Decide from two files of samples instead of running commands (see below).
    #[arg(long, num_args = 2, value_names = ["A", "B"], conflicts_with_all = ["commands", "max_runs", "max_time", "warmup", "seed"])]
    samples: Vec<PathBuf>,
    /// Replaced by --tolerance (the old sign test's band around 1/2).
    #[arg(long, hide = true)]
    band: Option<String>,
    #[command(flatten)]
    output: RunOutput,
    /// CMD_A [ARGS…] ::: CMD_B [ARGS…]
    #[arg(last = true, required_unless_present = "samples", value_name = "CMD_A ::: CMD_B", value_parser = clap::value_parser!(OsString))]
    commands: Vec<OsString>,
}

#[derive(Subcommand)]
enum StatsCommand {
    /// Robbins' stopping test: may N trials with S successes be told apart from rate ALPHA, at
    /// false-positive rate EPS?
    #[command(allow_negative_numbers = true, after_help = CSM_HELP)]
    Csm {
        /// Trials.
        #[arg(value_name = "N", value_parser = count_parser)]
        n: u64,
        /// The threshold success rate, in (0, 1).
        #[arg(value_name = "ALPHA", value_parser = rate_parser)]
        alpha: f64,
        /// Successes among the N trials.
        #[arg(value_name = "S", value_parser = count_parser)]
        s: u64,
        /// False-positive rate, in (0, 1).
        #[arg(value_name = "EPS", value_parser = unit_parser)]
        eps: f64,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Conservative end of a Beta(A, B) credible interval cutting ALPHA from one tail: after S
    /// successes in N trials, A = S + 1 and B = N − S + 1.
    #[command(name = "beta-icdf", allow_negative_numbers = true, after_help = BETA_ICDF_HELP)]
    BetaIcdf {
        /// First shape parameter (successes + 1), in [1, 2^44].
        #[arg(value_name = "A", value_parser = count_parser)]
        a: u64,
        /// Second shape parameter (failures + 1), in [1, 2^44].
        #[arg(value_name = "B", value_parser = count_parser)]
        b: u64,
        /// Probability cut from the tail, in [0, 1) (values above 0.05 are computed as 0.05).
        #[arg(value_name = "ALPHA")]
        alpha: f64,
        /// The upper end (default: the lower end).
        #[arg(long)]
        upper: bool,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// 1-based ranks of the order statistics bounding the Q-quantile of N samples, valid however
    /// N was chosen.
    #[command(allow_negative_numbers = true)]
    Quantile {
        /// Number of samples.
        #[arg(value_name = "N", value_parser = positive_count_parser)]
        n: u64,
        /// The quantile, in [0, 1] (0.5 for the median, 0.99 for p99).
        #[arg(value_name = "Q")]
        q: f64,
        /// Probability that the interval misses the quantile (EPS/2 per end), in (0, 1).
        #[arg(value_name = "EPS", value_parser = unit_parser)]
        eps: f64,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// The shape of the posterior x^A (1-x)^B on a grid, computed in the log domain (the naive
    /// product underflows to 0 for real counts).
    #[command(
        allow_negative_numbers = true,
        after_help = "Example (the CSM post's underflow demonstration):\n  spindle stats proportion 901 101"
    )]
    Proportion {
        /// Exponent of x (successes).
        #[arg(value_name = "A", value_parser = count_parser)]
        a: u64,
        /// Exponent of 1 − x (failures).
        #[arg(value_name = "B", value_parser = count_parser)]
        b: u64,
        /// Grid: x = 1/K, 2/K, …, (K−1)/K.
        #[arg(long, value_name = "K", default_value_t = 20, value_parser = count_parser)]
        points: u64,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Read outcomes from stdin (1/0, or times in seconds with --under) and exit as soon as the
    /// CSM decides whether the success rate is above --rate (or, with --rate-hi, either
    /// threshold).
    #[command(allow_negative_numbers = true, after_help = STREAM_HELP)]
    Stream(stats_cmd::StreamArgs),
    /// Will a test with these thresholds decide within --max-runs, if the true rate is RATE?
    #[command(allow_negative_numbers = true, after_help = POWER_HELP)]
    Power(stats_cmd::PowerArgs),
    /// The CSM post's exact test: is the difference of means (medians, quantiles) between two
    /// samples real? Resamples the pooled data until the CSM places the p-value.
    #[command(allow_negative_numbers = true, after_help = EXACT_HELP)]
    Exact(stats_cmd::ExactArgs),
}

pub(crate) fn rate_parser(s: &str) -> Result<f64, String> {
    units::parse_open_unit("rate", s, 0.0, 1.0)
}

pub(crate) fn eps_parser(s: &str) -> Result<f64, String> {
    units::parse_open_unit("eps", s, 0.0, 0.5)
}

pub(crate) fn unit_parser(s: &str) -> Result<f64, String> {
    units::parse_open_unit("value", s, 0.0, 1.0)
}

/// A count that may be 0 (`--warmup`, `N` of `stats csm`).
pub(crate) fn count_parser(s: &str) -> Result<u64, String> {
    units::parse_count(s, 0)
}

/// A count of at least 1 (`--max-runs`, `--min-runs`).
pub(crate) fn positive_count_parser(s: &str) -> Result<u64, String> {
    units::parse_count(s, 1)
}

fn tolerance_parser(s: &str) -> Result<f64, String> {
    units::parse_percent("tolerance", s)
}

fn run(cli: Cli) -> CliResult<u8> {
    match cli.command {
        Command::Lab(a) => lab::run(lab::LabCli {
            experiments: a.experiments,
            profile: if a.smoke {
                spindle_lab::Profile::Smoke
            } else if a.full {
                spindle_lab::Profile::Full
            } else {
                spindle_lab::Profile::Quick
            },
            list: a.list,
            json: a.json,
            out: a.out,
            eps: a.eps,
            seed: a.seed,
            quiet: a.quiet,
            strict: a.strict,
            baseline: a.baseline,
            keep_loaded: a.keep_loaded,
            markdown: a.markdown,
            flips: a.flips,
        }),
        Command::Slo(a) => {
            if a.min_runs > a.max_runs {
                return Err(exit::usage(format!(
                    "--min-runs {} exceeds --max-runs {}",
                    a.min_runs, a.max_runs
                )));
            }
            slo::run(slo::SloArgs {
                rate: a.rate,
                under: a.under,
                eps: a.eps,
                min_runs: a.min_runs,
                max_runs: a.max_runs,
                timeout: a.timeout,
                max_time: a.max_time,
                json: a.output.json,
                quiet: a.output.quiet,
                command: CommandLine::new(&a.command, a.output.show_output)?,
            })
        }
        Command::Compare(a) => {
            if a.band.is_some() {
                return Err(exit::usage(
                    "--band is gone: compare now decides on the median time ratio; use --tolerance PCT (default 5%)",
                ));
            }
            if let [sa, sb] = &a.samples[..] {
                return compare::run_samples(compare::SamplesArgs {
                    eps: a.eps,
                    tolerance: a.tolerance,
                    json: a.output.json,
                    a: sa.clone(),
                    b: sb.clone(),
                });
            }
            let (cmd_a, cmd_b) = compare::split_commands(&a.commands)?;
            compare::run(compare::CompareArgs {
                eps: a.eps,
                tolerance: a.tolerance,
                max_pairs: a.max_runs,
                max_time: a.max_time,
                warmup: a.warmup,
                seed: a.seed,
                json: a.output.json,
                quiet: a.output.quiet,
                a: CommandLine::new(&cmd_a, a.output.show_output)?,
                b: CommandLine::new(&cmd_b, a.output.show_output)?,
            })
        }
        Command::Stats(s) => match s {
            StatsCommand::Csm {
                n,
                alpha,
                s,
                eps,
                json,
            } => stats_cmd::csm_cmd(n, alpha, s, eps, json),
            StatsCommand::BetaIcdf {
                a,
                b,
                alpha,
                upper,
                json,
            } => stats_cmd::beta_icdf_cmd(a, b, alpha, upper, json),
            StatsCommand::Quantile { n, q, eps, json } => stats_cmd::quantile_cmd(n, q, eps, json),
            StatsCommand::Proportion { a, b, points, json } => {
                stats_cmd::proportion_cmd(a, b, points, json)
            }
            StatsCommand::Stream(args) => stats_cmd::stream_cmd(args),
            StatsCommand::Power(args) => stats_cmd::power_cmd(args),
            StatsCommand::Exact(args) => stats_cmd::exact_cmd(args),
        },
        Command::Recorder(RecorderCommand::Dump {
            file,
            json,
            last,
            since,
            section,
        }) => recorder::dump(recorder::DumpArgs {
            file,
            json,
            last: usize::try_from(last).unwrap_or(usize::MAX),
            since,
            section,
        }),
        Command::Alloc(AllocCommand::Record {
            output,
            library,
            command,
        }) => alloc_cmd::record(&output, library.as_deref(), &command),
        Command::Alloc(AllocCommand::Replay {
            trace,
            allocator,
            threads,
            json,
        }) => alloc_cmd::replay(&trace, &allocator, threads as usize, json),
        Command::Wal(WalCommand::Inspect { dir, json }) => wal::inspect_cmd(&dir, json),
        Command::Wal(WalCommand::Verify { dir, json }) => wal::verify_cmd(&dir, json),
        Command::Recorder(RecorderCommand::Child { peer, dir }) => {
            spindle_lab::experiments::recorder::recall_child(&peer, &dir)
                .map(|()| exit::HOLDS)
                .map_err(exit::CliError::Execution)
        }
    }
}

/// Die quietly, as Unix tools do, when the reader of our output goes away
/// (`spindle lab --list | head -1`). Rust ignores SIGPIPE by default, which turns every later
/// `println!` into a panic on EPIPE.
fn restore_default_sigpipe() {
    extern "C" {
        fn signal(signum: i32, handler: usize) -> usize;
    }
    const SIGPIPE: i32 = 13;
    const SIG_DFL: usize = 0;
    // SAFETY: `signal` is the C library's; restoring the default disposition of SIGPIPE touches
    // no Rust state, and it happens before any thread or child process exists.
    unsafe {
        signal(SIGPIPE, SIG_DFL);
    }
}

fn main() -> ExitCode {
    restore_default_sigpipe();
    // The lab's --help states time bounds computed from its catalogue.
    let command = Cli::command().mut_subcommand("lab", |c| c.after_help(lab::after_help()));
    let cli = match command
        .try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m))
    {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version are not errors; everything else clap rejects is a usage error.
            let code = if e.use_stderr() {
                exit::USAGE
            } else {
                exit::HOLDS
            };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    match run(cli) {
        // A result that could not be written to standard output went to standard error.
        Ok(_) if output::stdout_failed() => ExitCode::from(exit::EXECUTION),
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            errln!("spindle: {e}");
            ExitCode::from(e.code())
        }
    }
}
