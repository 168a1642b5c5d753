//! Opening, reading back, rotation, checkpoints, and every kind of bad input to `open`.

use std::path::{Path, PathBuf};

use spindle_wal::{ErrorKind, Options, Wal};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spindle-wal-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// The segment files in `dir`, in order.
fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "wal"))
        .collect();
    v.sort();
    v
}

fn records(wal: &Wal, from: u64) -> Vec<(u64, Vec<u8>)> {
    wal.iter_from(from)
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap()
}

fn small() -> Options {
    Options {
        segment_bytes: 300,
        ..Options::default()
    }
}

/// Segments of 64 KiB: room for every record these tests write in one, without the default's
/// 64 MiB of zeros to write and scan (a minute of a debug build under qemu-aarch64).
fn one_segment() -> Options {
    Options {
        segment_bytes: 64 << 10,
        ..Options::default()
    }
}

#[test]
fn records_survive_reopening_across_segments_and_checkpoints() {
    let dir = scratch("reopen");
    {
        let wal = Wal::open(&dir, small()).unwrap();
        assert_eq!(wal.recovery().segments, 1);
        for i in 0..100u32 {
            let lsn = if i % 3 == 0 {
                wal.append_durable(&i.to_le_bytes()).unwrap()
            } else {
                wal.append(&i.to_le_bytes()).unwrap()
            };
            assert_eq!(lsn, u64::from(i) + 1);
        }
        assert_eq!(wal.flush().unwrap(), 100);
        assert_eq!(wal.durable_lsn(), 100);
        let all = records(&wal, 1);
        assert_eq!(all.len(), 100);
        assert!(all
            .iter()
            .enumerate()
            .all(|(i, (l, b))| *l == i as u64 + 1 && b[..] == (i as u32).to_le_bytes()));
        assert_eq!(records(&wal, 60)[0].0, 60);
    }
    let count = segments(&dir).len();
    assert!(count > 3, "{count} segments: rotation did not happen");
    let wal = Wal::open(&dir, small()).unwrap();
    let r = wal.recovery().clone();
    assert_eq!((r.first_lsn, r.last_lsn, r.dropped_bytes), (1, 100, 0));
    assert_eq!(wal.append_durable(b"next").unwrap(), 101);
    wal.truncate_before(50).unwrap();
    let left = segments(&dir).len();
    assert!(left < count, "truncate_before removed nothing");
    let e = wal.iter_from(1).err().expect("LSN 1 was truncated away");
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    let tail = records(&wal, 50);
    assert_eq!(tail.first().map(|r| r.0), Some(50));
    assert_eq!(tail.last().map(|r| r.0), Some(101));
    drop(wal);
    let wal = Wal::open(&dir, small()).unwrap();
    assert!(wal.recovery().first_lsn <= 50 && wal.recovery().last_lsn == 101);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_torn_tail_is_cut_and_reported_and_appending_goes_on_after_it() {
    let dir = scratch("torn");
    {
        let wal = Wal::open(&dir, one_segment()).unwrap();
        for i in 0..10u8 {
            wal.append_durable(&[i; 100]).unwrap();
        }
    }
    let seg = only_segment(&dir);
    // The segment is allocated ahead: its data ends at its last byte that is not zero.
    let bytes = std::fs::read(&seg).unwrap();
    let end = bytes.iter().rposition(|&b| b != 0).unwrap() as u64 + 1;
    // Tear the last record: garbage over its last 50 bytes, of which 20 are zeros.
    let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
    std::os::unix::fs::FileExt::write_at(&f, &[0xAB; 30], end - 50).unwrap();
    std::os::unix::fs::FileExt::write_at(&f, &[0; 20], end - 20).unwrap();
    drop(f);
    let wal = Wal::open(&dir, one_segment()).unwrap();
    let r = wal.recovery();
    assert_eq!(r.last_lsn, 9);
    assert_eq!(r.dropped_bytes, 116 - 50 + 30);
    assert!(r.dropped_reason.is_some());
    assert_eq!(wal.append_durable(b"after").unwrap(), 10);
    drop(wal);
    let wal = Wal::open(&dir, one_segment()).unwrap();
    assert_eq!(records(&wal, 10), vec![(10, b"after".to_vec())]);
    let _ = std::fs::remove_dir_all(&dir);
}

fn only_segment(dir: &Path) -> PathBuf {
    let mut v = segments(dir);
    assert_eq!(v.len(), 1);
    v.pop().unwrap()
}

#[test]
fn bad_directories_give_clear_errors() {
    let open = |dir: &Path| {
        Wal::open(dir, one_segment())
            .err()
            .map(|e| (e.kind(), e.to_string()))
    };
    // A file that is not a segment.
    let dir = scratch("garbage");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("notes.txt"), b"hello").unwrap();
    let (kind, msg) = open(&dir).expect("an error");
    assert_eq!(kind, ErrorKind::NotAWal);
    assert!(msg.contains("notes.txt"), "{msg}");
    // A segment's name on garbage.
    std::fs::remove_file(dir.join("notes.txt")).unwrap();
    std::fs::write(dir.join("00000000000000000001.wal"), [7u8; 100]).unwrap();
    let (kind, msg) = open(&dir).expect("an error");
    assert_eq!(kind, ErrorKind::NotAWal, "{msg}");
    let _ = std::fs::remove_dir_all(&dir);

    // A newer version.
    let dir = scratch("newer");
    drop(Wal::open(&dir, one_segment()).unwrap());
    let seg = only_segment(&dir);
    let mut b = std::fs::read(&seg).unwrap();
    b[8] = 9;
    b[12..16].fill(0);
    let crc = spindle_wal::crc::crc32c(&b[..32]);
    b[12..16].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&seg, &b).unwrap();
    let (kind, msg) = open(&dir).expect("an error");
    assert_eq!(kind, ErrorKind::NewerVersion, "{msg}");
    assert!(msg.contains("version 9"), "{msg}");
    let _ = std::fs::remove_dir_all(&dir);

    // A truncated header: on the last segment, an unfinished creation (removed); before it,
    // damage.
    let dir = scratch("short");
    {
        let wal = Wal::open(&dir, small()).unwrap();
        for _ in 0..20 {
            wal.append_durable(&[1; 40]).unwrap();
        }
    }
    let segs = segments(&dir);
    let next = dir.join(format!("{:020}.wal", segs.len() + 1));
    std::fs::write(&next, &std::fs::read(&segs[0]).unwrap()[..10]).unwrap();
    let wal = Wal::open(&dir, small()).unwrap();
    assert_eq!(wal.recovery().removed_segments.len(), 1);
    assert_eq!(wal.recovery().last_lsn, 20);
    drop(wal);
    let b = std::fs::read(&segs[0]).unwrap();
    std::fs::write(&segs[0], &b[..20]).unwrap();
    let (kind, msg) = open(&dir).expect("an error");
    assert_eq!(kind, ErrorKind::NotAWal, "{msg}");
    // A missing segment in the middle.
    std::fs::write(&segs[0], &b).unwrap();
    std::fs::remove_file(&segs[1]).unwrap();
    let (kind, msg) = open(&dir).expect("an error");
    assert_eq!(kind, ErrorKind::NotAWal, "{msg}");
    assert!(msg.contains("missing"), "{msg}");
    let _ = std::fs::remove_dir_all(&dir);

    // A next segment left half prepared (zeros, no header) by a process that died: removed.
    let dir = scratch("prepared");
    {
        let wal = Wal::open(&dir, small()).unwrap();
        wal.append_durable(b"one").unwrap();
    }
    std::fs::write(dir.join("next.wal.tmp"), [0u8; 100]).unwrap();
    let wal = Wal::open(&dir, small()).unwrap();
    assert_eq!(wal.recovery().last_lsn, 1);
    assert_eq!(wal.append_durable(b"two").unwrap(), 2);
    drop(wal);
    let _ = std::fs::remove_dir_all(&dir);

    // A log open in another process (or twice in this one).
    let dir = scratch("twice");
    let wal = Wal::open(&dir, one_segment()).unwrap();
    let (kind, msg) = open(&dir).expect("an error");
    assert_eq!(kind, ErrorKind::Io, "{msg}");
    assert!(msg.contains("open in another process"), "{msg}");
    drop(wal);
    assert!(open(&dir).is_none(), "closed, it opens again");
    let _ = std::fs::remove_dir_all(&dir);

    // Out-of-range input.
    let dir = scratch("input");
    let wal = Wal::open(
        &dir,
        Options {
            max_record: 10,
            ..one_segment()
        },
    )
    .unwrap();
    assert_eq!(
        wal.append(&[0; 11]).unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    assert_eq!(
        wal.wait_durable(5).unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    assert_eq!(wal.flush().unwrap(), 0);
    drop(wal);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A read-only directory (what `spindle wal inspect` reads through): the log reads back the
/// same, its files are left as they were, and every change is refused, so `Wal::open_on`
/// fails instead of writing.
#[test]
fn a_read_only_directory_is_inspected_and_never_changed() {
    use spindle_wal::storage::{Dir, Storage};
    let dir = scratch("read-only");
    {
        let wal = Wal::open(&dir, small()).unwrap();
        for i in 0..30u8 {
            wal.append_durable(&[i; 40]).unwrap();
        }
    }
    let before: Vec<(PathBuf, Vec<u8>)> = segments(&dir)
        .into_iter()
        .map(|p| {
            let b = std::fs::read(&p).unwrap();
            (p, b)
        })
        .collect();
    let ro = Dir::read_only(&dir).unwrap();
    let seen = spindle_wal::inspect::inspect(&ro).unwrap();
    assert_eq!((seen.records, seen.first_lsn, seen.last_lsn), (30, 1, 30));
    assert!(seen.damage.is_empty(), "{:?}", seen.damage);
    for (what, r) in [
        ("create", ro.create("x.wal").map(drop)),
        (
            "remove",
            ro.remove(&before[0].0.file_name().unwrap().to_string_lossy()),
        ),
        ("rename", ro.rename("a", "b")),
        ("lock", ro.lock()),
    ] {
        let e = r.expect_err(what);
        assert_eq!(
            e.kind(),
            std::io::ErrorKind::PermissionDenied,
            "{what}: {e}"
        );
    }
    assert!(Wal::open_on(Box::new(Dir::read_only(&dir).unwrap()), small()).is_err());
    for (p, b) in before {
        assert_eq!(std::fs::read(&p).unwrap(), b, "{} changed", p.display());
    }
    let _ = std::fs::remove_dir_all(&dir);
}
