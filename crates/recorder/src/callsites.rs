//! Sites for callsites that `record!` did not declare: the adapters' (`tracing`, `log`), made
//! the first time a callsite fires and found again by a key of three words.
//!
//! An open-addressing table of pointers to leaked entries: a lookup hashes the key and loads
//! entries until it finds the key or an empty slot (an Acquire load per probe: an entry is
//! written whole before its pointer is published with Release). Inserting takes a lock (so two
//! threads never make two sites for one callsite) and falls back to a map behind the lock when
//! the table is full. Entries live as long as the process, as callsites do.

use std::collections::HashMap;
use std::sync::atomic::{AtomicPtr, Ordering::*};
use std::sync::Mutex;

use crate::Site;

/// What identifies a callsite (addresses of its static metadata, line, level).
pub(crate) type Key = [usize; 3];

struct Entry {
    key: Key,
    site: Site,
}

const TABLE: usize = 4096;
static TABLE_: [AtomicPtr<Entry>; TABLE] = [const { AtomicPtr::new(std::ptr::null_mut()) }; TABLE];
static LOCK: Mutex<Option<HashMap<Key, &'static Site>>> = Mutex::new(None);

fn slot_of(key: &Key) -> usize {
    let h = key.iter().fold(0xCBF2_9CE4_8422_2325u64, |h, &w| {
        (h ^ w as u64).wrapping_mul(0x0100_0000_01B3)
    });
    (h >> 20) as usize % TABLE
}

/// The site of callsite `key`, made by `make` the first time.
#[inline]
pub(crate) fn site(key: Key, make: impl FnOnce() -> Site) -> &'static Site {
    let mut i = slot_of(&key);
    for _ in 0..TABLE {
        let p = TABLE_[i].load(Acquire);
        if p.is_null() {
            break;
        }
        // SAFETY: published entries are leaked (never freed) and written before publication.
        let e = unsafe { &*p };
        if e.key == key {
            return &e.site;
        }
        i = (i + 1) % TABLE;
    }
    insert(key, make)
}

#[cold]
fn insert(key: Key, make: impl FnOnce() -> Site) -> &'static Site {
    let mut map = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let map = map.get_or_insert_with(HashMap::new);
    if let Some(site) = map.get(&key) {
        return site;
    }
    let entry: &'static Entry = Box::leak(Box::new(Entry { key, site: make() }));
    map.insert(key, &entry.site);
    let mut i = slot_of(&key);
    for _ in 0..TABLE {
        if TABLE_[i].load(Relaxed).is_null() {
            TABLE_[i].store(entry as *const Entry as *mut Entry, Release);
            break;
        }
        i = (i + 1) % TABLE;
    }
    &entry.site
}

/// A string of at most [`crate::PAYLOAD`] bytes for a value an adapter gets only as `Debug` or
/// `Display`; what does not fit is dropped (at a character boundary).
pub(crate) struct Short {
    buf: [u8; crate::PAYLOAD],
    len: usize,
}

impl Short {
    pub(crate) fn new() -> Short {
        Short {
            buf: [0; crate::PAYLOAD],
            len: 0,
        }
    }

    pub(crate) fn as_str(&self) -> &str {
        std::str::from_utf8(&self.buf[..self.len]).unwrap_or("")
    }
}

impl std::fmt::Write for Short {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let mut k = s.len().min(self.buf.len() - self.len);
        while k > 0 && !s.is_char_boundary(k) {
            k -= 1;
        }
        self.buf[self.len..self.len + k].copy_from_slice(&s.as_bytes()[..k]);
        self.len += k;
        Ok(())
    }
}
