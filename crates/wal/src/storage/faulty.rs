//! A disk that fails the way disks fail, for tests: in memory, deterministic from a seed.
//!
//! Each file has its *current* bytes (what reads see: the page cache) and its *durable* bytes
//! (what survives a power loss). Faults, set with [`FaultyStorage::set_faults`]:
//!
//! - **short writes**: a write stores a random prefix of what it was given and says so;
//! - **`ENOSPC`**: writes fail once a budget of bytes is spent;
//! - **`EIO` from a write** or **from a sync** (the `k`-th of each); a failed sync behaves like
//!   Linux after "fsyncgate": the data written since the last good sync is *lost* — a later
//!   sync that succeeds does not make it durable, unless those bytes are written again — while
//!   reads still return it;
//! - **power loss** ([`FaultyStorage::power_loss`]): every file keeps its durable bytes and a
//!   random prefix of what was written since (a write torn at any byte), sometimes with garbage
//!   in that prefix; files created or removed since the last directory sync may come back or
//!   vanish.

use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use super::{Storage, StorageFile};

/// Which faults to inject from now on (all off by default).
#[derive(Clone, Debug, Default)]
pub struct Faults {
    /// Writes store a random prefix of their buffer.
    pub short_writes: bool,
    /// Writes fail with `ENOSPC` once this many more bytes were written.
    pub space: Option<u64>,
    /// The write after this many more writes fails with `EIO`.
    pub fail_write_after: Option<u64>,
    /// The sync after this many more syncs fails with `EIO` (and loses the data it was to
    /// make durable).
    pub fail_sync_after: Option<u64>,
    /// The machine dies during the write after this many more writes: that write stores a
    /// random prefix of its buffer, then the disk is frozen (see [`FaultyStorage::freeze`]).
    pub die_after_writes: Option<u64>,
}

#[derive(Clone, Default)]
struct MemFile {
    current: Vec<u8>,
    durable: Vec<u8>,
    /// Byte ranges whose data a failed sync lost: never durable, whatever happens next.
    lost: Vec<std::ops::Range<usize>>,
}

impl MemFile {
    /// The length of the prefix the durable and current bytes share.
    fn common(&self) -> usize {
        self.durable
            .iter()
            .zip(&self.current)
            .take_while(|(a, b)| a == b)
            .count()
    }

    /// `bytes` with the lost ranges put back to their durable contents (zeros past them).
    fn without_lost(&self, mut bytes: Vec<u8>) -> Vec<u8> {
        for r in &self.lost {
            let end = r.end.min(bytes.len());
            let start = r.start.min(end);
            for (i, b) in bytes[start..end].iter_mut().enumerate() {
                *b = self.durable.get(start + i).copied().unwrap_or(0);
            }
        }
        bytes
    }

    /// What survives a power loss: of the bytes written since the last sync, those before a
    /// point `cut` picks (a write torn at any byte), with garbage in them if `garbage`; after
    /// it, what the disk held before (zeros where nothing was). Lost ranges stay lost.
    fn survive(&mut self, cut: u64, garbage: bool) {
        let out = if self.current.len() < self.durable.len() && cut % 2 == 1 {
            self.durable.clone() // an unsynced truncation undone
        } else {
            let common = self.common();
            let len = self.current.len().max(self.durable.len());
            let changed_end = (common..len)
                .rev()
                .find(|&i| self.current.get(i) != self.durable.get(i))
                .map_or(common, |i| i + 1);
            let keep = common + (cut as usize >> 1) % (changed_end - common + 1);
            let mut out = self.current[..keep.min(self.current.len())].to_vec();
            for i in out.len()..self.current.len() {
                out.push(self.durable.get(i).copied().unwrap_or(0));
            }
            if garbage && keep > common && out.len() > common {
                let at = common + (cut as usize >> 7) % (keep.min(out.len()) - common);
                out[at] ^= 0x5A;
            }
            out
        };
        let out = self.without_lost(out);
        self.current = out.clone();
        self.durable = out;
        self.lost.clear();
    }
}

struct State {
    /// The directory as the running system sees it: name → file.
    names: BTreeMap<String, u64>,
    /// The directory as the disk holds it (at the last directory sync).
    durable_names: BTreeMap<String, u64>,
    /// Every file a name (either directory) or an open handle refers to. A file removed while
    /// open stays readable and writable through its handle, as on Linux.
    data: BTreeMap<u64, MemFile>,
    next_id: u64,
    faults: Faults,
    /// The machine is dead: every change fails (see [`FaultyStorage::freeze`]).
    frozen: bool,
    rng: u64,
    injected: u64,
}

