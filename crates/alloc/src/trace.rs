//! Allocation traces: recording every call a program makes (through the preload library),
//! and the compact form the lab and `spindle alloc replay` play back.
//!
//! # Recording (inside the preloaded allocator, so it must not allocate)
//! With `SPINDLE_ALLOC_TRACE=FILE` in the environment, the first call opens `FILE.PID`, makes
//! it a sparse 4 GiB file and maps it shared. Each call takes the next record index with one
//! `fetch_add` on a counter in the file's header, then writes its 32-byte record there: the
//! index is the global order (a `free` on one thread of a block that another thread
//! allocated always comes later than its `malloc`). The kernel writes the pages back even
//! if the program crashes; a record whose thread died before writing it reads as zero and
//! is skipped. A child process that `fork`s without `exec` stops recording (its addresses
//! would alias its parent's); one that `exec`s records into its own `FILE.PID`.
//!
//! # The compact trace (`.spat`)
//! `SPAT1\n`, then one record per call: an op byte, then LEB128 varints — `malloc`:
//! id, size; `free`: id; `realloc`: old id, new id, size. Ids number live blocks in order
//! of allocation; a `free` of a block the trace never saw allocated is dropped. Replays are
//! single-stream: the lab runs one copy per thread.

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering::*};

/// An allocation call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    /// `malloc`, `calloc` and the aligned variants.
    Malloc = 1,
    /// `free`.
    Free = 2,
    /// `realloc`.
    Realloc = 3,
}

const OFF: u8 = 1;
const ON: u8 = 2;
static STATE: AtomicU8 = AtomicU8::new(0);
static BASE: AtomicUsize = AtomicUsize::new(0);
/// Records the raw file has room for (4 GiB of 32-byte records, less the header).
const RAW_CAPACITY: u64 = (1 << 27) - 2;
const RAW_MAGIC: u64 = u64::from_le_bytes(*b"SPRAW1\0\0");

#[repr(C)]
struct RawRecord {
    op: u32,
    tid: u32,
    size: u64,
    old: u64,
    new: u64,
}

/// Records one call if tracing is on (see the module documentation); a no-op otherwise.
/// Call it after an allocation returns, and before a free.
#[inline]
pub fn event(op: Op, size: usize, old: usize, new: usize) {
    finish(begin(), op, size, old, new);
}

/// Claims the next record for a call that is about to run (a `realloc`, which frees its old
/// block before it returns: its place in the order is its start); None when not tracing.
#[inline]
pub fn begin() -> Option<u64> {
    match STATE.load(Relaxed) {
        OFF => None,
        ON => claim(),
        _ => {
            start();
            (STATE.load(Relaxed) == ON).then(claim).flatten()
        }
    }
}

#[cold]
fn claim() -> Option<u64> {
    let base = BASE.load(Acquire);
    // SAFETY: the header's counter, in the shared mapping (32-byte aligned, page 0).
    let counter = unsafe { &*((base + 8) as *const AtomicU64) };
    let i = counter.fetch_add(1, Relaxed);
    (i < RAW_CAPACITY).then_some(i)
}

/// Writes the record claimed by [`begin`].
#[inline]
pub fn finish(slot: Option<u64>, op: Op, size: usize, old: usize, new: usize) {
    if let Some(i) = slot {
        record(i, op, size, old, new);
    }
}

#[cold]
fn record(i: u64, op: Op, size: usize, old: usize, new: usize) {
    let base = BASE.load(Acquire);
    let r = (base + 64 + i as usize * 32) as *mut RawRecord;
    let tid = rustix::thread::gettid().as_raw_nonzero().get() as u32;
    // SAFETY: record i lies in the mapping (i < RAW_CAPACITY); nobody else writes it.
    unsafe {
        r.write(RawRecord {
            op: op as u32,
            tid,
            size: size as u64,
            old: old as u64,
            new: new as u64,
        })
    };
}

#[cold]
#[inline(never)]
fn start() {
    // One thread decides; the others record nothing until it has (their calls are lost only
    // during the first call of a program, before any thread could exist).
    if STATE.compare_exchange(0, 3, AcqRel, Acquire).is_err() {
        return;
    }
    let on = open_raw().is_some();
    STATE.store(if on { ON } else { OFF }, Release);
}

