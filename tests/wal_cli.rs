//! `spindle wal inspect` and `spindle wal verify` on a real log: intact, with a torn tail (a
//! crash: still intact), damaged, and missing; their exit codes and JSON.

use std::path::Path;
use std::process::Command;

fn spindle(args: &[&str], dir: &Path) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_spindle"))
        .args(args)
        .arg(dir)
        .output()
        .expect("run spindle");
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn inspect_and_verify_tell_a_torn_tail_from_damage() {
    let dir = std::env::temp_dir().join(format!("spindle-wal-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let options = spindle_wal::Options {
        segment_bytes: 1000,
        ..Default::default()
    };
    {
        let wal = spindle_wal::Wal::open(&dir, options).unwrap();
        for i in 0..50u32 {
            wal.append_durable(&[i as u8; 40]).unwrap();
        }
    }
    let (code, text) = spindle(&["wal", "verify"], &dir);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("50 records, LSN 1 to 50"), "{text}");
    let (code, text) = spindle(&["wal", "inspect", "--json"], &dir);
    assert_eq!(code, 0, "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["records"], 50);
    assert!(v["segments"].as_array().unwrap().len() > 1);

    let mut segs: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "wal"))
        .collect();
    segs.sort();
    // A torn tail in the last segment (its last 7 bytes of data zeroed): what a crash
    // leaves; not damage. (Segments are allocated ahead: the data ends at the last byte that
    // is not zero.)
    let last = segs.last().unwrap();
    let b = std::fs::read(last).unwrap();
    let end = b.iter().rposition(|&x| x != 0).unwrap() as u64 + 1;
    std::os::unix::fs::FileExt::write_at(
        &std::fs::OpenOptions::new().write(true).open(last).unwrap(),
        &[0; 7],
        end - 7,
    )
    .unwrap();
    let (code, text) = spindle(&["wal", "verify"], &dir);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("torn tail"), "{text}");
    // A flipped byte in an earlier segment: damage.
    let mut b = std::fs::read(&segs[0]).unwrap();
    b[100] ^= 1;
    std::fs::write(&segs[0], &b).unwrap();
    let (code, text) = spindle(&["wal", "verify"], &dir);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("DAMAGED") && text.contains("CRC"), "{text}");
    let (code, text) = spindle(&["wal", "inspect"], &dir);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("damage:"), "{text}");

    let _ = std::fs::remove_dir_all(&dir);
    let (code, text) = spindle(&["wal", "verify"], &dir);
    assert_eq!(code, 3, "{text}");
    assert!(text.contains("No such file"), "{text}");
}
