//! Where segments live: a directory of files ([`Dir`], the real one), or a model of a disk that
//! fails the way disks fail ([`faulty::FaultyStorage`], for tests). The log does all its I/O
//! through these two traits, so the fault-injection tests run the same code as production.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

pub mod faulty;

/// The lock file in a log's directory: held (`flock`) by the process that has the log open.
pub const LOCK: &str = "LOCK";

/// A directory of segment files.
pub trait Storage: Send + Sync {
    /// The names of the files in it (not `.` or `..`), in any order.
    fn list(&self) -> io::Result<Vec<String>>;
    /// Creates file `name`, which must not exist.
    fn create(&self, name: &str) -> io::Result<Box<dyn StorageFile>>;
    /// Opens file `name` for reading and writing (reading only, for a read-only storage).
    fn open(&self, name: &str) -> io::Result<Box<dyn StorageFile>>;
    /// Removes file `name`.
    fn remove(&self, name: &str) -> io::Result<()>;
    /// Renames file `from` to `to` (replacing `to`).
    fn rename(&self, from: &str, to: &str) -> io::Result<()>;
    /// Makes the directory's entries (created and removed files) durable.
    fn sync_dir(&self) -> io::Result<()>;
    /// Takes the directory for this process until the storage is dropped; fails if another
    /// holds it. (Default: nothing to take.)
    fn lock(&self) -> io::Result<()> {
        Ok(())
    }
    /// Where it is, for messages.
    fn describe(&self) -> String;
}

/// One file.
pub trait StorageFile: Send + Sync {
    /// Its length in bytes.
    fn size(&self) -> io::Result<u64>;
    /// Reads up to `buf.len()` bytes at `offset`; 0 at the end.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// Writes some of `buf` at `offset` (possibly fewer bytes than asked).
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize>;
    /// Makes its data durable (`fdatasync`).
    fn sync_data(&self) -> io::Result<()>;
    /// Cuts it to `len` bytes.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Allocates its blocks up to `len` bytes, extending it with zeros if it is shorter, so
    /// that writes there change no metadata; where the file system cannot, does nothing.
    fn allocate(&self, len: u64) -> io::Result<()>;
}

impl dyn StorageFile {
    /// Writes all of `buf` at `offset`, however many calls it takes.
    pub(crate) fn write_all_at(&self, mut buf: &[u8], mut offset: u64) -> io::Result<()> {
        while !buf.is_empty() {
            match self.write_at(buf, offset) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    buf = &buf[n..];
                    offset += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Its first `n` bytes (fewer if it is shorter), however many reads it takes.
    pub(crate) fn read_prefix(&self, n: usize) -> io::Result<Vec<u8>> {
        // A file too large for memory (a stray file named like a segment) is an error to
        // report where the reservation fails (under a memory limit, `ulimit -v`); under
        // overcommit a reservation larger than memory can still succeed and the reads then
        // exhaust it.
        let mut buf = Vec::new();
        buf.try_reserve_exact(n).map_err(|_| {
            io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!("{n} bytes do not fit in memory"),
            )
        })?;
        buf.resize(n, 0);
        let mut at = 0;
        while at < n {
            match self.read_at(&mut buf[at..], at as u64) {
                Ok(0) => break,
                Ok(k) => at += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        buf.truncate(at);
        Ok(buf)
    }

    /// The whole file.
    pub(crate) fn read_all(&self) -> io::Result<Vec<u8>> {
        let len = usize::try_from(self.size()?).map_err(|_| io::ErrorKind::OutOfMemory)?;
        self.read_prefix(len)
    }
}

/// A real directory.
pub struct Dir {
    path: PathBuf,
    /// The lock file, held while this lives (see [`Storage::lock`]).
    lock: std::sync::Mutex<Option<File>>,
    /// Files open for reading only; nothing is created, removed, renamed or locked.
    read_only: bool,
}

impl Dir {
    /// The directory at `path`, created if it does not exist.
    pub fn new(path: impl AsRef<Path>) -> io::Result<Dir> {
        std::fs::create_dir_all(path.as_ref())?;
        Dir::existing(path)
    }

    /// The directory at `path`, which must exist; its files are opened for reading and
    /// writing (for reading only, see [`Dir::read_only`]).
    pub fn existing(path: impl AsRef<Path>) -> io::Result<Dir> {
        let path = path.as_ref().to_path_buf();
        if !std::fs::metadata(&path)?.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a directory", path.display()),
            ));
        }
        Ok(Dir {
            path,
            lock: std::sync::Mutex::new(None),
            read_only: false,
        })
    }

    /// The directory at `path`, which must exist, for reading only: its files are opened
    /// read-only (a log that this user may read but not write can be inspected; a write to
    /// one fails with the system's "bad file descriptor"), and every change of the directory
    /// (create, remove, rename, lock) fails. For [`inspect`](crate::inspect::inspect);
    /// [`Wal::open_on`](crate::Wal::open_on) refuses it at its first change.
    pub fn read_only(path: impl AsRef<Path>) -> io::Result<Dir> {
        let mut d = Dir::existing(path)?;
        d.read_only = true;
        Ok(d)
    }

    /// The error of a change asked of a read-only directory.
    fn refuse(&self) -> io::Result<()> {
        if self.read_only {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("{} was opened read-only", self.path.display()),
            ));
        }
        Ok(())
    }
}

impl Storage for Dir {
    fn list(&self) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for e in std::fs::read_dir(&self.path)? {
            names.push(e?.file_name().to_string_lossy().into_owned());
        }
        Ok(names)
    }

    fn create(&self, name: &str) -> io::Result<Box<dyn StorageFile>> {
        self.refuse()?;
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(self.path.join(name))?;
        Ok(Box::new(RealFile(f)))
    }

    fn open(&self, name: &str) -> io::Result<Box<dyn StorageFile>> {
        let f = OpenOptions::new()
            .read(true)
            .write(!self.read_only)
            .open(self.path.join(name))?;
        Ok(Box::new(RealFile(f)))
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        self.refuse()?;
        std::fs::remove_file(self.path.join(name))
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        self.refuse()?;
        std::fs::rename(self.path.join(from), self.path.join(to))
    }

    fn sync_dir(&self) -> io::Result<()> {
        File::open(&self.path)?.sync_all()
    }

    fn describe(&self) -> String {
        self.path.display().to_string()
    }

    fn lock(&self) -> io::Result<()> {
        self.refuse()?;
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(self.path.join(LOCK))?;
        match rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(rustix::io::Errno::WOULDBLOCK) => {
                return Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    format!("{} is open in another process", self.path.display()),
                ))
            }
            Err(e) => return Err(e.into()),
        }
        *self.lock.lock().unwrap_or_else(|e| e.into_inner()) = Some(f);
        Ok(())
    }
}

struct RealFile(File);

impl StorageFile for RealFile {
    fn size(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        std::os::unix::fs::FileExt::read_at(&self.0, buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        std::os::unix::fs::FileExt::write_at(&self.0, buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
    fn allocate(&self, len: u64) -> io::Result<()> {
        match rustix::fs::fallocate(&self.0, rustix::fs::FallocateFlags::empty(), 0, len) {
            // Not every file system allocates ahead (then records extend the file instead).
            Err(rustix::io::Errno::OPNOTSUPP) | Err(rustix::io::Errno::NOSYS) => Ok(()),
            r => r.map_err(io::Error::from),
        }
    }
}
