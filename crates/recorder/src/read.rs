//! Reading a recording file, from another process: the file of a process that died (or still
//! runs), as `spindle recorder dump FILE` does.
//!
//! ```no_run
//! let rec = spindle_recorder::read::Recording::open("/tmp/app.rec")?;
//! let (records, skipped) = rec.records(1000);
//! for r in &records {
//!     print!("{}", r.line);
//! }
//! eprintln!("pid {}: {} records, {} slots skipped", rec.pid(), records.len(), skipped.slots);
//! # Ok::<(), spindle_recorder::read::ReadError>(())
//! ```

use std::path::Path;

use crate::dump::{walk, Line, Scratch, Skipped};
use crate::layout::{FormatError, View};
use crate::Level;

/// Why a recording could not be read.
#[derive(Debug)]
pub enum ReadError {
    /// The file could not be opened or mapped.
    Io(std::io::Error),
    /// The file is not a readable recording.
    Format(FormatError),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Io(e) => write!(f, "{e}"),
            ReadError::Format(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ReadError {}

impl From<std::io::Error> for ReadError {
    fn from(e: std::io::Error) -> ReadError {
        ReadError::Io(e)
    }
}

impl From<rustix::io::Errno> for ReadError {
    fn from(e: rustix::io::Errno) -> ReadError {
        ReadError::Io(e.into())
    }
}

/// A recording mapped read-only.
pub struct Recording {
    view: View,
    base: *mut std::ffi::c_void,
    len: usize,
}

// SAFETY: the mapping is private to this value and only read.
unsafe impl Send for Recording {}

impl Drop for Recording {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: `base` and `len` are the mapping `open` made, unmapped once.
            let _ = unsafe { rustix::mm::munmap(self.base, self.len) };
        }
    }
}

/// One record, formatted.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    /// Wall time, ns since the Unix epoch (from the record's TSC and the recording's anchor).
    pub time_ns: u64,
    /// The record's TSC reading.
    pub tsc: u64,
    /// Its number in its thread's ring (consecutive within a thread).
    pub seq: u64,
    /// The recording thread's id and name.
    pub tid: u32,
    /// The thread's name, if it had one.
    pub thread: String,
    /// The call site's level, `None` if its site is missing from the table.
    pub level: Option<Level>,
    /// The call site's section, file and line.
    pub section: String,
    /// Source file of the call site.
    pub file: String,
    /// Line of the call site.
    pub line_no: u32,
    /// The formatted message.
    pub message: String,
    /// The whole text line, as `dump` prints it (with its newline).
    pub line: String,
}

impl Recording {
    /// Maps `path` and checks its header.
    pub fn open(path: impl AsRef<Path>) -> Result<Recording, ReadError> {
        use rustix::fs::{Mode, OFlags};
        let fd = rustix::fs::open(
            path.as_ref(),
            OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let len = rustix::fs::fstat(&fd)?.st_size.max(0) as usize;
        if len == 0 {
            return Err(ReadError::Format(FormatError::TooShort(0)));
        }
        // SAFETY: a new private read-only mapping of the whole file, unmapped in Drop.
        let base = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                rustix::mm::ProtFlags::READ,
                rustix::mm::MapFlags::SHARED,
                &fd,
                0,
            )?
        };
        // SAFETY: the mapping is `len` readable bytes, page-aligned, owned by the Recording
        // built below (or unmapped here); the view only loads from it.
        match unsafe { View::open(base.cast(), len) } {
            Ok(view) => Ok(Recording { view, base, len }),
            Err(e) => {
                // SAFETY: the mapping made above, not used after this.
                let _ = unsafe { rustix::mm::munmap(base, len) };
                Err(ReadError::Format(e))
            }
        }
    }

    /// The process that made the recording.
    pub fn pid(&self) -> u32 {
        self.view.pid
    }

    /// Threads that found no ring free (their records were not kept).
    pub fn threads_without_a_ring(&self) -> u64 {
        self.view
            .no_ring_count()
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The last `last` records of every thread (fewer if a ring holds fewer), in time order,
    /// and what was skipped.
    pub fn records(&self, last: usize) -> (Vec<Record>, Skipped) {
        let mut scratch = Scratch::new(self.view.geometry.ring_count as usize);
        let mut out = Vec::new();
        let mut line = Box::new(Line::new());
        let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        let skipped = walk(&self.view, last as u64, &mut scratch, |r| {
            line.clear();
            r.format(&mut line);
            out.push(Record {
                time_ns: r.wall_ns,
                tsc: r.tsc,
                seq: r.seq,
                tid: r.tid,
                thread: s(r.thread),
                level: r.level,
                section: s(r.section),
                file: s(r.file),
                line_no: r.line,
                message: s(r.message),
                line: s(line.bytes()),
            });
        });
        (out, skipped)
    }
}
