//! openraft's own storage test suite (`openraft::testing::Suite`) on `raft::LogStore`, with a
//! small in-memory state machine beside it (the suite tests both halves of the storage):
//! `cargo test -p spindle-wal --features openraft`.
#![cfg(feature = "openraft")]

use std::io::Cursor;
use std::sync::{Arc, Mutex};

use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::testing::{StoreBuilder, Suite};
use openraft::{
    BasicNode, Entry, EntryPayload, LogId, RaftSnapshotBuilder, SnapshotMeta, StorageError,
    StoredMembership,
};
use spindle_wal::raft::LogStore;

openraft::declare_raft_types!(pub Tc);

#[derive(Default)]
struct SmState {
    last_applied: Option<LogId<u64>>,
    membership: StoredMembership<u64, BasicNode>,
    data: Vec<String>,
    snapshot: Option<(SnapshotMeta<u64, BasicNode>, Vec<u8>)>,
    built: u64,
}

/// The state machine: the list of applied strings.
#[derive(Clone, Default)]
struct Sm(Arc<Mutex<SmState>>);

impl Sm {
    fn lock(&self) -> std::sync::MutexGuard<'_, SmState> {
        self.0.lock().unwrap()
    }
}

impl RaftSnapshotBuilder<Tc> for Sm {
    async fn build_snapshot(&mut self) -> Result<Snapshot<Tc>, StorageError<u64>> {
        let mut s = self.lock();
        s.built += 1;
        let bytes = serde_json::to_vec(&s.data).unwrap();
        let meta = SnapshotMeta {
            last_log_id: s.last_applied,
            last_membership: s.membership.clone(),
            snapshot_id: format!("{:?}-{}", s.last_applied, s.built),
        };
        s.snapshot = Some((meta.clone(), bytes.clone()));
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(bytes)),
        })
    }
}

impl RaftStateMachine<Tc> for Sm {
    type SnapshotBuilder = Sm;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<u64>>, StoredMembership<u64, BasicNode>), StorageError<u64>> {
        let s = self.lock();
        Ok((s.last_applied, s.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<String>, StorageError<u64>>
    where
        I: IntoIterator<Item = Entry<Tc>> + Send,
        I::IntoIter: Send,
    {
        let mut s = self.lock();
        let mut out = Vec::new();
        for e in entries {
            s.last_applied = Some(e.log_id);
            match e.payload {
                EntryPayload::Blank => {}
                EntryPayload::Normal(d) => s.data.push(d),
                EntryPayload::Membership(m) => {
                    s.membership = StoredMembership::new(Some(e.log_id), m)
                }
            }
            out.push(String::new());
        }
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<Cursor<Vec<u8>>>, StorageError<u64>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<u64>> {
        let bytes = snapshot.into_inner();
        let data: Vec<String> = serde_json::from_slice(&bytes).unwrap();
        let mut s = self.lock();
        s.data = data;
        s.last_applied = meta.last_log_id;
        s.membership = meta.last_membership.clone();
        s.snapshot = Some((meta.clone(), bytes));
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<Tc>>, StorageError<u64>> {
        Ok(self.lock().snapshot.as_ref().map(|(meta, bytes)| Snapshot {
            meta: meta.clone(),
            snapshot: Box::new(Cursor::new(bytes.clone())),
        }))
    }
}

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
