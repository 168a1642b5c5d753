//! `spindle-wal`: a write-ahead log whose writers share one `fdatasync` per batch (group
//! commit), that never loses a record it acknowledged — through crashes, torn writes and
//! failed syncs — and that refuses to go on after an I/O error instead of pretending.
//!
//! ```no_run
//! use spindle_wal::{Options, Wal};
//! let wal = Wal::open("/var/lib/app/wal", Options::default())?;
//! let lsn = wal.append_durable(b"set x 1")?; // returns once the record is on stable storage
//! for record in wal.iter_from(1)? {
//!     let (lsn, bytes) = record?;
//!     println!("{lsn}: {} bytes", bytes.len());
//! }
//! wal.truncate_before(lsn)?; // a checkpoint covers everything before `lsn`
//! # Ok::<(), spindle_wal::Error>(())
//! ```
//!
//! # Group commit
//!
//! Appenders copy their framed record into a shared buffer under a lock held only for the copy,
//! taking the next LSN. One committer thread takes the whole buffer (swapping in an empty one:
//! the next batch fills while this one is written), writes it at the end of the active segment,
//! calls `fdatasync` once, publishes the highest LSN it made durable, and wakes every waiter of
//! the batch with one futex call. Writers that need durability block on an event count; nobody
//! spins.
//!
//! **Protocol.** Shared state: `pending` (buffer, next LSN; under the lock), `requested` (the
//! highest LSN a writer waits for), `durable` (every LSN ≤ it is on stable storage), `failed`
//! (an I/O error happened), and two event counts: `work` (committer sleeps on it) and `synced`
//! (waiters sleep on it).
//!
//! ```text
//! append_durable(r):  lsn = append(r)                           // lock, frame, unlock
//!                     requested.fetch_max(lsn); work.increment()
//!                     loop { v = synced.value()
//!                            if durable ≥ lsn: return Ok      if failed: return Err
//!                            synced.wait(v) }
//! committer:          loop { v = work.value()
//!                            if pending has a record ≤ requested, or enough bytes, or is older
//!                               than the window, or the log closes: take it (under the lock)
//!                            else: work.wait(v, window deadline); continue
//!                            write it; fdatasync        // on error: failed = true
//!                            durable = last LSN taken; synced.increment() }
//! ```
//!
//! **No lost wake-up.** The committer reads `work`'s version *before* it looks at `pending` and
//! `requested`; a writer changes them *before* it increments `work`. If the committer saw the
//! old state, the increment comes after its read of the version, so its wait returns at once.
//! Waiters do the same with `synced`: `durable` and `failed` are stored before the increment,
//! and a waiter reads the version before it checks them (event counts order the increment
//! after the stores with Release, the version read before the checks with Acquire).
//!
//! **Durability.** The committer publishes `durable = L` only after `fdatasync` returned
//! success for a write that ended with record `L`, and the batches are written in LSN order
//! with nothing after a failure: so every record ≤ `L` was synced. A record is acknowledged
//! (`append_durable` returns `Ok`, or `flush` does) only when `durable` reaches it. Recovery
//! (see [`mod@format`]) keeps every record up to the first torn or damaged one, which can only come
//! after the last synced byte, so it keeps every acknowledged record.
//!
//! **Errors.** A failed write or sync marks the log failed: the committer stops, every waiter
//! and every later call gets [`Error`] with the cause, and nothing is retried — after a failed
//! `fsync` Linux may have dropped the dirty pages, and a second `fsync` would report success
//! for data that is gone ("fsyncgate"). Reopening the log recovers from what is on the disk.
//!
//! # Durability modes
//!
//! [`Durability::Always`] (the default, the seed's "always sync"): records reach the disk when
//! some writer asks (`append_durable`, `flush`) or when `batch_bytes` are pending; every
//! acknowledged record survives. [`Durability::Within`]`(w)`: in addition, the committer syncs
//! whatever is pending at most `w` after it was appended, so a crash loses at most the records
//! of the last `w` (plus the time of one write and sync) that nobody waited for.

// The README's examples are compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

use std::fmt;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use spindle_sync::{Deadline, EventCount};

pub mod crc;
pub mod format;
pub mod storage;

use format::{Next, FRAME, HEADER};
pub use storage::{Dir, Storage, StorageFile};

/// A record's number: 1, 2, 3, … in append order, with no gap.
pub type Lsn = u64;

