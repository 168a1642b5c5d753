//! Committing: whoever holds the writer (a waiting appender, or the background thread) takes
//! everything pending, writes it at the end of the active segment, syncs it once, and
//! publishes it durable. See the protocol in the crate's documentation.

use std::sync::atomic::Ordering::*;
use std::time::Instant;

use spindle_sync::Deadline;

use crate::format::{self, HEADER};
use crate::storage::{Storage, StorageFile};
use crate::{lock, Durability, Error, Lsn, Segment, Shared};

/// The active segment: held by one committer at a time (the lock is the committer's role).
pub(crate) struct Writer {
    pub(crate) active: Box<dyn StorageFile>,
    /// Where the next byte goes.
    pub(crate) offset: u64,
    /// An empty buffer with capacity, swapped for the pending one.
    pub(crate) spare: Vec<u8>,
}

/// Waits, a little, for the writers of the last batch to append again before a commit: when
/// more threads waited for the last batch than records are pending now, until as many are, or
/// half the time a write and sync took lately. Writers in a loop thus share each sync
/// (otherwise the first one back would start the next sync alone, and the writers would split
/// into two groups taking turns: half the records per sync). One writer never waits.
fn gather(s: &Shared) {
    // loom cannot model time (its timed waits return at once), and gathering only delays a
    // commit: the model leaves it out.
    if cfg!(loom) {
        return;
    }
    let target = s.last_batch.load(Relaxed);
    let limit = s.sync_ns.load(Relaxed) / 2;
    if target <= 1 || limit == 0 {
        return;
    }
    let deadline = Deadline::after(std::time::Duration::from_nanos(limit));
    // Appenders signal `appended` while this is set (read after they unlock `pending`; a
    // signal missed costs at most the deadline).
    s.gathering.store(true, SeqCst);
    loop {
        let v = s.appended.value();
        let pending = {
            let p = lock(&s.pending);
            p.next - p.first
        };
        if pending >= target || deadline.has_passed() {
            break;
        }
        let _ = s.appended.wait(v, Some(deadline));
    }
    s.gathering.store(false, SeqCst);
}

/// Fails the log (waking every waiter) if dropped while its thread panics.
struct FailOnPanic<'a>(&'a Shared, &'static str);

impl Drop for FailOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.fail(&Error::new(crate::ErrorKind::Io, self.1));
        }
    }
}

/// Commits everything pending (nothing if the log failed). The caller holds the writer and
/// increments `synced` after releasing it.
pub(crate) fn commit(s: &Shared, w: &mut Writer) {
    // A panic from here on (a `Storage` of the user's) fails the log: the batch taken would
    // otherwise be lost while later batches are acknowledged after it.
    let _unwind = FailOnPanic(s, "a commit panicked (in the storage?)");
    if s.failed.load(Acquire) || lock(&s.pending).bytes.is_empty() {
        return;
    }
    gather(s);
    if s.failed.load(Acquire) {
        return;
    }
    let (mut batch, last) = {
        let mut p = lock(&s.pending);
        if p.bytes.is_empty() {
            return;
        }
        std::mem::swap(&mut p.bytes, &mut w.spare);
        p.first = p.next;
        p.since = None;
        (std::mem::take(&mut w.spare), p.next - 1)
    };
    let began = Instant::now();
    let result = w
        .active
        .write_all_at(&batch, w.offset)
        .and_then(|()| w.active.sync_data())
        .map_err(|e| Error::io(format!("cannot write and sync {}", s.storage.describe()), e));
    if let Err(e) = result {
        s.fail(&e);
        return;
    }
    w.offset += batch.len() as u64;
    s.durable.store(last, Release);
    // The threads waiting now are released by this commit; in a loop, they come back.
    s.last_batch.store(s.in_wait.load(Relaxed), Relaxed);
    // A moving average of what a write and sync take (for `gather`).
    let took = began.elapsed().as_nanos().min(u128::from(u32::MAX)) as u64;
    let old = s.sync_ns.load(Relaxed);
    s.sync_ns
        .store(if old == 0 { took } else { (7 * old + took) / 8 }, Relaxed);
    batch.clear();
    w.spare = batch;
    if w.offset >= s.options.segment_bytes {
        match rotate(s, w, last + 1) {
            Ok(f) => {
                w.active = f;
                w.offset = HEADER as u64;
            }
            Err(e) => s.fail(&e),
        }
    }
}

