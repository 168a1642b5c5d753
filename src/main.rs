//! `spindle`: the command line. Parses arguments, calls the crates, prints, exits with a code
//! that scripts can branch on (see `exit.rs` and the README).

mod compare;
mod exec;
mod exit;
mod lab;
mod output;
mod slo;
mod stats_cmd;
mod units;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::exec::CommandLine;
use crate::exit::CliResult;

const EXIT_CODES: &str = "\
Exit codes:
  0  holds / A faster / success
  1  violated / A slower
  2  undecided (budget exhausted) or indistinguishable
  3  usage error (bad flag, value or file)
  4  execution error (a command could not run, a file could not be written)";

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
    Lab(LabArgs),
    /// Test a success-rate objective: run a command until the CSM decides whether
    /// "at least RATE of runs succeed".
    #[command(after_help = concat!(
        "A run succeeds when the command exits 0 (and, with --under, finishes within DURATION).\n",
        "The test stops the moment the evidence suffices; the probability of a wrong verdict is at most --eps.\n\n",
        "Examples:\n",
        "  spindle slo -- true                               holds after ~2300 runs\n",
        "  spindle slo --rate 0.9 --under 50ms -- ./client   p90 latency under 50 ms?\n\n",
        "Exit codes: 0 holds, 1 violated, 2 undecided (--max-runs or --max-time reached), 3 usage error, 4 the command could not run."
    ))]
    Slo(SloCli),
    /// Compare two commands with paired, order-randomised runs until the sign test names the
    /// faster one or shows them indistinguishable.
    #[command(after_help = concat!(
        "P(A faster) is tested against the band [0.5 - B, 0.5 + B]: above it A is faster, below it A is\n",
        "slower, inside it the two are indistinguishable. Running the same command on both sides names a\n",
        "winner with probability at most --eps.\n\n",
        "Examples:\n",
        "  spindle compare -- ./new ::: ./old                 CI gate: fails (exit 1) only if new is slower\n",
        "  spindle compare --band 0.2 -- sleep 0.01 ::: sleep 0.011\n\n",
        "Exit codes: 0 A faster, 1 A slower, 2 indistinguishable or undecided, 3 usage error, 4 a command failed."
    ))]
    Compare(CompareCli),
    /// The statistics engine as calculators and a stream filter for shell pipelines.
    #[command(subcommand)]
    Stats(StatsCommand),
}

