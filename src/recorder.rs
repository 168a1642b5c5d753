//! `spindle recorder dump FILE`: the last records of a recording, from a process that may have
//! died (of a crash, `SIGKILL` or the OOM killer) or may still run.

use std::io::Write;
use std::path::PathBuf;

use spindle_recorder::read::{ReadError, Recording};

use crate::exit::{self, CliError, CliResult};

pub struct DumpArgs {
    pub file: PathBuf,
    pub json: bool,
    pub last: usize,
    pub since: Option<u64>,
    pub section: Vec<String>,
}

pub fn dump(a: DumpArgs) -> CliResult<u8> {
    let rec = Recording::open(&a.file).map_err(|e| match e {
        ReadError::Io(e) => CliError::Usage(format!("{}: {e}", a.file.display())),
        ReadError::Format(f) => CliError::Usage(format!("{}: {f}", a.file.display())),
    })?;
    let (records, skipped) = rec.records(a.last);
    let keep = |r: &&spindle_recorder::read::Record| {
        a.since.is_none_or(|t| r.time_ns >= t)
            && (a.section.is_empty() || a.section.contains(&r.section))
    };
    let records: Vec<_> = records.iter().filter(keep).collect();
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let io = |e: std::io::Error| CliError::Execution(format!("cannot write the dump: {e}"));
    if a.json {
        let recs: Vec<_> = records
            .iter()
            .map(|r| {
                serde_json::json!({
                    "time_ns": r.time_ns,
                    "tid": r.tid,
                    "thread": r.thread,
                    "seq": r.seq,
                    "level": r.level.map(|l| l.name()),
                    "section": r.section,
                    "file": r.file,
                    "line": r.line_no,
                    "message": r.message,
                })
            })
            .collect();
        let doc = serde_json::json!({
            "file": a.file.display().to_string(),
            "pid": rec.pid(),
            "records": recs,
            "slots_skipped": skipped.slots,
            "threads_without_a_ring": rec.threads_without_a_ring(),
        });
        serde_json::to_writer_pretty(&mut out, &doc).map_err(|e| io(e.into()))?;
        writeln!(out).map_err(io)?;
        // The buffer's drop would flush too, but drops the error.
        out.flush().map_err(io)?;
    } else {
        for r in &records {
            out.write_all(r.line.as_bytes()).map_err(io)?;
        }
        out.flush().map_err(io)?;
        errln!(
            "{}: process {}, {} records{}{}",
            a.file.display(),
            rec.pid(),
            records.len(),
            if skipped.slots > 0 {
                format!(
                    ", {} slots skipped (never written, or damaged)",
                    skipped.slots
                )
            } else {
                String::new()
            },
            match rec.threads_without_a_ring() {
                0 => String::new(),
                n => format!(", {n} threads found no ring free and recorded nothing"),
            }
        );
    }
    Ok(exit::HOLDS)
}

/// `--since`: seconds since the Unix epoch (fractions allowed) or an RFC 3339 UTC time
/// `2026-11-24T19:14:11Z` / `2026-11-24T19:14:11.5Z`; nanoseconds since the epoch.
pub fn since_parser(s: &str) -> Result<u64, String> {
    let early = || format!("--since {s}: a time must be at or after 1970");
    let late = || format!("--since {s}: a time must be before 2554 (nanoseconds in 64 bits)");
    if let Ok(x) = s.parse::<f64>() {
        if !(x.is_finite() && x >= 0.0) {
            return Err(early());
        }
        if x * 1e9 >= u64::MAX as f64 {
            return Err(late());
        }
        return Ok((x * 1e9) as u64);
    }
    let bad = || {
        format!("--since {s}: expected seconds since 1970 or a UTC time like 2026-11-24T19:14:11Z")
    };
    let t = s.strip_suffix('Z').ok_or_else(bad)?;
    let (date, time) = t.split_once('T').ok_or_else(bad)?;
    let fields = |x: &str, sep: char| -> Result<Vec<u64>, String> {
        x.split(sep)
            .map(|f| {
                if f.is_empty() || !f.bytes().all(|c| c.is_ascii_digit()) {
                    return Err(bad());
                }
                f.parse::<u64>().map_err(|_| bad())
            })
            .collect()
    };
    let d = fields(date, '-')?;
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let h = fields(hms, ':')?;
    if d.len() != 3 || h.len() != 3 || frac.is_empty() || !frac.bytes().all(|c| c.is_ascii_digit())
    {
        return Err(bad());
    }
    let (y, m, day) = (d[0], d[1], d[2]);
    let leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
    let month_days = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if !(1..=12).contains(&m) || day == 0 || day > month_days[m as usize - 1] {
        return Err(bad());
    }
    if h[0] > 23 || h[1] > 59 || h[2] > 60 {
        return Err(bad());
    }
    if y < 1970 {
        return Err(early());
    }
    let days = days_from_civil(i64::try_from(y).map_err(|_| late())?, m as i64, day as i64);
    let secs = (days as u64)
        .checked_mul(86_400)
        .and_then(|x| x.checked_add(h[0] * 3600 + h[1] * 60 + h[2]))
        .ok_or_else(late)?;
    let frac_ns: u64 = format!("{frac:0<9}")[..9].parse().map_err(|_| bad())?;
    secs.checked_mul(1_000_000_000)
        .and_then(|x| x.checked_add(frac_ns))
        .ok_or_else(late)
}

/// Days since 1970-01-01 of a date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_reads_epoch_seconds_and_utc_times() {
        assert_eq!(since_parser("1.5"), Ok(1_500_000_000));
        assert_eq!(since_parser("1970-01-01T00:00:00Z"), Ok(0));
        assert_eq!(
            since_parser("2025-11-24T19:14:11.123456789Z"),
            Ok(1_764_011_651_123_456_789)
        );
        assert_eq!(
            since_parser("2000-03-01T00:00:00.5Z"),
            Ok(951_868_800_500_000_000)
        );
        for bad in [
            "",
            "-1",
            "yesterday",
            "2025-13-01T00:00:00Z",
            "2025-11-24 19:14:11",
            "1969-12-31T23:59:59Z",
        ] {
            assert!(since_parser(bad).is_err(), "{bad}");
        }
    }
}