extern "C" {
    fn getenv(name: *const core::ffi::c_char) -> *const core::ffi::c_char;
    fn pthread_atfork(
        prepare: Option<extern "C" fn()>,
        parent: Option<extern "C" fn()>,
        child: Option<extern "C" fn()>,
    ) -> i32;
}

extern "C" fn stop_in_child() {
    STATE.store(OFF, Relaxed);
}

fn open_raw() -> Option<()> {
    use rustix::fs::{Mode, OFlags};
    use rustix::mm::{MapFlags, ProtFlags};
    // SAFETY: getenv returns null or a NUL-terminated string that lives as long as the
    // environment is not changed; we copy it at once.
    let path = unsafe { getenv(c"SPINDLE_ALLOC_TRACE".as_ptr()) };
    if path.is_null() {
        return None;
    }
    // SAFETY: as above.
    let path = unsafe { core::ffi::CStr::from_ptr(path) }.to_bytes();
    // FILE.PID in a stack buffer (no allocation).
    let mut buf = [0u8; 4096];
    let pid = rustix::process::getpid().as_raw_nonzero().get() as u32;
    let mut digits = [0u8; 10];
    let mut n = 0;
    let mut v = pid;
    loop {
        digits[n] = b'0' + (v % 10) as u8;
        n += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    if path.len() + 1 + n + 1 > buf.len() {
        return None;
    }
    buf[..path.len()].copy_from_slice(path);
    buf[path.len()] = b'.';
    for k in 0..n {
        buf[path.len() + 1 + k] = digits[n - 1 - k];
    }
    let name = core::ffi::CStr::from_bytes_until_nul(&buf).ok()?;
    let fd = rustix::fs::open(
        name,
        OFlags::RDWR | OFlags::CREATE | OFlags::TRUNC | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    )
    .ok()?;
    let len = 64 + RAW_CAPACITY * 32;
    rustix::fs::ftruncate(&fd, len).ok()?;
    // SAFETY: a new shared mapping of the file just sized; it outlives the descriptor.
    let base = unsafe {
        rustix::mm::mmap(
            core::ptr::null_mut(),
            len as usize,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::SHARED,
            &fd,
            0,
        )
    }
    .ok()? as usize;
    // SAFETY: the header's first word, in the new mapping.
    unsafe { (base as *mut u64).write(RAW_MAGIC) };
    BASE.store(base, Release);
    // SAFETY: registers a handler with no preconditions.
    unsafe { pthread_atfork(None, None, Some(stop_in_child)) };
    Some(())
}

/// One call of a compact trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// Allocate block `id` of `size` bytes.
    Malloc { id: u32, size: u32 },
    /// Free block `id`.
    Free { id: u32 },
    /// Resize block `from` to `size` bytes; it is block `to` afterwards.
    Realloc { from: u32, to: u32, size: u32 },
}

/// A compact trace in memory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Trace {
    /// The calls in order.
    pub events: Vec<Event>,
    /// One more than the largest id (the size of a replay's pointer table).
    pub ids: u32,
}

const MAGIC: &[u8] = b"SPAT1\n";

fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn get(b: &[u8], at: &mut usize) -> io::Result<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let &x = b
            .get(*at)
            .ok_or_else(|| bad("the trace ends inside a record"))?;
        *at += 1;
        v |= u64::from(x & 0x7f) << shift;
        if x & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(bad("a number in the trace is too long"))
}

fn bad(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why.to_string())
}

fn id(v: u64) -> io::Result<u32> {
    u32::try_from(v).map_err(|_| bad("a block id or size does not fit in 32 bits"))
}

