//! Reading durable records back, a segment at a time.

use crate::format::{self, Next, HEADER};
use crate::storage::Storage;
use crate::{Error, ErrorKind, Lsn, Segment};

/// Durable records, in order: `(lsn, bytes)`. Stops with an error at a damaged record or at a
/// gap between segments (a record missing that the log says it holds).
pub struct Iter<'a> {
    pub(crate) storage: &'a dyn Storage,
    /// The segments not read yet.
    pub(crate) segments: Vec<Segment>,
    pub(crate) from: Lsn,
    /// The last LSN to return (durable when the iterator was made).
    pub(crate) end: Lsn,
    pub(crate) bytes: Vec<u8>,
    pub(crate) at: usize,
    /// The LSN of the record at `at`: the next one due.
    pub(crate) lsn: Lsn,
    /// Whether a segment is loaded in `bytes`.
    pub(crate) loaded: bool,
}

impl Iter<'_> {
    fn stop(&mut self, why: String) -> Option<Result<(Lsn, Vec<u8>), Error>> {
        self.segments.clear();
        self.loaded = false;
        self.lsn = self.end.saturating_add(1);
        Some(Err(Error::new(ErrorKind::NotAWal, why)))
    }
}

impl Iterator for Iter<'_> {
    type Item = Result<(Lsn, Vec<u8>), Error>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.lsn > self.end {
                return None;
            }
            if !self.loaded {
                if self.segments.is_empty() {
                    if self.lsn == 0 {
                        return None;
                    }
                    let (lsn, end) = (self.lsn, self.end);
                    return self.stop(format!(
                        "records {lsn} to {end} are missing: the segments end before them"
                    ));
                }
                let seg = self.segments.remove(0);
                let name = format::segment_name(seg.number);
                // The first segment may begin before `lsn` (records are skipped up to it);
                // every later one must begin where the previous one ended.
                if self.lsn != 0 && seg.first_lsn != self.lsn {
                    let lsn = self.lsn;
                    return self.stop(format!(
                        "{name} begins at LSN {} where {lsn} was next: records are missing",
                        seg.first_lsn
                    ));
                }
                let read = self
                    .storage
                    .open(&name)
                    .and_then(|f| f.read_all())
                    .map_err(|e| Error::io(format!("cannot read {name}"), e));
                match read {
                    Ok(b) => self.bytes = b,
                    Err(e) => {
                        self.segments.clear();
                        self.lsn = self.end.saturating_add(1);
                        return Some(Err(e));
                    }
                }
                self.at = HEADER;
                self.lsn = seg.first_lsn;
                self.loaded = true;
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
                Next::End => self.loaded = false,
                Next::Bad(why) => {
                    return self.stop(format!("a durable record is damaged: {why}"));
                }
            }
        }
    }
}
