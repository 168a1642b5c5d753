//! A flight recorder: every thread keeps its last records in a ring of its own, by value, at
//! the cost of a few stores each; nothing is formatted until somebody asks — a live
//! [`dump`], the crash handler on a panic or a fatal signal ([`crash`]), or
//! `spindle recorder dump FILE` after the process died, even of `SIGKILL` or the OOM killer.
//!
//! ```no_run
//! use spindle_recorder::{record, Level, Options, Section};
//!
//! static NET: Section = Section::new("net", Level::Info);
//!
//! fn main() -> std::io::Result<()> {
//!     // Rings in a file that outlives the process (a memfd when not called).
//!     spindle_recorder::install("/tmp/app.rec", Options::default())?;
//!     spindle_recorder::crash::install_handler("/tmp/app.crash")?;
//!     for conn in 0..3u32 {
//!         record!(NET, Info, "accepted connection {} from {}", conn, "10.0.0.7");
//!     }
//!     record!(NET, Debug, "not recorded: below the section's level");
//!     spindle_recorder::dump(&mut std::io::stdout(), 1000)
//! }
//! ```
//!
//! # How a record is kept
//!
//! `record!(SECTION, Level, "format", args…)` checks the section's level (one load and a
//! compare: the whole cost of a record below it), then encodes the arguments by value into 40
//! bytes on the stack (integers, floats, `bool`, `char`, strings copied up to what fits — see
//! [`Encode`]), reads the TSC, and writes one 64-byte slot of the thread's ring: eight plain
//! stores and a release store of the ring's head. No lock, no atomic read-modify-write, no
//! system call, no formatting. The call site (format string, file, line, section, level) is
//! written into the recording once, the first time it records.
//!
//! # Surviving the process
//!
//! The rings live in a `MAP_SHARED` mapping of a file ([`install`]) whose header describes it
//! (see the `layout` module): stores to it are in the page cache as soon as they execute, so
//! the file holds every record published before the process died, however it died. A record
//! is published by its ring's head, stored after its slot: a reader sees whole records only,
//! and the one being written when the process was killed is left out, never half-read.
//!
//! # Adapters
//!
//! With the `tracing` feature, `tracing_layer::RecorderLayer` records `tracing` events (fields
//! by value); with the `log` feature, `log_adapter::init` installs a `log::Log` that records.
//!
//! # Threads
//!
//! A thread takes a ring at its first record and gives it back when it exits; the ring keeps
//! the dead thread's records until another thread needs it (the free rings first, then a
//! retired one). A thread that finds every ring taken by a live thread records nothing
//! (counted in the recording's header); [`Options::threads`] sets how many rings there are.
//!
//! Not supported: `record!` inside a signal handler (taking a ring takes a lock, and a record
//! could interleave with the one it interrupted), and recording in a child forked without
//! `exec` (parent and child would write the same rings).

#![warn(missing_docs)]

// The README's examples are compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

use std::cell::Cell;
use std::io;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

#[cfg(any(feature = "tracing", feature = "log"))]
mod callsites;
mod dump;
mod encode;
mod layout;

pub mod crash;
#[cfg(feature = "log")]
pub mod log_adapter;
pub mod read;
#[cfg(feature = "tracing")]
pub mod tracing_layer;

pub use dump::Skipped;
pub use encode::{Encode, Encoder, Level, Section, Site};
pub use layout::{FormatError, PAYLOAD};

use layout::{Clock, Geometry, RingWriter, View, FREE, LIVE, RETIRED};

/// Records `format` with its arguments in the calling thread's ring, if `section` records
/// `level`: `record!(NET, Info, "accepted {} from {}", id, addr)`.
///
/// `section` is a `static` [`Section`]; `level` one of [`Level`]'s variants by name; `format`
/// a string literal whose `{}` (any `{…}`) take the arguments in order when the record is
/// dumped; each argument implements [`Encode`] and is copied now.
#[macro_export]
macro_rules! record {
    ($section:path, $level:ident, $fmt:literal $(, $arg:expr)* $(,)?) => {{
        if $section.enabled($crate::Level::$level) {
            static SITE: $crate::Site =
                $crate::Site::new(&$section, $crate::Level::$level, file!(), line!(), $fmt);
            #[allow(unused_mut)]
            let mut enc = $crate::Encoder::new();
            $( $crate::Encode::encode(&$arg, &mut enc); )*
            $crate::write(&SITE, &enc);
        }
    }};
}

