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
//! taking the next LSN. A *committer* takes the whole buffer (swapping in an empty one: the next
//! batch fills while this one is written), writes it at the end of the active segment, calls
//! `fdatasync` once, publishes the highest LSN it made durable, and wakes every waiter with one
//! futex call. The committer is whoever holds the *writer* (the active segment, behind a
//! mutex): a writer waiting for its record takes it if nobody holds it — so one writer alone
//! pays its own `fdatasync` and no hand-off to another thread — and a background thread takes
//! it for records nobody waits for (a full batch, the durability window, closing). Writers that
//! find it taken block on an event count; nobody spins.
//!
//! **Protocol.** Shared state: `pending` (buffer, next LSN; under its lock), the writer (under
//! its mutex), `durable` (every LSN ≤ it is on stable storage), `failed` (an I/O error
//! happened, or a commit panicked), three event counts — `work` (the background thread sleeps
//! on it), `synced` (waiters sleep on it), `appended` (a gathering committer sleeps on it) —
//! and the `gathering` flag.
//!
//! ```text
//! wait_durable(lsn): loop { v = synced.value()
//!                           if durable ≥ lsn: return Ok      if failed: return Err
//!                           if writer.try_lock(): commit(); unlock; synced.increment()
//!                           else: synced.wait(v) }
//! commit():          return if failed or nothing is pending
//!                    gather(); return if failed
//!                    take pending (under its lock); write it; fdatasync
//!                    on error: failed = true, synced.increment(), stop
//!                    durable = last LSN taken; rotate the segment if it is full
//! gather():          if fewer records are pending than threads waited for the last batch:
//!                    gathering = true; wait on `appended` until as many are pending, or half
//!                    a sync (moving average) has passed; gathering = false
//! background:        loop { v = work.value()
//!                           if pending is full, older than the window, or the log closes:
//!                               writer.lock(); commit(); unlock; synced.increment(); continue
//!                           exit if closing or failed
//!                           if no next segment is prepared: prepare one (zeros), stopping
//!                               when a commit is due; continue
//!                           work.wait(v, window deadline) }
//! append(r):         lock pending; frame r; unlock
//!                    work.increment() if the batch is now full, or (window mode) it was empty
//!                    appended.increment() if gathering
//! ```
//!
//! **No lost wake-up.** A waiter reads `synced`'s version *before* it checks `durable`,
//! `failed` and the writer's mutex. If its `try_lock` fails, another thread holds the writer,
//! and that thread increments `synced` only *after* it releases the writer: after the failed
//! `try_lock` read the locked mutex, so after the waiter's read of the version. The waiter's
//! wait then returns at once if it comes late, and the waiter tries again. `durable` and
//! `failed` are stored before the increment (Release); the waiter loads them after its version
//! read (Acquire). The background thread reads `work`'s version before it looks at `pending`,
//! and an appender changes `pending` before it increments `work`: the same argument. A
//! gathering committer is not woken by a rule of this kind (an appender may read `gathering`
//! just before it is set); a signal it misses costs at most its deadline, half a sync. The
//! loom model (`loom_models.rs`) checks this with two writers and the background thread.
//!
//! **Durability.** A committer publishes `durable = L` only after `fdatasync` returned success
//! for a write that ended with record `L`; batches are written in LSN order, one committer at a
//! time, and nothing is written after a failure: so every record ≤ `L` was synced. A record is
//! acknowledged (`append_durable`, `wait_durable` or `flush` returns `Ok`) only when `durable`
//! reaches it. Recovery (see [`mod@format`]) reads the last segment up to the first torn or
//! damaged record, or to a frame of zeros (the end of the data in a segment written or
//! allocated ahead), cuts anything after that, writes again and syncs what it keeps, and syncs
//! the directory; a last segment with no valid header and nothing but zeros after it (its
//! creation never completed, so it holds no record) is removed and the one before it goes on.
//! Earlier segments were synced whole before the next one was begun.
//!
//! **Errors.** A failed write or sync marks the log failed: every waiter and every later call
//! gets [`Error`] with the cause, and nothing is retried — after a failed `fsync` Linux may have
//! dropped the dirty pages, and a second `fsync` would report success for data that is gone
//! ("fsyncgate"). Reopening the log recovers from what is on the disk.
//!
//! # Durability modes
//!
//! [`Durability::Always`] (the default, the seed's "always sync"): records reach the disk when
//! some writer asks (`append_durable`, `flush`) or when `batch_bytes` are pending; every
//! acknowledged record survives. [`Durability::Within`]`(w)`: in addition, the background
//! thread syncs whatever is pending at most `w` after it was appended, so a crash loses at most
//! the records of the last `w` (plus the time of one write and sync) that nobody waited for.

// The README's examples are compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

use std::fmt;
use std::io;
use std::path::Path;
use std::sync::atomic::Ordering::*;
use std::sync::Arc;

use std::time::{Duration, Instant};
use sync::{AtomicBool, AtomicU64, Mutex, MutexGuard};

use spindle_sync::EventCount;

mod commit;
pub mod crc;
pub mod format;
pub mod inspect;
mod iter;
#[cfg(all(test, loom))]
mod loom_models;
#[cfg(feature = "openraft")]
pub mod raft;
mod recover;
pub mod storage;
mod sync;