/// When records that nobody waits for reach the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// When a writer asks for it, or `batch_bytes` are pending.
    Always,
    /// Also at most this long after they were appended.
    Within(Duration),
}

/// How a log is opened.
#[derive(Clone, Debug)]
pub struct Options {
    /// See [`Durability`]. Default: `Always`.
    pub durability: Durability,
    /// A segment is closed and the next one begun once it holds this many bytes. Default 64 MiB.
    pub segment_bytes: u64,
    /// The largest record accepted. Default 16 MiB.
    pub max_record: usize,
    /// The committer writes once this many bytes are pending, even if nobody waits. Default
    /// 4 MiB.
    pub batch_bytes: usize,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            durability: Durability::Always,
            segment_bytes: 64 << 20,
            max_record: 16 << 20,
            batch_bytes: 4 << 20,
        }
    }
}

/// What went wrong.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    source: Option<io::Error>,
}

/// The kinds of [`Error`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// An I/O call failed (the message names it and the file).
    Io,
    /// The log refuses appends after an earlier write or sync error; reopen it to recover.
    Failed,
    /// The directory holds something that is not this log's (or a damaged segment header).
    NotAWal,
    /// A segment was written by a later version of the format.
    NewerVersion,
    /// A record is larger than `Options::max_record`, or an argument is out of range.
    InvalidInput,
}

impl Error {
    fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error {
            kind,
            message: message.into(),
            source: None,
        }
    }

    fn io(what: impl fmt::Display, e: io::Error) -> Error {
        Error {
            kind: ErrorKind::Io,
            message: format!("{what}: {e}"),
            source: Some(e),
        }
    }

    /// Its kind.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_ref().map(|e| e as _)
    }
}

impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        let kind = match e.kind {
            ErrorKind::InvalidInput => io::ErrorKind::InvalidInput,
            ErrorKind::NotAWal | ErrorKind::NewerVersion => io::ErrorKind::InvalidData,
            _ => e
                .source
                .as_ref()
                .map_or(io::ErrorKind::Other, io::Error::kind),
        };
        io::Error::new(kind, e.message)
    }
}

/// What opening the log found and repaired.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Segments found.
    pub segments: usize,
    /// The LSN of the first record kept (0: none).
    pub first_lsn: Lsn,
    /// The LSN of the last record kept (0: none).
    pub last_lsn: Lsn,
    /// Bytes cut from the end of the last segment: the torn tail of writes that never
    /// completed (never an acknowledged record).
    pub dropped_bytes: u64,
    /// Why the scan stopped there, if it cut anything.
    pub dropped_reason: Option<String>,
    /// Segment files removed because their creation never completed (no header; no records).
    pub removed_segments: Vec<String>,
}

#[derive(Clone, Copy, Debug)]
struct Segment {
    number: u64,
    first_lsn: Lsn,
}

struct Pending {
    bytes: Vec<u8>,
    /// The LSN the next append gets.
    next: Lsn,
    /// The LSN of the first record in `bytes`.
    first: Lsn,
    /// When the first record in `bytes` was appended.
    since: Option<Instant>,
}

struct Shared {
    storage: Box<dyn Storage>,
    options: Options,
    pending: Mutex<Pending>,
    requested: AtomicU64,
    durable: AtomicU64,
    failed: AtomicBool,
    failure: Mutex<Option<String>>,
    closing: AtomicBool,
    work: EventCount,
    synced: EventCount,
    segments: Mutex<Vec<Segment>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    fn failed_error(&self) -> Error {
        let why = lock(&self.failure)
            .clone()
            .unwrap_or_else(|| "an earlier I/O error".into());
        Error::new(
            ErrorKind::Failed,
            format!("the log refuses appends after an I/O error ({why}); reopen it to recover"),
        )
    }

    fn fail(&self, e: &Error) {
        lock(&self.failure).get_or_insert_with(|| e.to_string());
        self.failed.store(true, Release);
        self.synced.increment();
    }
}

/// A write-ahead log in a directory (see the crate's documentation).
pub struct Wal {
    shared: Arc<Shared>,
    committer: Option<std::thread::JoinHandle<()>>,
    recovery: Recovery,
}

