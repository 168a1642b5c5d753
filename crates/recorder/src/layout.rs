//! The recording's format: one file (or memfd), mapped `MAP_SHARED` by the recording process,
//! so that whatever a store has written is in the page cache and survives the process, however
//! it dies. Everything is little-endian (x86-64) and naturally aligned.
//!
//! ```text
//! offset 0            header (HEADER bytes): magic, version, geometry, clock anchor
//! sites_offset        site_capacity call sites of SITE bytes: line, level, section, file, format
//! rings_offset        ring_count rings, each RING_HEADER bytes then ring_slots slots of SLOT bytes
//! ```
//!
//! **A ring** belongs to one thread at a time. Its writer fills slot `head % slots` (word 2 is
//! the record's sequence number `head`), then stores `head + 1` (Release). `head` only grows,
//! across owners too: a thread that takes a ring sets its `start` to the current head, so a
//! sequence number names one record for the ring's whole life. A reader loads `head` = H and
//! takes the sequence numbers `max(start, H - slots + 1) .. H`: the slot of `H - slots` is where
//! the next record is being written, so it is left out, and every slot taken was complete before
//! its sequence number was published (the stores of one thread reach memory in order on x86-64,
//! and Release orders them in the C++ model). A slot whose word 2 is not the sequence number the
//! reader expects was never written (or the file is damaged): it is skipped and counted. A
//! reader of a live process re-reads `head` after a slot (behind an Acquire fence; the writer
//! issues a Release fence before a slot's stores, after the previous head) and drops the slot
//! if the writer may have started to overwrite it meanwhile: head - seq ≥ slots.
//!
//! A process killed at any instruction thus leaves, in every ring, the records published before
//! the kill, whole, and the one being written invisible: recall is every completed record the
//! ring still holds, with no torn record and nothing invented.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::*};

pub(crate) const MAGIC: [u8; 8] = *b"SPNDLREC";
pub(crate) const VERSION: u32 = 1;

pub(crate) const HEADER: usize = 4096;
pub(crate) const SITE: usize = 256;
/// Site bytes after its fixed fields: section name, file, format string.
pub(crate) const SITE_TEXT: usize = SITE - 16;
pub(crate) const RING_HEADER: usize = 128;
pub(crate) const SLOT: usize = 64;
/// Bytes of arguments a record holds (the slot's last five words).
pub const PAYLOAD: usize = 40;

// Header fields (byte offsets).
const H_MAGIC: usize = 0;
const H_VERSION: usize = 8;
const H_PID: usize = 12;
const H_RING_COUNT: usize = 16;
const H_RING_SLOTS: usize = 20;
const H_SITE_CAPACITY: usize = 24;
const H_SITE_COUNT: usize = 28;
const H_TSC_PER_SEC: usize = 32;
const H_TSC_ANCHOR: usize = 40;
const H_WALL_ANCHOR: usize = 48;
const H_SITES_OFFSET: usize = 56;
const H_RINGS_OFFSET: usize = 64;
const H_FILE_SIZE: usize = 72;
const H_NO_RING: usize = 80;

// Ring header fields: the owner's identity on the first line, the writer's on the second.
const R_STATE: usize = 0;
const R_TID: usize = 4;
const R_NAME: usize = 8;
pub(crate) const NAME: usize = 32;
const R_START: usize = 40;
const R_HEAD: usize = 64;

/// A ring's owner: none yet, a live thread, or a thread that has exited (its records stay
/// until another thread takes the ring).
pub(crate) const FREE: u32 = 0;
pub(crate) const LIVE: u32 = 1;
pub(crate) const RETIRED: u32 = 2;

/// Word 0 of a slot: site id (low 32 bits), payload bytes used (next 8), flags (next 8).
pub(crate) const TRUNCATED: u64 = 1 << 40;

/// The geometry a recording is created with.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Geometry {
    pub(crate) ring_count: u32,
    pub(crate) ring_slots: u32,
    pub(crate) site_capacity: u32,
}

impl Geometry {
    pub(crate) fn sites_offset(&self) -> usize {
        HEADER
    }
    pub(crate) fn rings_offset(&self) -> usize {
        HEADER + self.site_capacity as usize * SITE
    }
    pub(crate) fn ring_stride(&self) -> usize {
        RING_HEADER + self.ring_slots as usize * SLOT
    }
    pub(crate) fn file_size(&self) -> usize {
        self.rings_offset() + self.ring_count as usize * self.ring_stride()
    }
}