use format::{FRAME, HEADER};
pub use iter::Iter;
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
    /// The first segment of a new log is written with zeros when it is created, and the
    /// background thread writes the next segment with zeros ahead of time, so that records
    /// written into them change no file-system metadata (an `fdatasync` then writes the data
    /// alone; into blocks only allocated, each sync also commits their conversion). A rotation
    /// that finds no segment prepared allocates one with `fallocate` (where the file system
    /// can). Default true; false allocates every segment when it is begun.
    pub prepare: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            durability: Durability::Always,
            segment_bytes: 64 << 20,
            max_record: 16 << 20,
            batch_bytes: 4 << 20,
            prepare: true,
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

    pub(crate) fn io(what: impl fmt::Display, e: io::Error) -> Error {
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
    /// The log holds records `first_lsn ..= last_lsn` (none if `first_lsn > last_lsn`; the next
    /// append gets `last_lsn + 1`).
    pub first_lsn: Lsn,
    /// See `first_lsn`.
    pub last_lsn: Lsn,
    /// Bytes cut from the end of the last segment's data: the torn tail of writes that never
    /// completed (never an acknowledged record).
    pub dropped_bytes: u64,
    /// Why the scan stopped there, if it cut anything.
    pub dropped_reason: Option<String>,
    /// Segment files removed because their creation never completed (no header; no records).
    pub removed_segments: Vec<String>,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Segment {
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
    /// The active segment; whoever holds it is the committer.
    io: Mutex<commit::Writer>,
    durable: AtomicU64,
    failed: AtomicBool,
    failure: Mutex<Option<String>>,
    closing: AtomicBool,
    work: EventCount,
    synced: EventCount,
    segments: Mutex<Vec<Segment>>,
    /// Held by `truncate_before`.
    truncating: Mutex<()>,
    /// Threads in `wait_durable`.
    in_wait: AtomicU64,
    /// How many records the next commit waits for, and a moving average of a batch's write and
    /// sync (ns): how long it waits at most (see `commit::gather`).
    last_batch: AtomicU64,
    sync_ns: AtomicU64,
    /// Set while a committer gathers; appenders then signal `appended`.
    gathering: AtomicBool,
    appended: EventCount,
    /// The next segment, written with zeros ahead of time by the background thread.
    prepared: Mutex<Option<Box<dyn StorageFile>>>,
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
    committer: Option<sync::JoinHandle<()>>,
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
        if options.max_record > u32::MAX as usize - FRAME
            || options.segment_bytes < HEADER as u64
            || options.segment_bytes > 1 << 32
            || options.batch_bytes == 0
            || options.batch_bytes > usize::MAX / 4
        {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                "max_record must be below 4 GiB, segment_bytes from 32 bytes to 4 GiB, batch_bytes \
                 at least 1 and below usize::MAX / 4",
            ));
        }
        storage
            .lock()
            .map_err(|e| Error::io(format!("cannot take {}", storage.describe()), e))?;
        let recover::Recovered {
            segments,
            writer,
            recovery,
        } = recover::recover(&*storage, options.segment_bytes, options.prepare)?;
        let next = recovery.last_lsn + 1;
        let shared = Arc::new(Shared {
            storage,
            options,
            pending: Mutex::new(Pending {
                bytes: Vec::new(),
                next,
                first: next,
                since: None,
            }),
            io: Mutex::new(writer),
            durable: AtomicU64::new(next - 1),
            failed: AtomicBool::new(false),
            failure: Mutex::new(None),
            closing: AtomicBool::new(false),
            work: EventCount::new(),
            synced: EventCount::new(),
            segments: Mutex::new(segments),
            truncating: Mutex::new(()),
            in_wait: AtomicU64::new(0),
            last_batch: AtomicU64::new(0),
            sync_ns: AtomicU64::new(0),
            gathering: AtomicBool::new(false),
            appended: EventCount::new(),
            prepared: Mutex::new(None),
        });
        let s = Arc::clone(&shared);
        let committer = sync::spawn("spindle-wal", move || commit::background(&s))
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
        if s.gathering.load(SeqCst) {
            s.appended.increment();
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
        // Counted while here: a committer waits for this many records (see `commit::gather`).
        struct Waiting<'a>(&'a AtomicU64);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Relaxed);
            }
        }
        s.in_wait.fetch_add(1, Relaxed);
        let _waiting = Waiting(&s.in_wait);
        // See the protocol in the crate's documentation.
        loop {
            let v = s.synced.value();
            if s.durable.load(Acquire) >= lsn {
                return Ok(());
            }
            if s.failed.load(Acquire) {
                return Err(s.failed_error());
            }
            if !commit::try_lead(s) {
                let _ = s.synced.wait(v, None);
            }
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
        let lsn = lsn.max(1);
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
            from: lsn,
            end,
            bytes: Vec::new(),
            at: 0,
            lsn: 0,
            loaded: false,
        })
    }

    /// Removes the segments that hold only records before `lsn` (a checkpoint covers them).
    /// The active segment is never removed.
    ///
    /// Oldest first, each removal synced before the next: a crash leaves the log whole, with
    /// some of those segments still there. A reader of a removed segment ([`iter_from`]
    /// meanwhile) gets an error.
    ///
    /// [`iter_from`]: Self::iter_from
    pub fn truncate_before(&self, lsn: Lsn) -> Result<(), Error> {
        let s = &self.shared;
        let _one_at_a_time = lock(&s.truncating);
        loop {
            let oldest = {
                let segments = lock(&s.segments);
                match segments.get(1) {
                    Some(next) if next.first_lsn <= lsn => segments[0].number,
                    _ => return Ok(()),
                }
            };
            let name = format::segment_name(oldest);
            // NotFound: removed by an earlier call whose directory sync failed.
            match s.storage.remove(&name) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    return Err(Error::io(format!("cannot remove {name}"), e))
                }
                _ => {}
            }
            s.storage
                .sync_dir()
                .map_err(|e| Error::io(format!("cannot remove {name}"), e))?;
            lock(&s.segments).remove(0);
        }
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