impl State {
    fn rand(&mut self, n: u64) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        if n == 0 {
            0
        } else {
            self.rng % n
        }
    }

    fn check(&self) -> io::Result<()> {
        if self.frozen {
            Err(eio())
        } else {
            Ok(())
        }
    }
}

/// Counts down `slot`; true (and the fault counted) when it reaches its turn.
fn due(slot: &mut Option<u64>, injected: &mut u64) -> bool {
    match slot {
        Some(0) => {
            *slot = None;
            *injected += 1;
            true
        }
        Some(k) => {
            *k -= 1;
            false
        }
        None => false,
    }
}

/// A directory of files in memory that fails on demand. Keep a clone of the `Arc` for the test
/// while the log owns another.
pub struct FaultyStorage {
    state: Mutex<State>,
}

impl FaultyStorage {
    /// An empty disk whose random choices follow `seed`.
    pub fn new(seed: u64) -> Arc<FaultyStorage> {
        Arc::new(FaultyStorage {
            state: Mutex::new(State {
                names: BTreeMap::new(),
                durable_names: BTreeMap::new(),
                data: BTreeMap::new(),
                next_id: 1,
                faults: Faults::default(),
                frozen: false,
                rng: seed | 1,
                injected: 0,
            }),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Injects `faults` from now on (replacing the previous ones).
    pub fn set_faults(&self, faults: Faults) {
        self.state().faults = faults;
    }

    /// How many faults (short writes included) were injected so far.
    pub fn injected(&self) -> u64 {
        self.state().injected
    }

    /// The machine dies now: from here on every write, sync, creation, removal and rename
    /// fails with `EIO`, so that a log still running cannot change the disk, until
    /// [`power_loss`](Self::power_loss) or [`thaw`](Self::thaw).
    pub fn freeze(&self) {
        self.state().frozen = true;
    }

    /// The process that was using the disk died, the machine did not: the disk works again
    /// and keeps everything written (synced or not), faults switched off.
    pub fn thaw(&self) {
        let mut s = self.state();
        s.faults = Faults::default();
        s.frozen = false;
    }

    /// The power fails: see the module's documentation. Each directory entry changed since
    /// the last directory sync (created, removed, renamed) is found as it is now or as it was
    /// then, at random. Faults are switched off, and the disk works again.
    pub fn power_loss(&self) {
        let mut s = self.state();
        s.faults = Faults::default();
        s.frozen = false;
        let mut all: Vec<String> = s.names.keys().cloned().collect();
        all.extend(s.durable_names.keys().cloned());
        all.sort();
        all.dedup();
        let mut dir = BTreeMap::new();
        for name in all {
            let (now, then) = (
                s.names.get(&name).copied(),
                s.durable_names.get(&name).copied(),
            );
            let pick = if now == then || s.rand(2) == 0 {
                now
            } else {
                then
            };
            if let Some(id) = pick {
                dir.insert(name, id);
            }
        }
        let ids: Vec<u64> = dir.values().copied().collect();
        let mut data = BTreeMap::new();
        for id in ids {
            if data.contains_key(&id) {
                continue;
            }
            let (garbage, cut) = (s.rand(3) == 0, s.rand(u64::MAX));
            let mut f = s.data.get(&id).cloned().unwrap_or_default();
            f.survive(cut, garbage);
            data.insert(id, f);
        }
        s.data = data;
        s.names = dir.clone();
        s.durable_names = dir;
    }
}

fn eio() -> io::Error {
    io::Error::from_raw_os_error(5)
}

struct Handle {
    disk: Arc<FaultyStorage>,
    id: u64,
}

impl Handle {
    fn with<T>(&self, f: impl FnOnce(&mut State, u64) -> io::Result<T>) -> io::Result<T> {
        let mut s = self.disk.state();
        if !s.data.contains_key(&self.id) {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                "lost in a power loss",
            ));
        }
        f(&mut s, self.id)
    }
}

impl StorageFile for Handle {
    fn size(&self) -> io::Result<u64> {
        self.with(|s, n| Ok(s.data[&n].current.len() as u64))
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.with(|s, n| {
            let data = &s.data[&n].current;
            let at = (offset as usize).min(data.len());
            let k = buf.len().min(data.len() - at);
            buf[..k].copy_from_slice(&data[at..at + k]);
            Ok(k)
        })
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        self.with(|s, n| {
            if s.frozen || due(&mut s.faults.fail_write_after, &mut s.injected) {
                return Err(eio());
            }
            let mut k = buf.len();
            let mut die = false;
            if due(&mut s.faults.die_after_writes, &mut s.injected) {
                k = s.rand(buf.len() as u64 + 1) as usize;
                die = true;
            } else if s.faults.short_writes && k > 1 {
                k = 1 + s.rand(k as u64) as usize;
                s.injected += u64::from(k < buf.len());
            }
            if let Some(space) = s.faults.space {
                if space < k as u64 {
                    s.injected += 1;
                    return Err(io::Error::from_raw_os_error(28)); // ENOSPC
                }
                s.faults.space = Some(space - k as u64);
            }
            let f = s.data.get_mut(&n).expect("checked");
            let at = offset as usize;
            if f.current.len() < at + k {
                f.current.resize(at + k, 0);
            }
            f.current[at..at + k].copy_from_slice(&buf[..k]);
            // Written again, the bytes are dirty again: the next good sync writes them.
            let mut lost = Vec::new();
            for r in f.lost.drain(..) {
                if r.start < at {
                    lost.push(r.start..r.end.min(at));
                }
                if r.end > at + k {
                    lost.push(r.start.max(at + k)..r.end);
                }
            }
            f.lost = lost;
            if die {
                s.frozen = true;
                return Err(eio());
            }
            Ok(k)
        })
    }