impl Wal {
    /// Opens the log in directory `dir` (created if missing), recovering what is there.
    pub fn open(dir: impl AsRef<Path>, options: Options) -> Result<Wal, Error> {
        let dir = dir.as_ref();
        let storage = Dir::new(dir).map_err(|e| Error::io(dir.display(), e))?;
        Wal::open_on(Box::new(storage), options)
    }

    /// Opens the log on `storage` (a [`Dir`], or a faulty disk in tests).
    pub fn open_on(storage: Box<dyn Storage>, options: Options) -> Result<Wal, Error> {
        if options.max_record > u32::MAX as usize - FRAME || options.segment_bytes < HEADER as u64 {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                "max_record must be below 4 GiB and segment_bytes at least 32",
            ));
        }
        let Recovered {
            segments,
            active,
            offset,
            recovery,
        } = recover(&*storage)?;
        let next = recovery
            .last_lsn
            .max(segments.last().map_or(1, |s| s.first_lsn) - 1)
            + 1;
        let shared = Arc::new(Shared {
            storage,
            options,
            pending: Mutex::new(Pending {
                bytes: Vec::new(),
                next,
                first: next,
                since: None,
            }),
            requested: AtomicU64::new(0),
            durable: AtomicU64::new(next - 1),
            failed: AtomicBool::new(false),
            failure: Mutex::new(None),
            closing: AtomicBool::new(false),
            work: EventCount::new(),
            synced: EventCount::new(),
            segments: Mutex::new(segments),
        });
        let s = Arc::clone(&shared);
        let committer = std::thread::Builder::new()
            .name("spindle-wal".into())
            .spawn(move || commit_loop(&s, active, offset))
            .map_err(|e| Error::io("cannot start the committer thread", e))?;
        Ok(Wal {
            shared,
            committer: Some(committer),
            recovery,
        })
    }

    /// What opening found and repaired.
    pub fn recovery(&self) -> &Recovery {
        &self.recovery
    }

    /// Appends a record; returns its LSN at once. It reaches the disk with the next batch
    /// (see [`Durability`]); [`wait_durable`](Self::wait_durable) waits for that. When more
    /// than `2 × batch_bytes` are pending (appends outrun the disk), it waits for its record
    /// to be durable before it returns.
    pub fn append(&self, record: &[u8]) -> Result<Lsn, Error> {
        let s = &self.shared;
        if record.len() > s.options.max_record {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "a record of {} bytes is larger than max_record ({})",
                    record.len(),
                    s.options.max_record
                ),
            ));
        }
        if s.failed.load(Acquire) {
            return Err(s.failed_error());
        }
        let (lsn, signal, over) = {
            let mut p = lock(&s.pending);
            let lsn = p.next;
            p.next += 1;
            let was_empty = p.bytes.is_empty();
            if was_empty {
                p.first = lsn;
                p.since = Some(Instant::now());
            }
            format::frame(&mut p.bytes, lsn, record);
            let timed = was_empty && matches!(s.options.durability, Durability::Within(_));
            let full = p.bytes.len() >= s.options.batch_bytes;
            (
                lsn,
                timed || full,
                p.bytes.len() >= 2 * s.options.batch_bytes,
            )
        };
        if signal {
            s.work.increment();
        }
        if over {
            // Back-pressure: an appender that outruns the disk by two batches waits for its
            // record, so the buffer stays bounded. The record was appended whatever the wait
            // gives: a failure shows at the next call.
            let _ = self.wait_durable(lsn);
        }
        Ok(lsn)
    }

    /// Appends a record and returns its LSN once it is on stable storage.
    pub fn append_durable(&self, record: &[u8]) -> Result<Lsn, Error> {
        let lsn = self.append(record)?;
        self.wait_durable(lsn)?;
        Ok(lsn)
    }

    /// Returns once every record up to `lsn` is on stable storage.
    pub fn wait_durable(&self, lsn: Lsn) -> Result<(), Error> {
        let s = &self.shared;
        if s.durable.load(Acquire) >= lsn {
            return Ok(());
        }
        if lsn >= lock(&s.pending).next {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("LSN {lsn} was not appended yet"),
            ));
        }
        if s.requested.fetch_max(lsn, AcqRel) < lsn {
            s.work.increment();
        }
        loop {
            let v = s.synced.value();
            if s.durable.load(Acquire) >= lsn {
                return Ok(());
            }
            if s.failed.load(Acquire) {
                return Err(s.failed_error());
            }
            let _ = s.synced.wait(v, None);
        }
    }

    /// Makes every record appended so far durable; returns the last one's LSN (0: none).
    pub fn flush(&self) -> Result<Lsn, Error> {
        let last = lock(&self.shared.pending).next - 1;
        if last > 0 {
            self.wait_durable(last)?;
        }
        Ok(last)
    }

    /// The LSN of the last record appended (0: none).
    pub fn last_lsn(&self) -> Lsn {
        lock(&self.shared.pending).next - 1
    }

    /// Every record up to this LSN is on stable storage.
    pub fn durable_lsn(&self) -> Lsn {
        self.shared.durable.load(Acquire)
    }

    /// The durable records from `lsn` on, in order (records still being committed are left
    /// out: [`flush`](Self::flush) first to see every append). Reads a segment at a time.
    pub fn iter_from(&self, lsn: Lsn) -> Result<Iter<'_>, Error> {
        let end = self.durable_lsn();
        let segments = lock(&self.shared.segments).clone();
        let first = segments.first().map_or(1, |s| s.first_lsn);
        if lsn < first && lsn <= end {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("LSN {lsn} was truncated away: the log starts at {first}"),
            ));
        }
        let k = segments
            .iter()
            .rposition(|s| s.first_lsn <= lsn)
            .unwrap_or(0);
        Ok(Iter {
            storage: &*self.shared.storage,
            segments: segments[k..].to_vec(),
            from: lsn.max(1),
            end,
            bytes: Vec::new(),
            at: 0,
            lsn: 0,
        })
    }

    /// Removes the segments that hold only records before `lsn` (a checkpoint covers them).
    /// The active segment is never removed.
    pub fn truncate_before(&self, lsn: Lsn) -> Result<(), Error> {
        let s = &self.shared;
        let mut segments = lock(&s.segments);
        let mut removed = 0;
        while segments.len() > 1 && segments[1].first_lsn <= lsn {
            let name = format::segment_name(segments[0].number);
            s.storage
                .remove(&name)
                .map_err(|e| Error::io(format!("cannot remove {name}"), e))?;
            segments.remove(0);
            removed += 1;
        }
        if removed > 0 {
            s.storage.sync_dir().map_err(|e| {
                Error::io(format!("cannot sync directory {}", s.storage.describe()), e)
            })?;
        }
        Ok(())
    }
}