impl Trace {
    /// The `.spat` bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        for e in &self.events {
            match *e {
                Event::Malloc { id, size } => {
                    out.push(Op::Malloc as u8);
                    put(&mut out, id.into());
                    put(&mut out, size.into());
                }
                Event::Free { id } => {
                    out.push(Op::Free as u8);
                    put(&mut out, id.into());
                }
                Event::Realloc { from, to, size } => {
                    out.push(Op::Realloc as u8);
                    put(&mut out, from.into());
                    put(&mut out, to.into());
                    put(&mut out, size.into());
                }
            }
        }
        out
    }

    /// Parses `.spat` bytes.
    pub fn decode(b: &[u8]) -> io::Result<Trace> {
        if !b.starts_with(MAGIC) {
            return Err(bad("not a spindle allocation trace (no SPAT1 header)"));
        }
        let (mut at, mut t) = (MAGIC.len(), Trace::default());
        while at < b.len() {
            let op = b[at];
            at += 1;
            let e = match op {
                1 => Event::Malloc {
                    id: id(get(b, &mut at)?)?,
                    size: id(get(b, &mut at)?)?,
                },
                2 => Event::Free {
                    id: id(get(b, &mut at)?)?,
                },
                3 => Event::Realloc {
                    from: id(get(b, &mut at)?)?,
                    to: id(get(b, &mut at)?)?,
                    size: id(get(b, &mut at)?)?,
                },
                x => return Err(bad(&format!("unknown record type {x} at byte {}", at - 1))),
            };
            // Ids are numbered as `from_raw` hands them out: a new block takes an id freed
            // before or the next one, and only an id handed out can be freed. So a replay's
            // table never outgrows the trace (a damaged id of 2^32 - 2 would ask for 64 GiB).
            let (used, new) = match e {
                Event::Malloc { id, .. } => (None, id),
                Event::Free { id } => (Some(id), 0),
                Event::Realloc { from, to, .. } => (Some(from), to),
            };
            if used.is_some_and(|u| u >= t.ids) || new > t.ids {
                return Err(bad(&format!(
                    "block id {} at call {} was never handed out (ids are numbered from 0 as blocks are allocated; {} so far): a damaged trace",
                    used.filter(|&u| u >= t.ids).unwrap_or(new),
                    t.events.len() + 1,
                    t.ids
                )));
            }
            t.ids = t.ids.max(new.saturating_add(1));
            t.events.push(e);
        }
        Ok(t)
    }

    /// Reads a `.spat` file.
    pub fn load(path: &Path) -> io::Result<Trace> {
        Trace::decode(&std::fs::read(path)?)
    }

    /// Builds a compact trace from a raw recording (`FILE.PID`), numbering blocks by address.
    /// Returns the trace and how many calls it dropped (frees of unknown blocks, failed
    /// allocations).
    pub fn from_raw(raw: &[u8]) -> io::Result<(Trace, u64)> {
        if raw.len() < 64 || raw[..8] != RAW_MAGIC.to_le_bytes() {
            return Err(bad("not a raw spindle allocation recording"));
        }
        let count = u64::from_le_bytes(raw[8..16].try_into().expect("8 bytes"));
        let count = count.min(RAW_CAPACITY).min((raw.len() as u64 - 64) / 32);
        let (mut t, mut dropped) = (Trace::default(), 0u64);
        let mut live: std::collections::HashMap<u64, u32> = Default::default();
        let mut free_ids: Vec<u32> = Vec::new();
        let fresh = |t: &mut Trace, free_ids: &mut Vec<u32>| {
            free_ids.pop().unwrap_or_else(|| {
                t.ids += 1;
                t.ids - 1
            })
        };
        for i in 0..count as usize {
            let r = &raw[64 + i * 32..96 + i * 32];
            let w = |k: usize| u64::from_le_bytes(r[k..k + 8].try_into().expect("8 bytes"));
            let (op, size, old, new) = (r[0], w(8), w(16), w(24));
            let size = u32::try_from(size).unwrap_or(u32::MAX);
            match op {
                1 if new != 0 => {
                    let id = fresh(&mut t, &mut free_ids);
                    if let Some(stale) = live.insert(new, id) {
                        // Freed somewhere we did not see (a recording lost to a dying
                        // thread): free it in the trace too, so that replays do not leak.
                        free_ids.push(stale);
                        t.events.push(Event::Free { id: stale });
                    }
                    t.events.push(Event::Malloc { id, size });
                }
                2 => match live.remove(&old) {
                    Some(id) => {
                        free_ids.push(id);
                        t.events.push(Event::Free { id });
                    }
                    None => dropped += 1,
                },
                3 => {
                    let from = if old == 0 { None } else { live.remove(&old) };
                    match (from, new) {
                        (Some(id), 0) if size == 0 => {
                            free_ids.push(id);
                            t.events.push(Event::Free { id });
                        }
                        (Some(id), 0) => {
                            // Failed: the block stays where it was.
                            live.insert(old, id);
                            dropped += 1;
                        }
                        (None, 0) => dropped += 1,
                        (Some(from), _) => {
                            let to = fresh(&mut t, &mut free_ids);
                            live.insert(new, to);
                            free_ids.push(from);
                            t.events.push(Event::Realloc { from, to, size });
                        }
                        (None, _) => {
                            let id = fresh(&mut t, &mut free_ids);
                            live.insert(new, id);
                            t.events.push(Event::Malloc { id, size });
                        }
                    }
                }
                0 => {} // never written (its thread died first)
                _ => dropped += 1,
            }
        }
        Ok((t, dropped))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(records: &[(u8, u64, u64, u64)]) -> Vec<u8> {
        let mut b = vec![0u8; 64];
        b[..8].copy_from_slice(&RAW_MAGIC.to_le_bytes());
        b[8..16].copy_from_slice(&(records.len() as u64).to_le_bytes());
        for &(op, size, old, new) in records {
            let mut r = [0u8; 32];
            r[0] = op;
            r[8..16].copy_from_slice(&size.to_le_bytes());
            r[16..24].copy_from_slice(&old.to_le_bytes());
            r[24..32].copy_from_slice(&new.to_le_bytes());
            b.extend(r);
        }
        b
    }

    #[test]
    fn raw_recordings_become_id_traces_that_round_trip() {
        let (t, dropped) = Trace::from_raw(&raw(&[
            (1, 24, 0, 0x1000),       // malloc a
            (1, 300, 0, 0x2000),      // malloc b
            (3, 600, 0x2000, 0x3000), // realloc b, moved
            (2, 0, 0x1000, 0),        // free a
            (2, 0, 0x9999, 0),        // free of a block never seen: dropped
            (3, 0, 0x3000, 0),        // realloc(b, 0): a free
            (3, 64, 0, 0x1000),       // realloc(NULL, 64): a malloc (address reused)
            (0, 0, 0, 0),             // never written
            (3, 128, 0x1000, 0),      // failed realloc: the block stays
            (2, 0, 0x1000, 0),        // ... and is freed later
        ]))
        .unwrap();
        assert_eq!(dropped, 2);
        use Event::*;
        assert_eq!(
            t.events,
            vec![
                Malloc { id: 0, size: 24 },
                Malloc { id: 1, size: 300 },
                Realloc {
                    from: 1,
                    to: 2,
                    size: 600
                },
                Free { id: 0 },
                Free { id: 2 },
                Malloc { id: 2, size: 64 },
                Free { id: 2 },
            ]
        );
        assert_eq!(Trace::decode(&t.encode()).unwrap(), t);
        assert!(Trace::decode(b"SPAT1\n\x01\x80").is_err());
        assert!(Trace::decode(b"nope").is_err());
        assert!(Trace::from_raw(b"short").is_err());
    }

    #[test]
    fn a_block_reused_without_a_recorded_free_is_freed_in_the_trace() {
        let (t, _) = Trace::from_raw(&raw(&[(1, 8, 0, 0x1000), (1, 8, 0, 0x1000)])).unwrap();
        assert_eq!(
            t.events,
            vec![
                Event::Malloc { id: 0, size: 8 },
                Event::Free { id: 0 },
                Event::Malloc { id: 1, size: 8 },
            ]
        );
    }

    /// An id no allocation handed out is a damaged trace, refused when read (a replay would
    /// size its table by it: 2^32 - 2 asked for 64 GiB).
    #[test]
    fn ids_never_handed_out_are_refused() {
        let mut b = MAGIC.to_vec();
        b.push(Op::Malloc as u8);
        put(&mut b, 0xFFFF_FFFE);
        put(&mut b, 8);
        let e = Trace::decode(&b).unwrap_err();
        assert!(e.to_string().contains("never handed out"), "{e}");
        let mut b = MAGIC.to_vec();
        b.push(Op::Malloc as u8);
        put(&mut b, 0);
        put(&mut b, 8);
        b.push(Op::Free as u8);
        put(&mut b, 1);
        assert!(Trace::decode(&b).is_err());
        // What a recording gives reads back, ids recycled included.
        let t = Trace {
            events: vec![
                Event::Malloc { id: 0, size: 8 },
                Event::Malloc { id: 1, size: 8 },
                Event::Free { id: 0 },
                Event::Realloc {
                    from: 1,
                    to: 0,
                    size: 64,
                },
                Event::Malloc { id: 1, size: 8 },
                Event::Realloc {
                    from: 0,
                    to: 2,
                    size: 128,
                },
            ],
            ids: 3,
        };
        assert_eq!(Trace::decode(&t.encode()).unwrap(), t);
    }
}