/// The clock of a recording: TSC ticks per second, and one TSC reading with the wall time
/// (ns since the Unix epoch) taken at the same moment.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Clock {
    pub(crate) tsc_per_sec: f64,
    pub(crate) tsc_anchor: u64,
    pub(crate) wall_anchor_ns: u64,
}

impl Clock {
    /// Wall time (ns since the epoch) of a TSC reading.
    pub(crate) fn wall_ns(&self, tsc: u64) -> u64 {
        let dt = tsc.wrapping_sub(self.tsc_anchor) as i64 as f64 / self.tsc_per_sec;
        (self.wall_anchor_ns as f64 + dt * 1e9).max(0.0) as u64
    }
}

/// A mapped recording: the base of the mapping and its length. Reads check every offset
/// against the length, so a damaged file gives errors, never a read outside the mapping.
#[derive(Clone, Copy)]
pub(crate) struct View {
    base: *mut u8,
    len: usize,
    pub(crate) geometry: Geometry,
    pub(crate) clock: Clock,
    pub(crate) pid: u32,
}

// SAFETY: the view only reads and writes through atomics and bounds-checked offsets; the
// mapping it points to outlives it (owned by the recorder, or by the reader's `Recording`).
unsafe impl Send for View {}
// SAFETY: as above.
unsafe impl Sync for View {}

/// Why a recording cannot be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FormatError {
    /// Shorter than a header.
    TooShort(usize),
    /// Not a recording (the first bytes are not `SPNDLREC`).
    BadMagic,
    /// Written by a newer version of this crate.
    NewerVersion(u32),
    /// The header's geometry is impossible (a damaged header).
    BadGeometry(String),
    /// The file is shorter than its header says (a truncated copy).
    Truncated {
        /// Bytes the header describes.
        expected: usize,
        /// Bytes the file has.
        actual: usize,
    },
}

impl std::fmt::Display for FormatError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FormatError::TooShort(n) => write!(
                f,
                "{n} bytes: too short for a recording (its header alone is {HEADER} bytes)"
            ),
            FormatError::BadMagic => write!(f, "not a spindle recording (no SPNDLREC magic)"),
            FormatError::NewerVersion(v) => write!(
                f,
                "recording format version {v}; this build reads version {VERSION} and older"
            ),
            FormatError::BadGeometry(why) => write!(f, "damaged header: {why}"),
            FormatError::Truncated { expected, actual } => write!(
                f,
                "truncated: the header describes {expected} bytes, the file has {actual}"
            ),
        }
    }
}

impl std::error::Error for FormatError {}

impl View {
    /// Writes a fresh header for `geometry` at `base` (a zeroed mapping of `file_size` bytes).
    ///
    /// # Safety
    /// `base` must point to a writable, zeroed, page-aligned mapping of at least
    /// `geometry.file_size()` bytes that outlives every use of the view.
    pub(crate) unsafe fn create(base: *mut u8, geometry: Geometry, clock: Clock, pid: u32) -> View {
        let v = View {
            base,
            len: geometry.file_size(),
            geometry,
            clock,
            pid,
        };
        v.u32_at(H_VERSION).store(VERSION, Relaxed);
        v.u32_at(H_PID).store(pid, Relaxed);
        v.u32_at(H_RING_COUNT).store(geometry.ring_count, Relaxed);
        v.u32_at(H_RING_SLOTS).store(geometry.ring_slots, Relaxed);
        v.u32_at(H_SITE_CAPACITY)
            .store(geometry.site_capacity, Relaxed);
        v.u64_at(H_TSC_PER_SEC)
            .store(clock.tsc_per_sec.to_bits(), Relaxed);
        v.u64_at(H_TSC_ANCHOR).store(clock.tsc_anchor, Relaxed);
        v.u64_at(H_WALL_ANCHOR).store(clock.wall_anchor_ns, Relaxed);
        v.u64_at(H_SITES_OFFSET)
            .store(geometry.sites_offset() as u64, Relaxed);
        v.u64_at(H_RINGS_OFFSET)
            .store(geometry.rings_offset() as u64, Relaxed);
        v.u64_at(H_FILE_SIZE)
            .store(geometry.file_size() as u64, Relaxed);
        // The magic last: a reader that finds it finds a whole header.
        let magic = u64::from_le_bytes(MAGIC);
        v.u64_at(H_MAGIC).store(magic, Release);
        v
    }

