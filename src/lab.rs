//! `spindle lab`: run experiments, print a summary, point at the report.

use std::path::PathBuf;

use spindle_lab::{LabError, LabOptions, Profile};

use crate::exit::{self, CliError, CliResult};

pub struct LabCli {
    pub experiments: Vec<String>,
    pub full: bool,
    pub smoke: bool,
    pub list: bool,
    pub json: bool,
    pub out: PathBuf,
    pub eps: f64,
    pub seed: Option<u64>,
    pub quiet: bool,
}

pub fn run(args: LabCli) -> CliResult<u8> {
    if args.list {
        println!("Experiments (run them all with `spindle lab`, or name some):");
        for e in spindle_lab::catalogue() {
            println!(
                "  {:<12} {} (seed {}): {}",
                e.name, e.title, e.seed, e.summary
            );
        }
        println!("\nPlanned, not built yet:");
        for (name, what) in spindle_lab::experiments::PLANNED {
            println!("  {name:<12} {what}");
        }
        return Ok(exit::HOLDS);
    }
    let profile = if args.smoke {
        Profile::Smoke
    } else if args.full {
        Profile::Full
    } else {
        Profile::Quick
    };
    let options = LabOptions {
        experiments: args.experiments,
        profile,
        eps: args.eps,
        out: args.out,
        quiet: args.quiet || args.json,
        seed: args.seed,
    };
    let outcome = spindle_lab::run(&options).map_err(|e| match e {
        LabError::UnknownExperiment { .. } | LabError::BadOption(_) => {
            CliError::Usage(e.to_string())
        }
        LabError::Output(m) => CliError::Execution(m),
    })?;
    if args.json {
        crate::output::print_json(&outcome.report);
    } else {
        print!("{}", spindle_lab::report::render_terminal(&outcome.report));
        if let Some(html) = outcome
            .files
            .iter()
            .find(|p| p.extension().is_some_and(|e| e == "html"))
        {
            println!("report: {}", html.display());
        }
    }
    if let Some(e) = outcome.write_error {
        return Err(CliError::Execution(format!(
            "the report could not be written: {e}"
        )));
    }
    if !outcome.report.failures.is_empty() {
        return Err(CliError::Execution(format!(
            "{} experiment(s) failed: {}",
            outcome.report.failures.len(),
            outcome
                .report
                .failures
                .iter()
                .map(|f| f.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    Ok(exit::HOLDS)
}