#[derive(Args)]
struct LabArgs {
    /// Experiments to run (default: all). See --list.
    experiments: Vec<String>,
    /// Quick profile (the default): the whole lab in about three minutes.
    #[arg(long, conflicts_with = "full")]
    quick: bool,
    /// Full profile: six times the quick budgets, for figures worth publishing.
    #[arg(long)]
    full: bool,
    /// List the experiments, with their references, and exit.
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
    /// An earlier run's results.json: show each median's ratio to that run's (unpaired).
    #[arg(long, value_name = "RESULTS_JSON")]
    baseline: Option<PathBuf>,
    /// Render these results.json files (one per machine) as Markdown on stdout, and exit.
    #[arg(long, value_name = "RESULTS_JSON", num_args = 1.., conflicts_with_all = ["baseline", "list", "json"])]
    markdown: Vec<PathBuf>,
    /// Tiny budgets that only check that everything runs (figures are meaningless).
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
    /// A run also has to finish within this time (e.g. 50ms, 1.5s).
    #[arg(long, value_name = "DURATION", value_parser = units::parse_duration)]
    under: Option<Duration>,
    /// Bound on the probability of a wrong verdict, in (0, 0.5).
    #[arg(long, default_value = "1e-6", value_parser = eps_parser)]
    eps: f64,
    /// Collect this many runs before testing (so that a slow start cannot decide on its own).
    #[arg(long, default_value_t = 1)]
    min_runs: u64,
    /// Give up (exit 2) after this many runs.
    #[arg(long, default_value_t = 100_000)]
    max_runs: u64,
    /// Kill a run after this long (it counts as a failure).
    #[arg(long, value_name = "DURATION", value_parser = units::parse_duration)]
    timeout: Option<Duration>,
    /// Give up (exit 2) after this much wall-clock time.
    #[arg(long, value_name = "DURATION", value_parser = units::parse_duration)]
    max_time: Option<Duration>,
    #[command(flatten)]
    output: RunOutput,
    /// The command and its arguments (run directly, no shell).
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

#[derive(Args)]
struct CompareCli {
    /// Bound on the probability of a wrong verdict, in (0, 0.5).
    #[arg(long, default_value = "1e-6", value_parser = eps_parser)]
    eps: f64,
    /// Indifference band around 1/2 for P(A faster), in [0, 0.5).
    #[arg(long, default_value = "0.1", value_parser = band_parser)]
    band: f64,
    /// Give up (exit 2) after this many untied pairs. Two identical commands need about 2000
    /// pairs to be shown indistinguishable at the default band and eps (see `spindle stats power`).
    #[arg(long, default_value_t = 2000)]
    max_runs: u64,
    /// Unmeasured runs of each command before measuring.
    #[arg(long, default_value_t = 1)]
    warmup: u64,
    /// Seed for the order of runs within each pair (default: from the clock).
    #[arg(long)]
    seed: Option<u64>,
    #[command(flatten)]
    output: RunOutput,
    /// CMD_A [ARGS…] ::: CMD_B [ARGS…]
    #[arg(last = true, required = true, value_name = "CMD_A ::: CMD_B")]
    commands: Vec<String>,
}

#[derive(Subcommand)]
enum StatsCommand {
    /// Robbins' stopping test: may N trials with S successes be told apart from rate ALPHA?
    Csm {
        n: u64,
        #[arg(value_parser = rate_parser)]
        alpha: f64,
        s: u64,
        #[arg(value_parser = unit_parser)]
        eps: f64,
        #[arg(long)]
        json: bool,
    },
    /// Conservative end of a Beta(A, B) credible interval cutting ALPHA from one tail.
    #[command(name = "beta-icdf")]
    BetaIcdf {
        a: u64,
        b: u64,
        alpha: f64,
        /// The upper end (default: the lower end).
        #[arg(long)]
        upper: bool,
        #[arg(long)]
        json: bool,
    },
    /// 1-based ranks of the order statistics bounding the Q-quantile of N samples.
    Quantile {
        n: u64,
        q: f64,
        #[arg(value_parser = unit_parser)]
        eps: f64,
        #[arg(long)]
        json: bool,
    },
    /// Read outcomes from stdin (1/0, or numbers with --under) and exit as soon as the CSM
    /// decides whether the success rate is above --rate.
    #[command(
        after_help = "Example: ./latencies.sh | spindle stats stream --rate 0.99 --under 0.05\nExit codes: 0 holds, 1 violated, 2 undecided at end of input, 3 bad input."
    )]
    Stream(stats_cmd::StreamArgs),
    /// Will a test with these thresholds decide within --max-runs, if the true rate is RATE?
    Power(stats_cmd::PowerArgs),
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

fn band_parser(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("band must be a number, not '{s}'"))?;
    if !(0.0..0.5).contains(&v) {
        return Err(format!("band = {s} is outside [0, 0.5)"));
    }
    Ok(v)
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
            markdown: a.markdown,
        }),
        Command::Slo(a) => {
            if a.max_runs == 0 {
                return Err(exit::usage("--max-runs must be at least 1"));
            }
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
            if a.max_runs == 0 {
                return Err(exit::usage("--max-runs must be at least 1"));
            }
            let (cmd_a, cmd_b) = compare::split_commands(&a.commands)?;
            compare::run(compare::CompareArgs {
                eps: a.eps,
                band: a.band,
                max_runs: a.max_runs,
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
            StatsCommand::Stream(args) => stats_cmd::stream_cmd(args),
            StatsCommand::Power(args) => stats_cmd::power_cmd(args),
        },
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
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("spindle: {e}");
            ExitCode::from(e.code())
        }
    }
}