    /// Reads and checks the header of a mapping of `len` bytes.
    ///
    /// # Safety
    /// `base` must point to a readable mapping of `len` bytes, 8-byte aligned, that outlives
    /// every use of the view.
    pub(crate) unsafe fn open(base: *mut u8, len: usize) -> Result<View, FormatError> {
        if len < HEADER {
            return Err(FormatError::TooShort(len));
        }
        let mut v = View {
            base,
            len,
            geometry: Geometry {
                ring_count: 0,
                ring_slots: 0,
                site_capacity: 0,
            },
            clock: Clock {
                tsc_per_sec: 1.0,
                tsc_anchor: 0,
                wall_anchor_ns: 0,
            },
            pid: 0,
        };
        if v.u64_at(H_MAGIC).load(Acquire) != u64::from_le_bytes(MAGIC) {
            return Err(FormatError::BadMagic);
        }
        let version = v.u32_at(H_VERSION).load(Relaxed);
        if version > VERSION {
            return Err(FormatError::NewerVersion(version));
        }
        if version == 0 {
            return Err(FormatError::BadGeometry("version 0".into()));
        }
        let g = Geometry {
            ring_count: v.u32_at(H_RING_COUNT).load(Relaxed),
            ring_slots: v.u32_at(H_RING_SLOTS).load(Relaxed),
            site_capacity: v.u32_at(H_SITE_CAPACITY).load(Relaxed),
        };
        let bad = |why: String| Err(FormatError::BadGeometry(why));
        if g.ring_slots < 2 || !g.ring_slots.is_power_of_two() || g.ring_slots > 1 << 24 {
            return bad(format!("{} slots per ring", g.ring_slots));
        }
        if g.ring_count == 0 || g.ring_count > 1 << 20 || g.site_capacity > 1 << 24 {
            return bad(format!("{} rings, {} sites", g.ring_count, g.site_capacity));
        }
        let offsets = (
            v.u64_at(H_SITES_OFFSET).load(Relaxed),
            v.u64_at(H_RINGS_OFFSET).load(Relaxed),
            v.u64_at(H_FILE_SIZE).load(Relaxed),
        );
        if offsets
            != (
                g.sites_offset() as u64,
                g.rings_offset() as u64,
                g.file_size() as u64,
            )
        {
            return bad(format!(
                "offsets {offsets:?} do not match {} rings of {} slots and {} sites",
                g.ring_count, g.ring_slots, g.site_capacity
            ));
        }
        if g.file_size() > len {
            return Err(FormatError::Truncated {
                expected: g.file_size(),
                actual: len,
            });
        }
        let tsc_per_sec = f64::from_bits(v.u64_at(H_TSC_PER_SEC).load(Relaxed));
        if !(tsc_per_sec.is_finite() && tsc_per_sec > 1e3) {
            return bad(format!("{tsc_per_sec} TSC ticks per second"));
        }
        v.geometry = g;
        v.clock = Clock {
            tsc_per_sec,
            tsc_anchor: v.u64_at(H_TSC_ANCHOR).load(Relaxed),
            wall_anchor_ns: v.u64_at(H_WALL_ANCHOR).load(Relaxed),
        };
        v.pid = v.u32_at(H_PID).load(Relaxed);
        Ok(v)
    }

    fn u32_at(&self, off: usize) -> &AtomicU32 {
        assert!(
            off % 4 == 0 && off + 4 <= self.len,
            "offset {off} outside the recording"
        );
        // SAFETY: in bounds and aligned (checked above; the base is page-aligned), inside a
        // mapping that outlives the view (the constructors' contract).
        unsafe { &*self.base.add(off).cast::<AtomicU32>() }
    }

    fn u64_at(&self, off: usize) -> &AtomicU64 {
        assert!(
            off % 8 == 0 && off + 8 <= self.len,
            "offset {off} outside the recording"
        );
        // SAFETY: as in `u32_at`.
        unsafe { &*self.base.add(off).cast::<AtomicU64>() }
    }

    // --- sites -----------------------------------------------------------------------------

    pub(crate) fn site_count(&self) -> u32 {
        self.u32_at(H_SITE_COUNT)
            .load(Acquire)
            .min(self.geometry.site_capacity)
    }