impl Drop for Wal {
    /// Commits what is pending (unless the log failed) and stops the committer.
    fn drop(&mut self) {
        self.shared.closing.store(true, Release);
        self.shared.work.increment();
        if let Some(c) = self.committer.take() {
            let _ = c.join();
        }
    }
}

/// Durable records, in order: `(lsn, bytes)`.
pub struct Iter<'a> {
    storage: &'a dyn Storage,
    segments: Vec<Segment>,
    from: Lsn,
    end: Lsn,
    bytes: Vec<u8>,
    at: usize,
    /// The LSN of the record at `at` (0: no segment loaded).
    lsn: Lsn,
}

impl Iterator for Iter<'_> {
    type Item = Result<(Lsn, Vec<u8>), Error>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.lsn > self.end || (self.lsn == 0 && self.segments.is_empty()) {
                return None;
            }
            if self.lsn == 0 {
                let seg = self.segments.remove(0);
                let name = format::segment_name(seg.number);
                let read = self
                    .storage
                    .open(&name)
                    .and_then(|f| f.read_all())
                    .map_err(|e| Error::io(format!("cannot read {name}"), e));
                match read {
                    Ok(b) => self.bytes = b,
                    Err(e) => {
                        self.segments.clear();
                        return Some(Err(e));
                    }
                }
                self.at = HEADER;
                self.lsn = seg.first_lsn;
                continue;
            }
            match format::next(&self.bytes, self.at, self.lsn) {
                Next::Record { lsn, payload, next } => {
                    self.at = next;
                    self.lsn += 1;
                    if lsn >= self.from {
                        return Some(Ok((lsn, self.bytes[payload].to_vec())));
                    }
                }
                Next::End => self.lsn = 0,
                Next::Bad(why) => {
                    self.segments.clear();
                    self.lsn = self.end + 1;
                    return Some(Err(Error::new(
                        ErrorKind::NotAWal,
                        format!("a durable record is damaged: {why}"),
                    )));
                }
            }
        }
    }
}

