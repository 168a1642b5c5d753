//! The on-disk format: segment files, each a header and then records.
//!
//! ```text
//! segment file  NNNNNNNNNNNNNNNNNNNN.wal (the segment number, 20 decimal digits)
//! header        magic "SPNDLWAL" (8) | version u32 | crc u32 | segment u64 | first LSN u64
//!               (crc: CRC32C of the 24 other bytes, the crc field taken as zero)
//! record        length u32 | crc u32 | LSN u64 | payload (length bytes)
//!               (crc: CRC32C of length, LSN and payload)
//! ```
//!
//! Everything is little-endian. LSNs number records 1, 2, 3, … with no gap, across segments:
//! a segment's records are `first LSN`, `first LSN + 1`, … A segment file is usually written
//! with zeros or allocated to its full size ahead of its records, which are then followed by
//! zeros: a frame of zeros is the end of the data, as the end of the file is. A scan stops
//! there, or at the first record whose frame runs past the end of the file, whose CRC is
//! wrong, or whose LSN is not the next one: everything from there on is the torn tail of a
//! write that never completed (a record is acknowledged only after the bytes of every record
//! up to it were synced, so the tail never holds one).

use crate::crc;

pub(crate) const MAGIC: [u8; 8] = *b"SPNDLWAL";
/// The format's version; a file of a later version is refused, never guessed at.
pub const VERSION: u32 = 1;
/// Bytes of a segment header.
pub const HEADER: usize = 32;
/// Bytes of a record's frame before its payload.
pub const FRAME: usize = 16;

/// A segment file's name.
pub(crate) fn segment_name(number: u64) -> String {
    format!("{number:020}.wal")
}

/// The segment number a file name names, if it is a segment's.
pub(crate) fn parse_segment_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".wal")?;
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

pub(crate) fn header(segment: u64, first_lsn: u64) -> [u8; HEADER] {
    let mut h = [0u8; HEADER];
    h[..8].copy_from_slice(&MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h[16..24].copy_from_slice(&segment.to_le_bytes());
    h[24..32].copy_from_slice(&first_lsn.to_le_bytes());
    let c = crc::crc32c(&h);
    h[12..16].copy_from_slice(&c.to_le_bytes());
    h
}

/// What is wrong with a header.
#[derive(Debug, PartialEq)]
pub(crate) enum BadHeader {
    /// Fewer than [`HEADER`] bytes: a segment whose creation never completed.
    Short(usize),
    /// No magic: not a segment of this log.
    NotWal,
    /// Written by a later version of the format.
    Newer(u32),
    /// Its CRC or its segment number is wrong.
    Damaged(String),
}

/// The first LSN of segment `segment`, from its file's first bytes.
pub(crate) fn parse_header(bytes: &[u8], segment: u64) -> Result<u64, BadHeader> {
    if bytes.len() < HEADER {
        return Err(BadHeader::Short(bytes.len()));
    }
    let h = &bytes[..HEADER];
    if h[..8] != MAGIC {
        return Err(BadHeader::NotWal);
    }
    let u32_at = |i: usize| u32::from_le_bytes(h[i..i + 4].try_into().expect("4 bytes"));
    let u64_at = |i: usize| u64::from_le_bytes(h[i..i + 8].try_into().expect("8 bytes"));
    // The CRC first: a header torn by a crash must not pass for a later version's.
    let version = u32_at(8);
    let mut zeroed = [0u8; HEADER];
    zeroed.copy_from_slice(h);
    zeroed[12..16].fill(0);
    if crc::crc32c(&zeroed) != u32_at(12) {
        return Err(BadHeader::Damaged(
            "its header's CRC is wrong (damaged, or written by a later format)".into(),
        ));
    }
    if version > VERSION {
        return Err(BadHeader::Newer(version));
    }
    if version == 0 {
        return Err(BadHeader::Damaged("its header gives version 0".into()));
    }
    if u64_at(16) != segment {
        return Err(BadHeader::Damaged(format!(
            "its header names segment {}",
            u64_at(16)
        )));
    }
    let first = u64_at(24);
    if first == 0 || first > u64::MAX / 2 {
        return Err(BadHeader::Damaged(format!("its first LSN is {first}")));
    }
    Ok(first)
}

/// Whether a segment file whose header is not valid is one whose creation never completed:
/// nothing but zeros after where its header goes (its allocation), so it holds no record.
pub(crate) fn unfinished(bytes: &[u8]) -> bool {
    bytes.iter().skip(HEADER).all(|&b| b == 0)
}

/// Appends record `lsn` with `payload` to `out`.
pub(crate) fn frame(out: &mut Vec<u8>, lsn: u64, payload: &[u8]) {
    let len = u32::try_from(payload.len()).expect("a record's length was checked");
    let mut c = crc::update(!0, &len.to_le_bytes());
    c = crc::update(c, &lsn.to_le_bytes());
    c = !crc::update(c, payload);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&c.to_le_bytes());
    out.extend_from_slice(&lsn.to_le_bytes());
    out.extend_from_slice(payload);
}

