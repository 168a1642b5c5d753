//! A `log::Log` that records instead of writing (feature `log`): a program that logs through
//! the `log` facade gets a flight recorder by one line.
//!
//! ```
//! use spindle_recorder::{Level, Section};
//!
//! static LOG: Section = Section::new("log", Level::Info);
//! spindle_recorder::log_adapter::init(&LOG).expect("no other logger yet");
//! log::info!(target: "net", "accepted connection {} from {}", 17, "10.0.0.7");
//! // dumps as: … INFO  net [tid thread] file:line: accepted connection 17 from 10.0.0.7
//! ```
//!
//! `log` hands a message over only as format arguments, so the adapter formats it into the
//! record's string space (cut to what fits) — a message without arguments is copied as is.
//! Nothing is written anywhere until a dump. Each callsite (file, line, level, target) becomes
//! a recorder site the first time it logs; its target is the section name in the dump. The
//! [`Section`] decides which levels are kept; [`set_level`] changes it and `log`'s own maximum
//! level together.

use std::fmt::Write as _;

use crate::callsites::Short;
use crate::{Encoder, Level, Section, Site};

/// The adapter; [`init`] installs it as `log`'s logger.
pub struct RecorderLog {
    section: &'static Section,
}

impl RecorderLog {
    /// Records what `section`'s level lets through.
    pub fn new(section: &'static Section) -> RecorderLog {
        RecorderLog { section }
    }
}

/// Installs a [`RecorderLog`] for `section` as the process's logger, with `log`'s maximum
/// level set to the section's.
pub fn init(section: &'static Section) -> Result<(), log::SetLoggerError> {
    log::set_boxed_logger(Box::new(RecorderLog::new(section)))?;
    log::set_max_level(filter(section.level()));
    Ok(())
}

/// Changes `section`'s level and `log`'s maximum level together (the facade skips records
/// above its maximum before calling any logger).
pub fn set_level(section: &'static Section, level: Level) {
    section.set_level(level);
    log::set_max_level(filter(Some(level)));
}

fn filter(level: Option<Level>) -> log::LevelFilter {
    match level {
        None => log::LevelFilter::Off,
        Some(Level::Error) => log::LevelFilter::Error,
        Some(Level::Warn) => log::LevelFilter::Warn,
        Some(Level::Info) => log::LevelFilter::Info,
        Some(Level::Debug) => log::LevelFilter::Debug,
        Some(Level::Trace) => log::LevelFilter::Trace,
    }
}

fn level_of(l: log::Level) -> Level {
    match l {
        log::Level::Error => Level::Error,
        log::Level::Warn => Level::Warn,
        log::Level::Info => Level::Info,
        log::Level::Debug => Level::Debug,
        log::Level::Trace => Level::Trace,
    }
}

impl log::Log for RecorderLog {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        self.section.enabled(level_of(m.level()))
    }

    fn log(&self, r: &log::Record<'_>) {
        let level = level_of(r.level());
        if !self.section.enabled(level) {
            return;
        }
        // The callsite: file and target by address (static for the log macros), line, level.
        let file = r.file_static().unwrap_or("?");
        let target = r.target();
        let key = [
            file.as_ptr() as usize,
            target.as_ptr() as usize ^ target.len().rotate_left(48),
            r.line().unwrap_or(0) as usize | (level as usize) << 32,
        ];
        let site = crate::callsites::site(key, || {
            let section: &'static Section = Box::leak(Box::new(Section::new(
                Box::leak(target.to_owned().into_boxed_str()),
                level,
            )));
            Site::new(section, level, file, r.line().unwrap_or(0), "{}")
        });
        let mut enc = Encoder::new();
        match r.args().as_str() {
            Some(s) => enc.put_str(s),
            None => {
                let mut b = Short::new();
                let _ = write!(b, "{}", r.args());
                enc.put_str(b.as_str());
            }
        }
        crate::write(site, &enc);
    }

    fn flush(&self) {}
}