/// The committer: see the module's protocol. `active` is the open segment, `offset` where its
/// next byte goes.
fn commit_loop(s: &Shared, mut active: Box<dyn StorageFile>, mut offset: u64) {
    let mut spare = Vec::new();
    loop {
        let seen = s.work.value();
        let closing = s.closing.load(Acquire);
        let (batch, last, wake_at) = {
            let mut p = lock(&s.pending);
            let window = match (s.options.durability, p.since) {
                (Durability::Within(w), Some(t)) => Some(t + w),
                _ => None,
            };
            let due = !p.bytes.is_empty()
                && (s.requested.load(Acquire) >= p.first
                    || p.bytes.len() >= s.options.batch_bytes
                    || window.is_some_and(|t| t <= Instant::now())
                    || closing);
            if due {
                std::mem::swap(&mut p.bytes, &mut spare);
                p.first = p.next;
                p.since = None;
                (Some(std::mem::take(&mut spare)), p.next - 1, None)
            } else {
                (None, 0, window)
            }
        };
        let Some(mut batch) = batch else {
            if closing {
                return;
            }
            let deadline =
                wake_at.map(|t| Deadline::after(t.saturating_duration_since(Instant::now())));
            let _ = s.work.wait(seen, deadline);
            continue;
        };
        let result = active
            .write_all_at(&batch, offset)
            .and_then(|()| active.sync_data())
            .map_err(|e| Error::io(format!("cannot write and sync {}", s.storage.describe()), e));
        if let Err(e) = result {
            s.fail(&e);
            return;
        }
        offset += batch.len() as u64;
        s.durable.store(last, Release);
        s.synced.increment();
        batch.clear();
        spare = batch;
        if offset >= s.options.segment_bytes {
            match rotate(s, last + 1) {
                Ok(f) => {
                    active = f;
                    offset = HEADER as u64;
                }
                Err(e) => {
                    s.fail(&e);
                    return;
                }
            }
        }
    }
}

/// Begins the segment after the last one, whose first record will be `first_lsn`: its header
/// is synced, and its directory entry, before any record goes into it.
fn rotate(s: &Shared, first_lsn: Lsn) -> Result<Box<dyn StorageFile>, Error> {
    let number = lock(&s.segments).last().map_or(1, |g| g.number + 1);
    let f = create_segment(&*s.storage, number, first_lsn)?;
    lock(&s.segments).push(Segment { number, first_lsn });
    Ok(f)
}

fn create_segment(
    storage: &dyn Storage,
    number: u64,
    first_lsn: Lsn,
) -> Result<Box<dyn StorageFile>, Error> {
    let name = format::segment_name(number);
    let err = |what: &str, e| Error::io(format!("cannot {what} {name}"), e);
    let f = storage.create(&name).map_err(|e| err("create", e))?;
    f.write_all_at(&format::header(number, first_lsn), 0)
        .map_err(|e| err("write", e))?;
    f.sync_data().map_err(|e| err("sync", e))?;
    storage
        .sync_dir()
        .map_err(|e| err("sync the directory of", e))?;
    Ok(f)
}

/// What [`recover`] found: the segments, the active one and where its next byte goes.
struct Recovered {
    segments: Vec<Segment>,
    active: Box<dyn StorageFile>,
    offset: u64,
    recovery: Recovery,
}

