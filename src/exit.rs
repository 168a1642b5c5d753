//! Exit codes shared by every subcommand, and the error type that maps onto them.
//!
//! | code | meaning |
//! |---|---|
//! | 0 | the claim holds (`slo`), A is faster (`compare`), the stream holds (`stats stream`), the test stops (`stats csm`), or the command simply succeeded |
//! | 1 | the claim is violated / A is slower |
//! | 2 | no decision: undecided within the budget, (`compare`) within the tolerance, or (`stats csm`) continue |
//! | 3 | usage error: a flag, value or file is wrong |
//! | 4 | execution error: a command could not be run, a file could not be written, … |

use std::fmt;

pub const HOLDS: u8 = 0;
pub const VIOLATED: u8 = 1;
pub const UNDECIDED: u8 = 2;
pub const USAGE: u8 = 3;
pub const EXECUTION: u8 = 4;

/// An error that ends the program with a sentence and an exit code.
#[derive(Debug)]
pub enum CliError {
    /// Bad input from the user (exit 3).
    Usage(String),
    /// Something failed while doing the work (exit 4).
    Execution(String),
}

impl CliError {
    pub fn code(&self) -> u8 {
        match self {
            CliError::Usage(_) => USAGE,
            CliError::Execution(_) => EXECUTION,
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Usage(m) | CliError::Execution(m) => f.write_str(m),
        }
    }
}

impl From<spindle_stats::StatsError> for CliError {
    fn from(e: spindle_stats::StatsError) -> Self {
        CliError::Usage(e.to_string())
    }
}

pub type CliResult<T> = Result<T, CliError>;

/// Usage error helper.
pub fn usage(message: impl Into<String>) -> CliError {
    CliError::Usage(message.into())
}
