//! Reading a log without changing it: what `spindle wal inspect` and `spindle wal verify`
//! print. [`Wal::open`](crate::Wal::open) repairs (cuts a torn tail); this only looks.

use crate::format::{self, BadHeader, Next, HEADER};
use crate::storage::Storage;
use crate::{Error, Lsn};

/// One segment file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentReport {
    /// Its file name.
    pub name: String,
    /// Its number (from the name).
    pub number: u64,
    /// The LSN its header gives its first record (0: no valid header).
    pub first_lsn: Lsn,
    /// Whole records, from the header to the first bad one.
    pub records: u64,
    /// The file's length.
    pub bytes: u64,
    /// Bytes up to the end of its last whole record (the rest is the zeros of its
    /// allocation, or a torn tail).
    pub valid_bytes: u64,
    /// Why the scan stopped before the end of the file, if it did.
    pub problem: Option<String>,
}

/// A whole log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Inspection {
    /// Every segment, in order.
    pub segments: Vec<SegmentReport>,
    /// The first and last LSN of the whole records (0 and 0: none).
    pub first_lsn: Lsn,
    pub last_lsn: Lsn,
    /// Whole records in all segments.
    pub records: u64,
    /// Records whose CRC is wrong (the scan of a segment stops at the first).
    pub crc_errors: u64,
    /// What makes the log damaged: a bad record or header before the last segment's tail,
    /// segments that do not follow each other, files that are not segments. A log with none
    /// opens without losing a record.
    pub damage: Vec<String>,
    /// A torn tail in the last segment (bytes, why): what the next `open` cuts. Not damage: a
    /// crash leaves one, and it never holds an acknowledged record.
    pub torn_tail: Option<(u64, String)>,
}

/// Reads every segment in `storage` and reports what it holds.
pub fn inspect(storage: &dyn Storage) -> Result<Inspection, Error> {
    let names = storage
        .list()
        .map_err(|e| Error::io(format!("cannot list {}", storage.describe()), e))?;
    let mut out = Inspection::default();
    let mut numbered = Vec::new();
    let ours = |n: &String| n != crate::storage::LOCK && n != crate::commit::PREPARED;
    for n in names.into_iter().filter(ours) {
        match format::parse_segment_name(&n) {
            Some(k) => numbered.push((k, n)),
            None => out.damage.push(format!("{n:?} is not a segment")),
        }
    }
    numbered.sort_unstable();
    let count = numbered.len();
    let mut next_lsn: Option<Lsn> = None;
    let mut prev: Option<u64> = None;
    for (i, (number, name)) in numbered.into_iter().enumerate() {
        let last = i + 1 == count;
        let bytes = storage
            .open(&name)
            .and_then(|f| f.read_all())
            .map_err(|e| Error::io(format!("cannot read {name}"), e))?;
        let mut seg = SegmentReport {
            name: name.clone(),
            number,
            first_lsn: 0,
            records: 0,
            bytes: bytes.len() as u64,
            valid_bytes: 0,
            problem: None,
        };
        if prev.is_some_and(|p| p + 1 != number) {
            out.damage.push(format!("segments missing before {name}"));
        }
        prev = Some(number);
        match format::parse_header(&bytes, number) {
            Ok(first) => {
                seg.first_lsn = first;
                if next_lsn.is_some_and(|n| n != first) {
                    out.damage.push(format!(
                        "{name} begins at LSN {first}, the previous segment ends before {}",
                        next_lsn.unwrap_or(0)
                    ));
                }
                let (mut at, mut lsn) = (HEADER, first);
                loop {
                    match format::next(&bytes, at, lsn) {
                        Next::Record { next, .. } => {
                            at = next;
                            lsn += 1;
                        }
                        Next::End => break,
                        Next::Bad(why) => {
                            out.crc_errors += u64::from(why.contains("CRC"));
                            seg.problem = Some(why);
                            break;
                        }
                    }
                }
                seg.records = lsn - first;
                seg.valid_bytes = at as u64;
                let data_end = bytes.iter().rposition(|&b| b != 0).map_or(at, |i| i + 1);
                if seg.problem.is_none() && data_end > at {
                    seg.problem = Some("bytes after the end of the data".into());
                }
                if seg.records > 0 {
                    if out.first_lsn == 0 {
                        out.first_lsn = first;
                    }
                    out.last_lsn = lsn - 1;
                }
                out.records += seg.records;
                next_lsn = Some(lsn);
                if let Some(why) = &seg.problem {
                    let cut = (data_end.max(at) - at) as u64;
                    if last {
                        out.torn_tail = Some((cut, why.clone()));
                    } else {
                        out.damage
                            .push(format!("{name}: {why}, {cut} bytes before its end"));
                    }
                }
            }
            Err(ref e)
                if last && !matches!(e, BadHeader::Newer(_)) && format::unfinished(&bytes) =>
            {
                seg.problem = Some(format!(
                    "{} bytes, no valid header: a creation that never completed (the next open \
                     removes it; it holds no record)",
                    bytes.len()
                ));
            }
            Err(e) => {
                let why = match e {
                    BadHeader::Newer(v) => format!("written by format version {v}"),
                    BadHeader::NotWal => "no segment header".into(),
                    BadHeader::Damaged(w) => w,
                    BadHeader::Short(n) => format!("{n} bytes, no whole header"),
                };
                out.damage.push(format!("{name}: {why}"));
                seg.problem = Some(why);
            }
        }
        out.segments.push(seg);
    }
    Ok(out)
}
