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

/// A recording read into memory (a copy: the file may change or shrink under a reader without
/// harm, which a mapping would turn into a `SIGBUS`).
pub struct Recording {
    view: View,
    /// The file's bytes, in 8-byte words so that the view's atomics are aligned.
    _words: Vec<u64>,
}

// SAFETY: the view points into `_words`, which the Recording owns and never changes.
unsafe impl Send for Recording {}

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
    /// Reads `path` and checks its header.
    pub fn open(path: impl AsRef<Path>) -> Result<Recording, ReadError> {
        let mut file = std::fs::File::open(path.as_ref())?;
        // A recording is a file, or comes through a pipe (`<(zcat rec.gz)`); a device
        // (`/dev/zero`) would be read until memory ran out.
        let kind = file.metadata()?.file_type();
        if !(kind.is_file() || std::os::unix::fs::FileTypeExt::is_fifo(&kind)) {
            return Err(ReadError::Io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a regular file or a pipe (a recording is a file)",
            )));
        }
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut file, &mut bytes)?;
        let len = bytes.len();
        let mut words = vec![0u64; len.div_ceil(8)];
        for (w, chunk) in words.iter_mut().zip(bytes.chunks(8)) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            *w = u64::from_le_bytes(b);
        }
        // SAFETY: `words` holds `len` readable bytes, 8-byte aligned, owned by the Recording
        // built below and never changed; the view only loads from them.
        let view =
            unsafe { View::open(words.as_mut_ptr().cast(), len) }.map_err(ReadError::Format)?;
        Ok(Recording {
            view,
            _words: words,
        })
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