    fn sync_data(&self) -> io::Result<()> {
        self.with(|s, n| {
            let fail = s.frozen || due(&mut s.faults.fail_sync_after, &mut s.injected);
            let f = s.data.get_mut(&n).expect("checked");
            if fail {
                // Linux marks the pages clean after reporting the error: what they held
                // never reaches the disk, even if a later sync succeeds.
                let common = f.common();
                f.lost.push(common..f.current.len());
                return Err(eio());
            }
            f.durable = f.without_lost(f.current.clone());
            Ok(())
        })
    }

    fn allocate(&self, len: u64) -> io::Result<()> {
        self.with(|s, n| {
            s.check()?;
            let f = s.data.get_mut(&n).expect("checked");
            if (f.current.len() as u64) < len {
                f.current.resize(len as usize, 0);
            }
            Ok(())
        })
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.with(|s, n| {
            s.check()?;
            let f = s.data.get_mut(&n).expect("checked");
            f.current.resize(len as usize, 0);
            Ok(())
        })
    }
}

impl Storage for Arc<FaultyStorage> {
    fn list(&self) -> io::Result<Vec<String>> {
        Ok(self.state().names.keys().cloned().collect())
    }

    fn create(&self, name: &str) -> io::Result<Box<dyn StorageFile>> {
        let mut s = self.state();
        s.check()?;
        if s.names.contains_key(name) {
            return Err(io::ErrorKind::AlreadyExists.into());
        }
        let id = s.next_id;
        s.next_id += 1;
        s.names.insert(name.to_owned(), id);
        s.data.insert(id, MemFile::default());
        Ok(Box::new(Handle {
            disk: Arc::clone(self),
            id,
        }))
    }

    fn open(&self, name: &str) -> io::Result<Box<dyn StorageFile>> {
        let id = *self
            .state()
            .names
            .get(name)
            .ok_or(io::ErrorKind::NotFound)?;
        Ok(Box::new(Handle {
            disk: Arc::clone(self),
            id,
        }))
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        let mut s = self.state();
        s.check()?;
        s.names.remove(name).ok_or(io::ErrorKind::NotFound)?;
        Ok(())
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let mut s = self.state();
        s.check()?;
        let id = s.names.remove(from).ok_or(io::ErrorKind::NotFound)?;
        s.names.insert(to.to_owned(), id);
        Ok(())
    }

    fn sync_dir(&self) -> io::Result<()> {
        let mut s = self.state();
        s.check()?;
        s.durable_names = s.names.clone();
        Ok(())
    }

    fn describe(&self) -> String {
        "a faulty disk in memory".into()
    }
}