/// Commits if no one else is committing: true if it did. Wakes the waiters after.
pub(crate) fn try_lead(s: &Shared) -> bool {
    let mut w = match s.io.try_lock() {
        Ok(w) => w,
        // A commit panicked (and failed the log): nothing more is written.
        Err(std::sync::TryLockError::Poisoned(_)) => {
            s.fail(&Error::new(crate::ErrorKind::Io, "a commit panicked"));
            return true;
        }
        Err(std::sync::TryLockError::WouldBlock) => return false,
    };
    commit(s, &mut w);
    drop(w);
    s.synced.increment();
    true
}

/// The background committer: commits what nobody waits for — a full batch, records older
/// than the durability window, what is pending when the log closes.
pub(crate) fn background(s: &Shared) {
    // A panic here must not leave waiters asleep: it fails the log.
    let _guard = FailOnPanic(s, "the committer thread panicked");
    let mut retry_at: Option<Instant> = None;
    loop {
        let seen = s.work.value();
        let closing = s.closing.load(Acquire);
        let (due, wake_at) = {
            let p = lock(&s.pending);
            let window = match (s.options.durability, p.since) {
                (Durability::Within(w), Some(t)) => t.checked_add(w),
                _ => None,
            };
            let due = !p.bytes.is_empty()
                && (p.bytes.len() >= s.options.batch_bytes
                    || window.is_some_and(|t| t <= Instant::now())
                    || closing);
            (due, window)
        };
        if due && !s.failed.load(Acquire) {
            match s.io.lock() {
                Ok(mut w) => commit(s, &mut w),
                Err(_) => s.fail(&Error::new(crate::ErrorKind::Io, "a commit panicked")),
            }
            s.synced.increment();
            continue;
        }
        if closing || s.failed.load(Acquire) {
            return;
        }
        if s.options.prepare
            && retry_at.is_none_or(|t| t <= Instant::now())
            && lock(&s.prepared).is_none()
        {
            // Failing to prepare is not a failure of the log (rotation falls back to
            // allocating); it is tried again a second later, not at once.
            retry_at = match prepare(s) {
                Ok(()) => None,
                Err(_) => {
                    let _ = s.storage.remove(PREPARED);
                    Some(Instant::now() + std::time::Duration::from_secs(1))
                }
            };
            continue;
        }
        let wake_at = match (wake_at, retry_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let deadline =
            wake_at.map(|t| Deadline::after(t.saturating_duration_since(Instant::now())));
        let _ = s.work.wait(seen, deadline);
    }
}

/// Begins the segment after the last one, whose first record will be `first_lsn`: the one
/// the background thread prepared, if it is ready (then asks it for the next), else a new one
/// allocated with `fallocate`.
fn rotate(s: &Shared, w: &Writer, first_lsn: Lsn) -> Result<Box<dyn StorageFile>, Error> {
    let _ = w;
    let last = lock(&s.segments).last().map_or(0, |g| g.number);
    let number = last
        .checked_add(1)
        .ok_or_else(|| Error::new(crate::ErrorKind::InvalidInput, "segment numbers ran out"))?;
    // The slot stays locked until the prepared file has its name: the background thread
    // holds it while it prepares (then this allocates instead of waiting).
    let mut slot = match s.prepared.try_lock() {
        Ok(g) => Some(g),
        Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    };
    let prepared = slot.as_mut().and_then(|g| g.take());
    let f = match prepared {
        Some(f) => {
            let name = format::segment_name(number);
            let err = |what: &str, e| Error::io(format!("cannot {what} {name}"), e);
            f.write_all_at(&format::header(number, first_lsn), 0)
                .and_then(|()| f.sync_data())
                .map_err(|e| err("write the header of", e))?;
            s.storage
                .rename(PREPARED, &name)
                .and_then(|()| s.storage.sync_dir())
                .map_err(|e| err("rename the prepared segment to", e))?;
            drop(slot);
            s.work.increment(); // prepare the next one
            f
        }
        None => {
            drop(slot);
            create_segment(
                &*s.storage,
                number,
                first_lsn,
                s.options.segment_bytes,
                false,
            )?
        }
    };
    lock(&s.segments).push(Segment { number, first_lsn });
    Ok(f)
}

/// Writes zeros into `f` from `from` to `to`, a MiB at a time.
fn write_zeros(f: &(dyn StorageFile + 'static), from: u64, to: u64) -> std::io::Result<()> {
    let zeros = vec![0u8; 1 << 20];
    let mut at = from;
    while at < to {
        let n = (to - at).min(zeros.len() as u64);
        f.write_all_at(&zeros[..n as usize], at)?;
        at += n;
    }
    Ok(())
}

/// The name of the next segment while it is prepared (zeros, no header yet). Recovery removes
/// it: it holds no record.
pub(crate) const PREPARED: &str = "next.wal.tmp";

/// Prepares the next segment if none is: a file of `segment_bytes` zeros, synced, so that the
/// records written into it later change no metadata (their blocks exist and are written).
fn prepare(s: &Shared) -> Result<(), Error> {
    // Held throughout: a rotation meanwhile allocates its segment instead.
    let mut slot = lock(&s.prepared);
    if slot.is_some() {
        return Ok(());
    }
    let err = |what: &str, e| Error::io(format!("cannot {what} the next segment"), e);
    let _ = s.storage.remove(PREPARED);
    let f = s.storage.create(PREPARED).map_err(|e| err("create", e))?;
    // Stops (to be tried again later) when the background thread has a commit to do, so that
    // the durability window holds, or the log closes.
    let busy = || {
        if s.closing.load(Acquire) || s.failed.load(Acquire) {
            return true;
        }
        let p = lock(&s.pending);
        p.bytes.len() >= s.options.batch_bytes
            || match (s.options.durability, p.since) {
                (crate::Durability::Within(w), Some(t)) => t.elapsed() >= w / 2,
                _ => false,
            }
    };
    let mut at = 0;
    let zeros = vec![0u8; 1 << 20];
    while at < s.options.segment_bytes {
        if busy() {
            return Ok(()); // the next try (or open) removes it
        }
        let n = (s.options.segment_bytes - at).min(zeros.len() as u64);
        f.write_all_at(&zeros[..n as usize], at)
            .map_err(|e| err("write", e))?;
        at += n;
    }
    f.sync_data().map_err(|e| err("sync", e))?;
    *slot = Some(f);
    Ok(())
}

/// Creates segment `number` of `bytes`, written with zeros if `zero` (records written into it
/// then change no metadata), else allocated with `fallocate` (quicker to create; each sync
/// also commits the conversion of the blocks it wrote), with its header synced, and its
/// directory entry, before any record goes into it.
pub(crate) fn create_segment(
    storage: &dyn Storage,
    number: u64,
    first_lsn: Lsn,
    bytes: u64,
    zero: bool,
) -> Result<Box<dyn StorageFile>, Error> {
    let name = format::segment_name(number);
    let err = |what: &str, e| Error::io(format!("cannot {what} {name}"), e);
    let f = storage.create(&name).map_err(|e| err("create", e))?;
    f.write_all_at(&format::header(number, first_lsn), 0)
        .map_err(|e| err("write", e))?;
    if zero {
        write_zeros(&*f, HEADER as u64, bytes).map_err(|e| err("write zeros into", e))?;
    } else {
        f.allocate(bytes).map_err(|e| err("allocate", e))?;
    }
    f.sync_data().map_err(|e| err("sync", e))?;
    storage
        .sync_dir()
        .map_err(|e| err("sync the directory of", e))?;
    Ok(f)
}
