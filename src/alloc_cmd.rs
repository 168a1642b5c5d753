//! `spindle alloc record -- CMD` and `spindle alloc replay TRACE`: allocation traces of real
//! programs, and playing them back on an allocator (spindle-alloc, glibc, mimalloc, jemalloc,
//! snmalloc).

use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use spindle_alloc::trace::Trace;
use spindle_lab::experiments::alloc::{replay_cli, Who};

use crate::exit::{self, CliError, CliResult};

const LIBRARY: &str = "libspindle_alloc_preload.so";

/// The preload library: `--library`, or next to this executable (where cargo builds it).
fn library(given: Option<&Path>) -> CliResult<PathBuf> {
    if let Some(p) = given {
        // The loader looks a name without a slash up in the library path, not here: an
        // absolute path is what LD_PRELOAD needs.
        return match std::fs::canonicalize(p) {
            Ok(abs) if abs.is_file() => Ok(abs),
            _ => Err(exit::usage(format!("{}: no such library", p.display()))),
        };
    }
    let exe = std::env::current_exe()
        .map_err(|e| CliError::Execution(format!("cannot find this executable: {e}")))?;
    let so = exe.with_file_name(LIBRARY);
    if so.is_file() {
        Ok(so)
    } else {
        Err(exit::usage(format!(
            "{} is not built; build it with `cargo build --release -p spindle-alloc-preload` (or pass --library)",
            so.display()
        )))
    }
}

/// The raw recording's header and written records (the file itself is sparse and 4 GiB).
fn read_raw(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut f = std::fs::File::open(path)?;
    let mut head = vec![0u8; 64];
    f.read_exact(&mut head)?;
    let count = u64::from_le_bytes(head[8..16].try_into().expect("8 bytes"));
    let mut body = Vec::new();
    f.take(count.saturating_mul(32)).read_to_end(&mut body)?;
    head.extend(body);
    Ok(head)
}

pub fn record(out: &Path, library_path: Option<&Path>, command: &[OsString]) -> CliResult<u8> {
    let Some((program, args)) = command.split_first() else {
        return Err(exit::usage("give the command to record after --"));
    };
    let so = library(library_path)?;
    // The output is opened for writing before the command runs, so that a path that cannot
    // be written is refused before anything is recorded, not after (which lost the recording).
    // Not truncated yet: an existing trace is replaced only by a recording that succeeds.
    let existed = out.exists();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(out)
        .map_err(|e| {
            exit::usage(format!(
                "{}: cannot write the trace there: {e}",
                out.display()
            ))
        })?;
    let dir = std::env::temp_dir().join(format!("spindle-alloc-record-{}", std::process::id()));
    std::fs::create_dir_all(&dir)
        .map_err(|e| CliError::Execution(format!("{}: {e}", dir.display())))?;
    let preload = match std::env::var_os("LD_PRELOAD") {
        Some(p) if !p.is_empty() => {
            let mut s = so.clone().into_os_string();
            s.push(":");
            s.push(p);
            s
        }
        _ => so.clone().into_os_string(),
    };
    let child = std::process::Command::new(program)
        .args(args)
        .env("LD_PRELOAD", preload)
        .env("SPINDLE_ALLOC_TRACE", dir.join("raw"))
        .spawn()
        .map_err(|e| CliError::Execution(format!("cannot run {}: {e}", program.to_string_lossy())));
    let result = child.and_then(|mut c| {
        let pid = c.id();
        let status = c
            .wait()
            .map_err(|e| CliError::Execution(format!("wait: {e}")))?;
        convert(&dir.join(format!("raw.{pid}")), out, file, status)
    });
    if result.is_err() && !existed {
        // Nothing recorded: no empty file of ours left behind (only one this run created).
        let _ = std::fs::remove_file(out);
    }
    let others = std::fs::read_dir(&dir)
        .map(|d| d.count().saturating_sub(1))
        .unwrap_or(0);
    let _ = std::fs::remove_dir_all(&dir);
    if others > 0 && result.is_ok() {
        errln!("note: the command started {others} more processes; only its own calls were kept");
    }
    result
}

