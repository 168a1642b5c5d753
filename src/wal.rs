//! `spindle wal inspect DIR` and `spindle wal verify DIR`: a spindle-wal log read without
//! changing it (opening it as a log would cut a torn tail).

use std::io::Write;
use std::path::Path;

use spindle_wal::inspect::{inspect, Inspection};
use spindle_wal::Dir;

use crate::exit::{self, CliError, CliResult};

fn read(dir: &Path) -> CliResult<Inspection> {
    let storage =
        Dir::read_only(dir).map_err(|e| CliError::Usage(format!("{}: {e}", dir.display())))?;
    inspect(&storage).map_err(|e| CliError::Usage(format!("{}: {e}", dir.display())))
}

fn json(dir: &Path, i: &Inspection) -> serde_json::Value {
    serde_json::json!({
        "dir": dir.display().to_string(),
        "segments": i.segments.iter().map(|s| serde_json::json!({
            "name": s.name,
            "number": s.number,
            "first_lsn": s.first_lsn,
            "records": s.records,
            "bytes": s.bytes,
            "valid_bytes": s.valid_bytes,
            "problem": s.problem,
        })).collect::<Vec<_>>(),
        "records": i.records,
        "first_lsn": i.first_lsn,
        "last_lsn": i.last_lsn,
        "crc_errors": i.crc_errors,
        "torn_tail": i.torn_tail.as_ref().map(|(b, why)| serde_json::json!({"bytes": b, "why": why})),
        "damage": i.damage,
        "ok": i.damage.is_empty(),
    })
}

fn write_json(v: &serde_json::Value) -> CliResult<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, v)
        .map_err(std::io::Error::from)
        .and_then(|()| writeln!(out))
        .map_err(|e| CliError::Execution(format!("cannot write: {e}")))
}

fn summary(i: &Inspection) -> String {
    let mut s = match i.records {
        0 => format!("{} segments, no record", i.segments.len()),
        n => format!(
            "{} segments, {n} records, LSN {} to {}",
            i.segments.len(),
            i.first_lsn,
            i.last_lsn
        ),
    };
    s.push_str(&format!(", {} CRC errors", i.crc_errors));
    if let Some((b, why)) = &i.torn_tail {
        s.push_str(&format!(
            "; a torn tail of {b} bytes ({why}) that the next open cuts"
        ));
    }
    s
}

/// `spindle wal inspect DIR [--json]`: exit 0 when it could be read (damaged or not).
pub fn inspect_cmd(dir: &Path, as_json: bool) -> CliResult<u8> {
    let i = read(dir)?;
    if as_json {
        write_json(&json(dir, &i))?;
        return Ok(exit::HOLDS);
    }
    let mut out = std::io::stdout().lock();
    let io = |e: std::io::Error| CliError::Execution(format!("cannot write: {e}"));
    writeln!(
        out,
        "{:<26} {:>12} {:>10} {:>12} {:>12}  problem",
        "segment", "first LSN", "records", "bytes", "valid bytes"
    )
    .map_err(io)?;
    for s in &i.segments {
        writeln!(
            out,
            "{:<26} {:>12} {:>10} {:>12} {:>12}  {}",
            s.name,
            s.first_lsn,
            s.records,
            s.bytes,
            s.valid_bytes,
            s.problem.as_deref().unwrap_or("-")
        )
        .map_err(io)?;
    }
    writeln!(out, "{}", summary(&i)).map_err(io)?;
    for d in &i.damage {
        writeln!(out, "damage: {d}").map_err(io)?;
    }
    Ok(exit::HOLDS)
}

/// `spindle wal verify DIR [--json]`: exit 0 when the log opens without losing a record, 1
/// when it is damaged.
pub fn verify_cmd(dir: &Path, as_json: bool) -> CliResult<u8> {
    let i = read(dir)?;
    if as_json {
        write_json(&json(dir, &i))?;
    } else if i.damage.is_empty() {
        outln!("{}: ok: {}", dir.display(), summary(&i));
    } else {
        outln!("{}: DAMAGED: {}", dir.display(), summary(&i));
        for d in &i.damage {
            outln!("  {d}");
        }
    }
    Ok(if i.damage.is_empty() {
        exit::HOLDS
    } else {
        exit::VIOLATED
    })
}