    /// Writes site `index` (its text truncated to fit) and publishes it.
    pub(crate) fn write_site(&self, index: u32, line: u32, level: u8, texts: [&str; 3]) {
        let at = self.geometry.sites_offset() + index as usize * SITE;
        let mut text = [0u8; SITE_TEXT];
        let mut lens = [0u16; 3];
        let mut n = 0;
        for (i, t) in texts.iter().enumerate() {
            let b = t.as_bytes();
            let mut k = b.len().min(SITE_TEXT - n);
            while k > 0 && !t.is_char_boundary(k) {
                k -= 1;
            }
            text[n..n + k].copy_from_slice(&b[..k]);
            lens[i] = k as u16;
            n += k;
        }
        let fixed = u64::from(line) | u64::from(level) << 32;
        let lens = u64::from(lens[0]) | u64::from(lens[1]) << 16 | u64::from(lens[2]) << 32;
        self.u64_at(at).store(fixed, Relaxed);
        self.u64_at(at + 8).store(lens, Relaxed);
        for (k, chunk) in text.chunks(8).enumerate() {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.u64_at(at + 16 + 8 * k)
                .store(u64::from_le_bytes(w), Relaxed);
        }
        self.u32_at(H_SITE_COUNT).store(index + 1, Release);
    }

    /// Site `index`: line, level, and its text (section, file, format) copied into `buf`.
    pub(crate) fn read_site(&self, index: u32, buf: &mut [u8; SITE_TEXT]) -> Option<SiteText> {
        if index >= self.site_count() {
            return None;
        }
        let at = self.geometry.sites_offset() + index as usize * SITE;
        let fixed = self.u64_at(at).load(Relaxed);
        let lens = self.u64_at(at + 8).load(Relaxed);
        for k in 0..SITE_TEXT / 8 {
            let w = self.u64_at(at + 16 + 8 * k).load(Relaxed).to_le_bytes();
            buf[8 * k..8 * k + 8].copy_from_slice(&w);
        }
        let sec = lens as u16 as usize;
        let file = (lens >> 16) as u16 as usize;
        let fmt = (lens >> 32) as u16 as usize;
        if sec + file + fmt > SITE_TEXT {
            return None;
        }
        Some(SiteText {
            line: fixed as u32,
            level: (fixed >> 32) as u8,
            section: 0..sec,
            file: sec..sec + file,
            fmt: sec + file..sec + file + fmt,
        })
    }

    // --- rings -----------------------------------------------------------------------------

    fn ring_at(&self, i: usize) -> usize {
        self.geometry.rings_offset() + i * self.geometry.ring_stride()
    }

    pub(crate) fn ring_state(&self, i: usize) -> u32 {
        self.u32_at(self.ring_at(i) + R_STATE).load(Acquire)
    }

    /// Claims ring `i` for thread `tid` (the recorder's lock held): state, name, and a start
    /// at the current head (a reused ring forgets its previous thread's records; the head keeps
    /// growing, so no sequence number is written twice).
    pub(crate) fn claim_ring(&self, i: usize, tid: u32, name: &str) {
        let r = self.ring_at(i);
        self.u32_at(r + R_STATE).store(FREE, Release);
        let head = self.u64_at(r + R_HEAD).load(Acquire);
        self.u64_at(r + R_START).store(head, Release);
        self.u32_at(r + R_TID).store(tid, Relaxed);
        let mut n = [0u8; NAME];
        let b = name.as_bytes();
        let k = b.len().min(NAME);
        n[..k].copy_from_slice(&b[..k]);
        for (j, chunk) in n.chunks(8).enumerate() {
            self.u64_at(r + R_NAME + 8 * j)
                .store(u64::from_le_bytes(chunk.try_into().unwrap()), Relaxed);
        }
        self.u32_at(r + R_STATE).store(LIVE, Release);
    }

    pub(crate) fn retire_ring(&self, i: usize) {
        self.u32_at(self.ring_at(i) + R_STATE)
            .store(RETIRED, Release);
    }

    /// The owner of ring `i`: thread id and name (NUL-padded).
    pub(crate) fn ring_owner(&self, i: usize) -> (u32, [u8; NAME]) {
        let r = self.ring_at(i);
        let mut n = [0u8; NAME];
        for j in 0..NAME / 8 {
            let w = self.u64_at(r + R_NAME + 8 * j).load(Relaxed).to_le_bytes();
            n[8 * j..8 * j + 8].copy_from_slice(&w);
        }
        (self.u32_at(r + R_TID).load(Relaxed), n)
    }