fn convert(
    raw: &Path,
    out: &Path,
    mut file: std::fs::File,
    status: std::process::ExitStatus,
) -> CliResult<u8> {
    let bytes = read_raw(raw).map_err(|e| {
        CliError::Execution(format!(
            "no recording ({e}): the program made no allocation call through the preloaded library (it did not allocate, is statically linked, or could not load the library{})",
            if status.success() {
                String::new()
            } else {
                format!("; it failed: {status}")
            }
        ))
    })?;
    let (trace, dropped) =
        Trace::from_raw(&bytes).map_err(|e| CliError::Execution(e.to_string()))?;
    let encoded = trace.encode();
    // A regular file loses what it held before; a device (`/dev/null`) has no length.
    let is_file = file.metadata().is_ok_and(|m| m.is_file());
    (if is_file { file.set_len(0) } else { Ok(()) })
        .and_then(|()| file.write_all(&encoded))
        .and_then(|()| file.flush())
        .map_err(|e| CliError::Execution(format!("{}: {e}", out.display())))?;
    errln!(
        "recorded {} calls ({} blocks live at most, {dropped} calls dropped) into {} ({} bytes){}",
        trace.events.len(),
        trace.ids,
        out.display(),
        encoded.len(),
        if status.success() {
            String::new()
        } else {
            format!("; the command failed: {status}")
        }
    );
    Ok(exit::HOLDS)
}

pub fn replay(path: &Path, allocators: &[String], threads: usize, json: bool) -> CliResult<u8> {
    let trace = Trace::load(path).map_err(|e| exit::usage(format!("{}: {e}", path.display())))?;
    let whos: Vec<Who> = if allocators.is_empty() {
        Who::ALL.to_vec()
    } else {
        allocators
            .iter()
            .map(|a| {
                Who::parse(a).ok_or_else(|| {
                    let names: Vec<_> = Who::ALL.iter().map(|w| w.id()).collect();
                    exit::usage(format!(
                        "unknown allocator '{a}' (one of: {})",
                        names.join(", ")
                    ))
                })
            })
            .collect::<CliResult<_>>()?
    };
    let mut rows = Vec::new();
    for who in whos {
        if !json {
            err!("{} … ", who.id());
        }
        let m = replay_cli(&trace, who, threads).map_err(CliError::Execution)?;
        if !json {
            errln!("done");
        }
        rows.push((who, m));
    }
    let mut o = std::io::stdout().lock();
    let w = |e: std::io::Error| CliError::Execution(format!("cannot write: {e}"));
    if json {
        let v = serde_json::json!({
            "trace": path.display().to_string(),
            "calls": trace.events.len(),
            "threads": threads,
            "results": rows.iter().map(|(who, m)| {
                let mut r = serde_json::Map::new();
                r.insert("allocator".into(), who.id().into());
                for (k, v) in m {
                    r.insert((*k).into(), serde_json::json!(v));
                }
                r
            }).collect::<Vec<_>>(),
        });
        serde_json::to_writer_pretty(&mut o, &v)
            .map_err(std::io::Error::from)
            .map_err(w)?;
        writeln!(o).map_err(w)?;
    } else {
        writeln!(
            o,
            "{} calls × {threads} threads (one copy each)",
            trace.events.len()
        )
        .map_err(w)?;
        writeln!(
            o,
            "{:<10} {:>9} {:>9} {:>11} {:>9} {:>9} {:>9}",
            "allocator", "ns/call", "cyc/call", "cyc<50000", "p99.9", "RSS MiB", "RSS/live"
        )
        .map_err(w)?;
        for (who, m) in &rows {
            let g = |k: &str| m.iter().find(|x| x.0 == k).map_or(f64::NAN, |x| x.1);
            writeln!(
                o,
                "{:<10} {:>9.1} {:>9.1} {:>11.1} {:>9.0} {:>9.1} {:>9.2}",
                who.id(),
                g("ns"),
                g("cyc"),
                g("cyc_cut"),
                g("p999"),
                g("rss"),
                g("overhead")
            )
            .map_err(w)?;
        }
    }
    Ok(exit::HOLDS)
}