/// How big a recording is.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Rings, one per thread that records at the same time (default: 4 × the CPUs this
    /// process may use, at least 64).
    pub threads: usize,
    /// Slots per ring (rounded up to a power of two; default 1024, 64 bytes each): a ring
    /// keeps the last `records_per_thread - 1` records (one slot is the one being written).
    pub records_per_thread: usize,
    /// Call sites the recording can name (default 4096).
    pub sites: usize,
}

impl Default for Options {
    fn default() -> Options {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        Options {
            threads: (4 * cpus).max(64),
            records_per_thread: 1024,
            sites: 4096,
        }
    }
}

impl Options {
    fn geometry(&self) -> io::Result<Geometry> {
        let bad = |what: String| io::Error::new(io::ErrorKind::InvalidInput, what);
        if self.threads == 0 || self.threads > 1 << 20 {
            return Err(bad(format!(
                "threads = {}: between 1 and 2^20",
                self.threads
            )));
        }
        if self.records_per_thread < 2 || self.records_per_thread > 1 << 24 {
            return Err(bad(format!(
                "records_per_thread = {}: between 2 and 2^24",
                self.records_per_thread
            )));
        }
        if self.sites > 1 << 24 {
            return Err(bad(format!("sites = {}: at most 2^24", self.sites)));
        }
        Ok(Geometry {
            ring_count: self.threads as u32,
            ring_slots: self.records_per_thread.next_power_of_two() as u32,
            site_capacity: self.sites as u32,
        })
    }
}

/// The process's recording.
pub(crate) struct Recorder {
    pub(crate) view: View,
    mask: u64,
    /// Site registration and ring hand-out.
    lock: Mutex<()>,
    /// The crash handler's scratch, allocated up front: a walk's, and a line to format into.
    pub(crate) crash_scratch: Mutex<(Box<dump::Scratch>, Box<dump::Line>)>,
}

static RECORDER: OnceLock<Recorder> = OnceLock::new();

/// Why [`install`] failed besides I/O: a recording is already in use.
fn already() -> io::Error {
    io::Error::new(
        io::ErrorKind::AlreadyExists,
        "a recording is already installed in this process (install once, before the first record)",
    )
}

/// Records into a new file at `path`, mapped shared: after the process dies,
/// `spindle recorder dump path` reads its last records. Call it once, before the first record;
/// without it, the first record creates an anonymous recording (a memfd) that only [`dump`] and
/// the crash handler can read.
///
/// The file is written whole first (its blocks allocated, so that a full disk is an error
/// here, not a `SIGBUS` in a later record) under a temporary name, then renamed over `path`:
/// a reader of the previous recording at `path` (the last run's) keeps reading that one.
pub fn install(path: impl AsRef<Path>, options: Options) -> io::Result<()> {
    let geometry = options.geometry()?;
    if RECORDER.get().is_some() {
        return Err(already());
    }
    use rustix::fs::{Mode, OFlags};
    let path = path.as_ref();
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp-{}", std::process::id()));
    let tmp = std::path::PathBuf::from(tmp);
    let fd = rustix::fs::open(
        &tmp,
        OFlags::RDWR | OFlags::CREATE | OFlags::TRUNC | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    )?;
    let rec = Recorder::on(fd, geometry).and_then(|rec| {
        std::fs::rename(&tmp, path)?;
        Ok(rec)
    });
    if rec.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    RECORDER.set(rec?).map_err(|_| already())
}

/// Records into an anonymous shared mapping (a memfd) of the given size: what the first
/// record does with [`Options::default`] when nothing was installed.
pub fn install_memory(options: Options) -> io::Result<()> {
    let geometry = options.geometry()?;
    if RECORDER.get().is_some() {
        return Err(already());
    }
    let rec = Recorder::memory(geometry)?;
    RECORDER.set(rec).map_err(|_| already())
}

impl Recorder {
    fn memory(geometry: Geometry) -> io::Result<Recorder> {
        let fd = rustix::fs::memfd_create("spindle-recorder", rustix::fs::MemfdFlags::CLOEXEC)?;
        Recorder::on(fd, geometry)
    }