/// Reads the directory: its segments (checked to follow each other), the active one opened
/// with its torn tail cut off, where its next byte goes, and what was found.
fn recover(storage: &dyn Storage) -> Result<Recovered, Error> {
    let names = storage
        .list()
        .map_err(|e| Error::io(format!("cannot list {}", storage.describe()), e))?;
    let mut numbers = Vec::new();
    for n in &names {
        match format::parse_segment_name(n) {
            Some(k) => numbers.push(k),
            None => {
                return Err(Error::new(
                    ErrorKind::NotAWal,
                    format!(
                        "{} holds {n:?}, which is not a segment of a spindle-wal log (a log needs \
                         a directory of its own)",
                        storage.describe()
                    ),
                ))
            }
        }
    }
    numbers.sort_unstable();
    let mut rec = Recovery::default();
    let mut segments: Vec<Segment> = Vec::new();
    for (i, &number) in numbers.iter().enumerate() {
        let name = format::segment_name(number);
        let f = storage
            .open(&name)
            .map_err(|e| Error::io(format!("cannot open {name}"), e))?;
        let mut header = vec![0u8; HEADER];
        let read = f.read_at(&mut header, 0).and_then(|n| Ok((n, f.size()?)));
        let (n, len) = read.map_err(|e| Error::io(format!("cannot read {name}"), e))?;
        header.truncate(n);
        match format::parse_header(&header, number) {
            Ok(first_lsn) => {
                if let Some(prev) = segments.last() {
                    if number != prev.number + 1 || first_lsn <= prev.first_lsn {
                        return Err(Error::new(
                            ErrorKind::NotAWal,
                            format!(
                                "{name} does not follow {}: segments are missing or damaged",
                                format::segment_name(prev.number)
                            ),
                        ));
                    }
                }
                segments.push(Segment { number, first_lsn });
            }
            Err(format::BadHeader::Newer(v)) => {
                return Err(Error::new(
                    ErrorKind::NewerVersion,
                    format!(
                        "{name} was written by a later spindle-wal (format version {v}; this one \
                         reads up to {})",
                        format::VERSION
                    ),
                ))
            }
            Err(_) if i + 1 == numbers.len() && len <= HEADER as u64 => {
                // The last segment, no longer than a header, without a valid one: its creation
                // never completed (records go in only after its header and directory entry
                // are synced, and there is no room for one anyway). Nothing is lost with it.
                storage
                    .remove(&name)
                    .and_then(|()| storage.sync_dir())
                    .map_err(|e| Error::io(format!("cannot remove {name}"), e))?;
                rec.removed_segments.push(name);
            }
            Err(format::BadHeader::NotWal) | Err(format::BadHeader::Short(_)) => {
                return Err(Error::new(
                    ErrorKind::NotAWal,
                    format!("{name} is not a spindle-wal segment (no header)"),
                ))
            }
            Err(format::BadHeader::Damaged(why)) => {
                return Err(Error::new(
                    ErrorKind::NotAWal,
                    format!("{name} is damaged: {why}"),
                ))
            }
        }
    }
    rec.segments = segments.len();
    rec.first_lsn = segments.first().map_or(0, |s| s.first_lsn);
    let Some(last) = segments.last().copied() else {
        let f = create_segment(storage, 1, 1)?;
        segments.push(Segment {
            number: 1,
            first_lsn: 1,
        });
        rec.segments = 1;
        return Ok(Recovered {
            segments,
            active: f,
            offset: HEADER as u64,
            recovery: rec,
        });
    };
    // Scan the last segment to its first torn or damaged record.
    let name = format::segment_name(last.number);
    let f = storage
        .open(&name)
        .map_err(|e| Error::io(format!("cannot open {name}"), e))?;
    let last_bytes = f
        .read_all()
        .map_err(|e| Error::io(format!("cannot read {name}"), e))?;
    let (mut at, mut lsn) = (HEADER, last.first_lsn);
    loop {
        match format::next(&last_bytes, at, lsn) {
            Next::Record { next, .. } => {
                at = next;
                lsn += 1;
            }
            Next::End => break,
            Next::Bad(why) => {
                rec.dropped_bytes = (last_bytes.len() - at) as u64;
                rec.dropped_reason = Some(why);
                break;
            }
        }
    }
    rec.last_lsn = lsn - 1;
    if rec.last_lsn < rec.first_lsn {
        rec.first_lsn = rec.last_lsn.min(rec.first_lsn);
    }
    // Make what is kept durable, even if nothing was cut: the records found may be in the page
    // cache only (the process died, the machine did not), and a record acknowledged after them
    // must not outlive them. They are written again, not only synced: after a failed fsync
    // Linux keeps serving from its cache pages it marked clean without writing them, and a
    // sync alone would not write them now either.
    if rec.dropped_bytes > 0 {
        f.set_len(at as u64)
            .map_err(|e| Error::io(format!("cannot cut the torn tail of {name}"), e))?;
    }
    // The directory too: a segment whose creation failed after its header was written may
    // have an entry that was never synced.
    f.write_all_at(&last_bytes[..at], 0)
        .and_then(|()| f.sync_data())
        .and_then(|()| storage.sync_dir())
        .map_err(|e| Error::io(format!("cannot rewrite and sync {name}"), e))?;
    Ok(Recovered {
        segments,
        active: f,
        offset: at as u64,
        recovery: rec,
    })
}
