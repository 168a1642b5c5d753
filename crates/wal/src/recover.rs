//! Opening: the directory's segments checked to follow each other, the last one scanned to
//! its first torn or damaged record, cut there, and what is kept written again and synced.

use crate::commit::{create_segment, Writer};
use crate::format::{self, Next, HEADER};
use crate::storage::Storage;
use crate::{Error, ErrorKind, Recovery, Segment};

/// What [`recover`] found: the segments, the writer at the end of the last one.
pub(crate) struct Recovered {
    pub(crate) segments: Vec<Segment>,
    pub(crate) writer: Writer,
    pub(crate) recovery: Recovery,
}

/// Reads the directory: its segments (checked to follow each other), the active one opened
/// with its torn tail cut off, where its next byte goes, and what was found.
pub(crate) fn recover(
    storage: &dyn Storage,
    segment_bytes: u64,
    zero: bool,
) -> Result<Recovered, Error> {
    let names = storage
        .list()
        .map_err(|e| Error::io(format!("cannot list {}", storage.describe()), e))?;
    let mut numbers = Vec::new();
    if names.iter().any(|n| n == crate::commit::PREPARED) {
        // A next segment being prepared: zeros, no record.
        storage
            .remove(crate::commit::PREPARED)
            .map_err(|e| Error::io(format!("cannot remove {}", crate::commit::PREPARED), e))?;
    }
    let ours = |n: &&String| *n != crate::storage::LOCK && *n != crate::commit::PREPARED;
    for n in names.iter().filter(ours) {
        match format::parse_segment_name(n) {
            Some(k) => numbers.push(k),
            None => {
                return Err(Error::new(
                    ErrorKind::NotAWal,
                    format!(
                        "{} holds {n:?}, which is not a segment of a spindle-wal log (a log needs \
                         a directory of its own)",
                        storage.describe()
                    ),
                ))
            }
        }
    }
    numbers.sort_unstable();
    let mut rec = Recovery::default();
    let mut segments: Vec<Segment> = Vec::new();
    for (i, &number) in numbers.iter().enumerate() {
        let name = format::segment_name(number);
        let f = storage
            .open(&name)
            .map_err(|e| Error::io(format!("cannot open {name}"), e))?;
        let read = f.read_prefix(HEADER).and_then(|h| Ok((h, f.size()?)));
        let (header, len) = read.map_err(|e| Error::io(format!("cannot read {name}"), e))?;
        let parsed = format::parse_header(&header, number);
        let unfinished = i + 1 == numbers.len()
            && matches!(parsed, Err(ref e) if !matches!(e, format::BadHeader::Newer(_)))
            && (len <= HEADER as u64
                || format::unfinished(
                    &f.read_all()
                        .map_err(|e| Error::io(format!("cannot read {name}"), e))?,
                ));
        match parsed {
            Ok(first_lsn) => {
                if let Some(prev) = segments.last() {
                    if number != prev.number + 1 || first_lsn <= prev.first_lsn {
                        return Err(Error::new(
                            ErrorKind::NotAWal,
                            format!(
                                "{name} does not follow {}: segments are missing or damaged",
                                format::segment_name(prev.number)
                            ),
                        ));
                    }
                }
                segments.push(Segment { number, first_lsn });
            }
            Err(_) if unfinished => {
                // The last segment, without a valid header and nothing but zeros after where
                // it goes: its creation never completed (records go in only after its header
                // and directory entry are synced). Nothing is lost with it.
                storage
                    .remove(&name)
                    .and_then(|()| storage.sync_dir())
                    .map_err(|e| Error::io(format!("cannot remove {name}"), e))?;
                rec.removed_segments.push(name);
            }
            Err(format::BadHeader::Newer(v)) => {
                return Err(Error::new(
                    ErrorKind::NewerVersion,
                    format!(
                        "{name} was written by a later spindle-wal (format version {v}; this one \
                         reads up to {})",
                        format::VERSION
                    ),
                ))
            }
            Err(format::BadHeader::NotWal) | Err(format::BadHeader::Short(_)) => {
                return Err(Error::new(
                    ErrorKind::NotAWal,
                    format!("{name} is not a spindle-wal segment (no header)"),
                ))
            }
            Err(format::BadHeader::Damaged(why)) => {
                return Err(Error::new(
                    ErrorKind::NotAWal,
                    format!("{name} is damaged: {why}"),
                ))
            }
        }
    }
    rec.segments = segments.len();
    rec.first_lsn = segments.first().map_or(1, |s| s.first_lsn);
    let Some(last) = segments.last().copied() else {
        let f = create_segment(storage, 1, 1, segment_bytes, zero)?;
        segments.push(Segment {
            number: 1,
            first_lsn: 1,
        });
        rec.segments = 1;
        return Ok(Recovered {
            segments,
            writer: Writer {
                active: f,
                offset: HEADER as u64,
                spare: Vec::new(),
            },
            recovery: rec,
        });
    };
    // Scan the last segment to its first torn or damaged record.
    let name = format::segment_name(last.number);
    let f = storage
        .open(&name)
        .map_err(|e| Error::io(format!("cannot open {name}"), e))?;
    let last_bytes = f
        .read_all()
        .map_err(|e| Error::io(format!("cannot read {name}"), e))?;
    let (mut at, mut lsn) = (HEADER, last.first_lsn);
    loop {
        match format::next(&last_bytes, at, lsn) {
            Next::Record { next, .. } => {
                at = next;
                lsn += 1;
            }
            Next::End => break,
            Next::Bad(why) => {
                // What follows the last whole record, up to the last byte that is not a zero
                // of the segment's allocation.
                let end = last_bytes
                    .iter()
                    .rposition(|&b| b != 0)
                    .map_or(at, |i| i + 1);
                rec.dropped_bytes = end.saturating_sub(at) as u64;
                rec.dropped_reason = Some(why);
                break;
            }
        }
    }
    rec.last_lsn = lsn - 1;
    let data_end = last_bytes
        .iter()
        .rposition(|&b| b != 0)
        .map_or(at, |i| i + 1);
    if rec.dropped_reason.is_none() && data_end > at {
        // Zeros where the next frame would be, bytes after them: a write torn out of order.
        rec.dropped_bytes = (data_end - at) as u64;
        rec.dropped_reason = Some("bytes after the end of the data".into());
    }
    // Make what is kept durable, even if nothing was cut: the records found may be in the page
    // cache only (the process died, the machine did not), and a record acknowledged after them
    // must not outlive them. They are written again, not only synced: after a failed fsync
    // Linux keeps serving from its cache pages it marked clean without writing them, and a
    // sync alone would not write them now either.
    if rec.dropped_reason.is_some() {
        f.set_len(at as u64)
            .and_then(|()| f.allocate(segment_bytes))
            .map_err(|e| Error::io(format!("cannot cut the torn tail of {name}"), e))?;
    }
    // The directory too: a segment whose creation failed after its header was written may
    // have an entry that was never synced.
    f.write_all_at(&last_bytes[..at], 0)
        .and_then(|()| f.sync_data())
        .and_then(|()| storage.sync_dir())
        .map_err(|e| Error::io(format!("cannot rewrite and sync {name}"), e))?;
    Ok(Recovered {
        segments,
        writer: Writer {
            active: f,
            offset: at as u64,
            spare: Vec::new(),
        },
        recovery: rec,
    })
}