    /// Sizes the file behind `fd` (its blocks allocated), maps it shared, writes the header.
    fn on(fd: rustix::fd::OwnedFd, geometry: Geometry) -> io::Result<Recorder> {
        let len = geometry.file_size();
        rustix::fs::ftruncate(&fd, len as u64)?;
        rustix::fs::fallocate(&fd, rustix::fs::FallocateFlags::empty(), 0, len as u64)?;
        // SAFETY: a fresh shared mapping of the whole file, which nothing else maps; it is
        // never unmapped (the recorder lives as long as the process).
        let base = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                rustix::mm::MapFlags::SHARED,
                &fd,
                0,
            )?
        };
        let clock = clock();
        // SAFETY: the mapping is writable, zeroed (a new or truncated file), page-aligned,
        // `len` bytes, and lives for the rest of the process.
        let view = unsafe {
            View::create(
                base.cast(),
                geometry,
                clock,
                rustix::process::getpid().as_raw_nonzero().get() as u32,
            )
        };
        Ok(Recorder {
            view,
            mask: u64::from(geometry.ring_slots - 1),
            lock: Mutex::new(()),
            crash_scratch: Mutex::new((
                dump::Scratch::new(geometry.ring_count as usize),
                Box::new(dump::Line::new()),
            )),
        })
    }
}

/// The record clock's rate ([`rdtsc`]) and an anchor to wall time, measured over about 2 ms.
fn clock() -> Clock {
    let wall = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    };
    let (t0, c0) = (std::time::Instant::now(), rdtsc());
    let wall0 = wall();
    while t0.elapsed() < std::time::Duration::from_millis(2) {
        std::hint::spin_loop();
    }
    let (dt, dc) = (t0.elapsed(), rdtsc().wrapping_sub(c0));
    Clock {
        tsc_per_sec: (dc as f64 / dt.as_secs_f64()).max(1e6),
        tsc_anchor: c0,
        wall_anchor_ns: wall0,
    }
}

/// The record clock: the TSC on x86-64, the generic timer's virtual count (`CNTVCT_EL0`, which
/// Linux lets user space read) on AArch64, nanoseconds of `Instant` elsewhere. [`clock`]
/// measures its rate, so the dump's times are right whatever it ticks at.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn rdtsc() -> u64 {
    // SAFETY: RDTSC has no preconditions on x86-64.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(target_arch = "aarch64")]
#[inline(always)]
fn rdtsc() -> u64 {
    let t: u64;
    // SAFETY: reads a system register that Linux makes readable at EL0 (CNTKCTL_EL1.EL0VCTEN);
    // no memory effects.
    unsafe {
        core::arch::asm!("mrs {t}, cntvct_el0", t = out(reg) t, options(nomem, nostack, preserves_flags));
    }
    t
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn rdtsc() -> u64 {
    static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    ORIGIN
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_nanos() as u64
}

pub(crate) fn recorder() -> Option<&'static Recorder> {
    RECORDER.get()
}

fn recorder_or_default() -> Option<&'static Recorder> {
    if let Some(r) = RECORDER.get() {
        return Some(r);
    }
    // A racing install wins or loses against this default; either way one recording is used.
    let _ = install_memory(Options::default());
    RECORDER.get()
}

// --- the calling thread's ring -------------------------------------------------------------

/// The calling thread's ring: its writer and index, or none yet (`NONE`), or none to be had
/// (`NO_RING`: every ring was taken, or the thread has exited).
#[derive(Clone, Copy)]
struct Local {
    writer: Option<RingWriter>,
    mask: u64,
    index: usize,
}

const NONE: usize = usize::MAX;
const NO_RING: usize = usize::MAX - 1;

thread_local! {
    static LOCAL: Cell<Local> = const {
        Cell::new(Local { writer: None, mask: 0, index: NONE })
    };
    /// Gives the ring back when the thread exits (registered at the thread's first record).
    static RETIRE: Retire = const { Retire(Cell::new(NONE)) };
}

struct Retire(Cell<usize>);

impl Drop for Retire {
    fn drop(&mut self) {
        let i = self.0.get();
        // Records made by later thread-local destructors go nowhere (the ring may belong to
        // another thread by then).
        let _ = LOCAL.try_with(|l| {
            l.set(Local {
                writer: None,
                mask: 0,
                index: NO_RING,
            })
        });
        if let (Some(rec), true) = (recorder(), i < NONE - 1) {
            let _g = rec.lock.lock().unwrap_or_else(|e| e.into_inner());
            rec.view.retire_ring(i);
        }
    }
}