/// The next record of a segment's bytes.
#[derive(Debug, PartialEq)]
pub(crate) enum Next {
    /// Record `lsn`, its payload at `payload`, the next record at `next`.
    Record {
        lsn: u64,
        payload: std::ops::Range<usize>,
        next: usize,
    },
    /// The bytes end exactly here.
    End,
    /// A torn or damaged record starts here: why.
    Bad(String),
}

/// Reads the record at `at` of `bytes`, which must be `lsn`.
pub(crate) fn next(bytes: &[u8], at: usize, lsn: u64) -> Next {
    let rest = &bytes[at.min(bytes.len())..];
    // The end of the data: the end of the file, or the zeros of the segment's allocation (a
    // frame of zeros is never a record: LSNs start at 1).
    if rest[..rest.len().min(FRAME)].iter().all(|&b| b == 0) {
        return Next::End;
    }
    if rest.len() < FRAME {
        return Next::Bad(format!("{} bytes of a record frame", rest.len()));
    }
    let len = u32::from_le_bytes(rest[..4].try_into().expect("4 bytes")) as usize;
    let stored = u32::from_le_bytes(rest[4..8].try_into().expect("4 bytes"));
    let found = u64::from_le_bytes(rest[8..16].try_into().expect("8 bytes"));
    if rest.len() - FRAME < len {
        return Next::Bad(format!(
            "a record of {len} bytes with {} left in the file",
            rest.len() - FRAME
        ));
    }
    let payload = &rest[FRAME..FRAME + len];
    let mut c = crc::update(!0, &rest[..4]);
    c = crc::update(c, &rest[8..16]);
    c = !crc::update(c, payload);
    if c != stored {
        return Next::Bad(format!("record {lsn}'s CRC is wrong"));
    }
    if found != lsn {
        return Next::Bad(format!("LSN {found} where {lsn} was next"));
    }
    Next::Record {
        lsn,
        payload: at + FRAME..at + FRAME + len,
        next: at + FRAME + len,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_any_damage_stops_the_scan() {
        let mut seg = header(7, 100).to_vec();
        assert_eq!(parse_header(&seg, 7), Ok(100));
        assert!(matches!(parse_header(&seg, 8), Err(BadHeader::Damaged(_))));
        assert_eq!(parse_header(&seg[..31], 7), Err(BadHeader::Short(31)));
        let payloads: [&[u8]; 3] = [b"", b"one", &[9u8; 300]];
        for (k, p) in payloads.iter().enumerate() {
            frame(&mut seg, 100 + k as u64, p);
        }
        let mut at = HEADER;
        for (k, p) in payloads.iter().enumerate() {
            match next(&seg, at, 100 + k as u64) {
                Next::Record { payload, next, .. } => {
                    assert_eq!(&seg[payload], *p);
                    at = next;
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(next(&seg, at, 103), Next::End);
        // Every single-bit flip and every cut of the last record is caught.
        let last = HEADER + 2 * FRAME + 3;
        for i in last..seg.len() {
            for bit in 0..8 {
                let mut s = seg.clone();
                s[i] ^= 1 << bit;
                assert!(
                    matches!(next(&s, last, 102), Next::Bad(_)),
                    "byte {i} bit {bit}"
                );
            }
            if i > last {
                assert!(
                    matches!(next(&seg[..i], last, 102), Next::Bad(_)),
                    "cut at {i}"
                );
            }
        }
        assert!(matches!(next(&seg, HEADER, 101), Next::Bad(_)), "wrong LSN");
        let mut zeros = seg[..HEADER].to_vec();
        zeros.extend([0u8; 64]);
        assert_eq!(
            next(&zeros, HEADER, 100),
            Next::End,
            "the zeros of the allocation"
        );
        zeros[HEADER + 5] = 1;
        assert!(
            matches!(next(&zeros, HEADER, 100), Next::Bad(_)),
            "not only zeros"
        );
    }

    #[test]
    fn names() {
        assert_eq!(segment_name(42), "00000000000000000042.wal");
        assert_eq!(parse_segment_name(&segment_name(42)), Some(42));
        assert_eq!(parse_segment_name("42.wal"), None);
        assert_eq!(parse_segment_name("0000000000000000004x.wal"), None);
    }
}