    /// The writer's handle on ring `i`.
    pub(crate) fn writer(&self, i: usize) -> RingWriter {
        const { assert!(R_HEAD + 8 <= RING_HEADER && (RING_HEADER - R_HEAD) % 8 == 0) };
        let r = self.ring_at(i);
        assert!(
            r + self.geometry.ring_stride() <= self.len,
            "ring {i} outside the recording"
        );
        // SAFETY: the ring (header and slots) lies inside the mapping (checked above), whose
        // base is page-aligned and never null. The pointer is derived from the mapping's base,
        // not from a reference to one word, so that it may reach the head before it and every
        // slot after it.
        let slots = unsafe { std::ptr::NonNull::new_unchecked(self.base.add(r + RING_HEADER)) };
        RingWriter {
            slots: slots.cast(),
        }
    }

    pub(crate) fn head(&self, i: usize) -> u64 {
        self.u64_at(self.ring_at(i) + R_HEAD).load(Acquire)
    }

    /// The first sequence number of ring `i`'s current owner.
    pub(crate) fn start(&self, i: usize) -> u64 {
        self.u64_at(self.ring_at(i) + R_START).load(Acquire)
    }

    /// Record `seq` of ring `i`, if the ring still holds it whole: its words, or `None`.
    pub(crate) fn read_slot(&self, i: usize, seq: u64) -> Option<[u64; 8]> {
        let slots = u64::from(self.geometry.ring_slots);
        let at = self.ring_at(i) + RING_HEADER + (seq % slots) as usize * SLOT;
        let mut w = [0u64; 8];
        for (k, x) in w.iter_mut().enumerate() {
            *x = self.u64_at(at + 8 * k).load(Relaxed);
        }
        std::sync::atomic::fence(Acquire);
        // The writer overwrites this slot with record `seq + slots`, while `head` is that; a
        // head still below it after the reads means the words read were record `seq`'s.
        let head = self.head(i);
        if w[2] != seq || head.wrapping_sub(seq) >= slots {
            return None;
        }
        Some(w)
    }

    pub(crate) fn no_ring_count(&self) -> &AtomicU64 {
        self.u64_at(H_NO_RING)
    }
}

/// Where a site's strings lie in the buffer `read_site` filled.
pub(crate) struct SiteText {
    pub(crate) line: u32,
    pub(crate) level: u8,
    pub(crate) section: std::ops::Range<usize>,
    pub(crate) file: std::ops::Range<usize>,
    pub(crate) fmt: std::ops::Range<usize>,
}

/// One thread's ring, as its writer sees it: its first slot, with the head in the ring's
/// header before it. One non-null word, so that `Option<RingWriter>` is one word too: the
/// record path reads it from thread-local storage and tests it at every record, and then
/// reaches the head and the slot's words at small offsets (one-byte displacements, shorter
/// instructions) from it.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub(crate) struct RingWriter {
    slots: std::ptr::NonNull<AtomicU64>,
}

const _: () = assert!(std::mem::size_of::<Option<RingWriter>>() == std::mem::size_of::<usize>());

impl RingWriter {
    /// Appends one record: the slot's eight words, then the head (Release).
    ///
    /// # Safety
    /// Only the ring's owner thread calls it, while the mapping lives; `mask` is the ring's
    /// slot count minus one.
    #[inline(always)]
    pub(crate) unsafe fn push(&self, mask: u64, words: [u64; 8]) {
        // SAFETY: the caller's contract; the head (`RING_HEADER - R_HEAD` bytes before the
        // first slot) and the slots lie inside the mapping (see `View::writer`).
        unsafe {
            let slots = self.slots.as_ptr();
            let head = &*slots.sub((RING_HEADER - R_HEAD) / 8);
            let h = head.load(Relaxed);
            // Orders the previous head store before this slot's stores, for a reader that
            // sees one of them and then re-reads the head (free on x86-64).
            std::sync::atomic::fence(Release);
            let slot = slots.add(((h & mask) as usize) * (SLOT / 8));
            let mut words = words;
            words[2] = h;
            for (k, w) in words.iter().enumerate() {
                (*slot.add(k)).store(*w, Relaxed);
            }
            head.store(h + 1, Release);
        }
    }
}
