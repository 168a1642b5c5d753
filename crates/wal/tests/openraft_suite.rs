//! openraft's own storage test suite (`openraft::testing::Suite`) on `raft::LogStore`, with the
//! cluster example's in-memory key-value state machine beside it (the suite tests both halves
//! of the storage): `cargo test -p spindle-wal --features openraft`.
#![cfg(feature = "openraft")]

#[path = "../examples/raft_cluster/kv.rs"]
mod kv;

use kv::{Kv as Tc, StateMachine as Sm};
use openraft::testing::{StoreBuilder, Suite};
use openraft::{LogId, StorageError};
use spindle_wal::raft::LogStore;

/// A fresh log in a directory of its own, removed when the guard drops.
struct Builder;

struct Scratch(std::path::PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl StoreBuilder<Tc, LogStore<Tc>, Sm, Scratch> for Builder {
    async fn build(&self) -> Result<(Scratch, LogStore<Tc>, Sm), StorageError<u64>> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "spindle-wal-raft-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let log = LogStore::open(&dir, spindle_wal::Options::default()).expect("open the log");
        Ok((Scratch(dir), log, Sm::default()))
    }
}

#[test]
fn openraft_storage_suite() {
    Suite::test_all(Builder).unwrap();
}

/// What the log store kept survives reopening: entries, vote, committed id, purge, truncate.
#[test]
fn the_raft_log_survives_reopening() {
    use openraft::storage::{RaftLogReader, RaftLogStorage};
    use openraft::{CommittedLeaderId, Vote};
    let dir = std::env::temp_dir().join(format!("spindle-wal-raft-reopen-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let id = |i| LogId::new(CommittedLeaderId::new(1, 0), i);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut log = LogStore::<Tc>::open(&dir, spindle_wal::Options::default()).unwrap();
        // Entries 0 to 10 (blank) and a vote, appended the way openraft appends.
        Suite::<Tc, LogStore<Tc>, Sm, Builder, Scratch>::feed_10_logs_vote_self(&mut log)
            .await
            .unwrap();
        log.save_vote(&Vote::new(3, 1)).await.unwrap();
        log.save_committed(Some(id(7))).await.unwrap();
        log.purge(id(2)).await.unwrap();
        log.truncate(id(9)).await.unwrap();
    });
    drop(rt);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut log = LogStore::<Tc>::open(&dir, spindle_wal::Options::default()).unwrap();
        let st = log.get_log_state().await.unwrap();
        assert_eq!(st.last_purged_log_id, Some(id(2)));
        assert_eq!(st.last_log_id, Some(id(8)));
        assert_eq!(log.read_vote().await.unwrap(), Some(Vote::new(3, 1)));
        assert_eq!(log.read_committed().await.unwrap(), Some(id(7)));
        let got = log.try_get_log_entries(0..100).await.unwrap();
        let idx: Vec<u64> = got.iter().map(|e| e.log_id.index).collect();
        assert_eq!(idx, (3..=8).collect::<Vec<_>>());
    });
    let _ = std::fs::remove_dir_all(&dir);
}