#[cold]
#[inline(never)]
fn take_ring() -> Local {
    let no = Local {
        writer: None,
        mask: 0,
        index: NO_RING,
    };
    let Some(rec) = recorder_or_default() else {
        return no;
    };
    let rings = rec.view.geometry.ring_count as usize;
    let index = {
        let _g = rec.lock.lock().unwrap_or_else(|e| e.into_inner());
        let free = (0..rings).find(|&i| rec.view.ring_state(i) == FREE);
        let Some(i) = free.or_else(|| (0..rings).find(|&i| rec.view.ring_state(i) == RETIRED))
        else {
            rec.view
                .no_ring_count()
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return no;
        };
        let tid = rustix::thread::gettid().as_raw_nonzero().get() as u32;
        let name = std::thread::current().name().unwrap_or("").to_owned();
        rec.view.claim_ring(i, tid, &name);
        i
    };
    if RETIRE.try_with(|r| r.0.set(index)).is_err() {
        // The thread is exiting: give the ring straight back.
        rec.view.retire_ring(index);
        return no;
    }
    debug_assert_eq!(rec.view.ring_state(index), LIVE);
    Local {
        writer: Some(rec.view.writer(index)),
        mask: rec.mask,
        index,
    }
}

/// Site `site`'s number in the recording (registering it the first time), or 0 if the
/// recording's site table is full.
#[inline(always)]
fn site_id(site: &'static Site) -> u32 {
    // Acquire: a site numbered by another thread was written into the table first (the
    // dump reads the table by number).
    let id = site.id.load(std::sync::atomic::Ordering::Acquire);
    if id != 0 {
        return id;
    }
    register(site)
}

#[cold]
#[inline(never)]
fn register(site: &'static Site) -> u32 {
    let Some(rec) = recorder() else { return 0 };
    let _g = rec.lock.lock().unwrap_or_else(|e| e.into_inner());
    let id = site.id.load(std::sync::atomic::Ordering::Relaxed);
    if id != 0 {
        return id;
    }
    let index = rec.view.site_count();
    if index >= rec.view.geometry.site_capacity {
        return 0;
    }
    rec.view.write_site(
        index,
        site.line,
        site.level as u8,
        [site.section.name(), site.file, site.fmt],
    );
    site.id
        .store(index + 1, std::sync::atomic::Ordering::Release);
    index + 1
}

/// Writes one record (what [`record!`] expands to, after the level check).
#[doc(hidden)]
#[inline(always)]
pub fn write(site: &'static Site, args: &Encoder) {
    let mut local = LOCAL.with(Cell::get);
    if local.writer.is_none() {
        if local.index != NONE {
            return; // no ring for this thread
        }
        local = take_ring();
        let _ = LOCAL.try_with(|l| l.set(local));
        if local.writer.is_none() {
            return;
        }
    }
    let id = site_id(site);
    let p = args.words();
    let flags = if args.truncated { layout::TRUNCATED } else { 0 };
    let head = u64::from(id) | (args.len as u64) << 32 | flags;
    let words = [head, rdtsc(), 0, p[0], p[1], p[2], p[3], p[4]];
    if let Some(w) = local.writer {
        // SAFETY: this thread owns the ring (taken by `take_ring`, given back only when the
        // thread exits, after which LOCAL holds no writer); the mapping lives forever.
        unsafe { w.push(local.mask, words) };
    }
}

/// Writes the last `last` records of every thread (fewer if a ring holds fewer) to `out`, as
/// text lines in time order. Records made meanwhile may or may not appear; none appears
/// torn.
pub fn dump(out: &mut impl io::Write, last: usize) -> io::Result<()> {
    let Some(rec) = recorder() else {
        return Ok(()); // nothing was ever recorded
    };
    let mut scratch = dump::Scratch::new(rec.view.geometry.ring_count as usize);
    let mut line = Box::new(dump::Line::new());
    let mut result = Ok(());
    dump::walk(&rec.view, last as u64, &mut scratch, |r| {
        if result.is_ok() {
            line.clear();
            r.format(&mut line);
            result = out.write_all(line.bytes());
        }
    });
    result
}
