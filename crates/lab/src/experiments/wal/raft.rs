//! The `raft` section of `wal`: committed writes per second of a three-node openraft
//! key-value cluster on loopback (the `raft_cluster` example's nodes, in this process), with
//! each node's Raft log on spindle-wal (`raft::LogStore`) against a log store built the way
//! openraft's in-memory example (`mem-log`) builds it, a map under a mutex, made durable the
//! way a program adds durability to it: the entries of each append written to a file and
//! `fdatasync`ed before openraft is told they are flushed.
//!
//! All three nodes write to the same disk. [`CLIENTS`] clients keep one write each in flight
//! to the leader; a write is answered once a majority has it durable and the leader applied it.
//! A client whose write meets a change of leader follows it (the retry counts in its latency).
//!
//! What differs between the two: openraft 0.9 flushes one append at a time per node, and
//! each node has a log of its own, so spindle-wal's group commit has nothing to merge here;
//! both wait for the sync on the runtime's thread. spindle-wal writes into segments written
//! with zeros ahead (a sync commits no file size), and the peer's file grows with every
//! append, as such a program's does (each sync also commits the new size).

#[path = "../../../../wal/examples/raft_cluster/kv.rs"]
mod kv;

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io::Write as _;
use std::ops::RangeBounds;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use openraft::storage::{LogFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::{BasicNode, Entry, LogId, StorageError, StorageIOError, Vote};

use crate::kit::quantile;
use crate::spec::{Claim, Metric, Plan, Sample, Section, Variant};

/// Writes in flight at once, each on its own connection.
const CLIENTS: usize = 16;

/// Bytes of each write's value.
const VALUE: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Log {
    Spindle,
    MemFsync,
}

impl Log {
    fn id(self) -> &'static str {
        match self {
            Log::Spindle => "raft-spindle",
            Log::MemFsync => "raft-memlog",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Log::Spindle => "3 nodes, log on spindle-wal (raft::LogStore)",
            Log::MemFsync => {
                "3 nodes, in-memory log (openraft's example) + write and fdatasync per append"
            }
        }
    }
}

const LOGS: [Log; 2] = [Log::Spindle, Log::MemFsync];

/// Adds the section, a cluster per log store (started now, in `dir`) and their variants.
pub fn plan<'a>(
    plan: &mut Plan<'a>,
    dir: &Path,
    span: Duration,
    cpus: usize,
) -> Result<(), String> {
    plan.section(
        Section::new(
            "raft",
            format!(
                "Three-node openraft cluster on loopback, {CLIENTS} clients, {VALUE}-byte values"
            ),
        )
        .baseline(Log::MemFsync.id())
        .metric(Metric::rate("rate", "committed writes per second").higher_is_better())
        .metric(Metric::time("p50", "write latency, median"))
        .metric(Metric::time("p99", "write latency, p99")),
    );
    for log in LOGS {
        let cluster = Cluster::start(log, &dir.join(log.id()), cpus)?;
        plan.variant(
            Variant::fixed("raft", log.id(), log.label(), move || cluster.run(span)).threads(cpus),
        );
    }
    plan.claim(
        Claim::guarantee(
            "wal-raft-vs-memlog",
            "A three-node openraft cluster commits at least as many writes per second with its logs on spindle-wal as on openraft's in-memory example log with fdatasync per append",
        )
        .ratio(Log::Spindle.id(), Log::MemFsync.id())
        .metric("rate")
        .at_least(1.0),
    );
    Ok(())
}

/// Three nodes on one runtime, their addresses and the leader's id.
struct Cluster {
    rt: tokio::runtime::Runtime,
    rafts: Vec<kv::Raft>,
    addrs: BTreeMap<u64, String>,
    leader: u64,
    next_key: std::sync::atomic::AtomicU64,
}

impl Cluster {
    fn start(log: Log, dir: &Path, cpus: usize) -> Result<Cluster, String> {
        let err = |e: &dyn std::fmt::Display| format!("{}: {e}", log.id());
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(cpus.max(2))
            .enable_all()
            .build()
            .map_err(|e| err(&e))?;
        let (rafts, addrs, leader) = rt.block_on(async {
            let mut rafts = Vec::new();
            let mut addrs = BTreeMap::new();
            for id in 1..=3u64 {
                let node_dir = dir.join(format!("node-{id}"));
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .map_err(|e| err(&e))?;
                let addr = listener.local_addr().map_err(|e| err(&e))?.to_string();
                let (raft, sm) = match log {
                    Log::Spindle => {
                        let store = spindle_wal::raft::LogStore::<kv::Kv>::open(
                            &node_dir,
                            spindle_wal::Options::default(),
                        )
                        .map_err(|e| err(&e))?;
                        kv::start(id, store).await
                    }
                    Log::MemFsync => kv::start(id, MemLog::open(&node_dir)?).await,
                }
                .map_err(|e| err(&e))?;
                tokio::spawn(kv::serve(listener, raft.clone(), sm));
                rafts.push(raft);
                addrs.insert(id, addr);
            }
            let members: BTreeMap<u64, BasicNode> = addrs
                .iter()
                .map(|(&id, a)| (id, BasicNode { addr: a.clone() }))
                .collect();
            rafts[0].initialize(members).await.map_err(|e| err(&e))?;
            let ids: Vec<u64> = addrs.keys().copied().collect();
            let leader = kv::wait_for_leader(&ids, &|id| addrs[&id].clone(), None).await?;
            Ok::<_, String>((rafts, addrs, leader))
        })?;
        Ok(Cluster {
            rt,
            rafts,
            addrs,
            leader,
            next_key: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// [`CLIENTS`] clients write for `span`: committed writes per second, latency (ns).
    fn run(&self, span: Duration) -> Sample {
        let value = "v".repeat(VALUE);
        let (count, secs, mut lat) = self.rt.block_on(async {
            let tasks: Vec<_> = (0..CLIENTS)
                .map(|_| {
                    let mut client = kv::Client::new(self.addrs[&self.leader].clone());
                    let base = self
                        .next_key
                        .fetch_add(1 << 32, std::sync::atomic::Ordering::Relaxed);
                    let (value, addrs) = (value.clone(), self.addrs.clone());
                    tokio::spawn(async move {
                        let t0 = Instant::now();
                        let mut lat = Vec::new();
                        while t0.elapsed() < span {
                            let set = kv::Set {
                                key: format!("{:x}", base + lat.len() as u64),
                                value: value.clone(),
                            };
                            let a = Instant::now();
                            kv::write(&mut client, &addrs, set, Duration::from_secs(10))
                                .await
                                .unwrap_or_else(|e| panic!("the cluster lost a write: {e}"));
                            lat.push(a.elapsed().as_nanos() as f64);
                        }
                        (t0, Instant::now(), lat)
                    })
                })
                .collect();
            let mut runs = Vec::new();
            for t in tasks {
                runs.push(t.await.expect("a client panicked"));
            }
            let first = runs.iter().map(|r| r.0).min().expect("clients");
            let last = runs.iter().map(|r| r.1).max().expect("clients");
            let lat: Vec<f64> = runs.into_iter().flat_map(|r| r.2).collect();
            (lat.len(), (last - first).as_secs_f64().max(1e-9), lat)
        });
        Sample::new()
            .with("rate", count as f64 / secs)
            .with("p50", quantile(&mut lat, 0.5))
            .with("p99", quantile(&mut lat, 0.99))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.rt.block_on(async {
            for r in &self.rafts {
                let _ = r.shutdown().await;
            }
        });
    }
}

// ---- The peer: openraft's in-memory example log, plus a write and fdatasync per append ----

struct MemLogState {
    log: BTreeMap<u64, Entry<kv::Kv>>,
    last_purged: Option<LogId<u64>>,
    vote: Option<Vote<u64>>,
    committed: Option<LogId<u64>>,
    file: std::fs::File,
}

/// openraft's `mem-log` example store (a map under a mutex), durable the way a program makes
/// it so: each append's entries (JSON) and each vote written to a file, then `fdatasync`,
/// before openraft hears of it. Clones share it.
#[derive(Clone)]
struct MemLog(Arc<Mutex<MemLogState>>);

fn io(e: std::io::Error) -> StorageError<u64> {
    StorageError::IO {
        source: StorageIOError::write_logs(openraft::AnyError::new(&e)),
    }
}

impl MemLog {
    fn open(dir: &Path) -> Result<MemLog, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let file = std::fs::File::create(dir.join("log")).map_err(|e| e.to_string())?;
        Ok(MemLog(Arc::new(Mutex::new(MemLogState {
            log: BTreeMap::new(),
            last_purged: None,
            vote: None,
            committed: None,
            file,
        }))))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, MemLogState> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Writes `bytes` to the end of the file and waits until they are on stable storage.
fn durable(file: &mut std::fs::File, bytes: &[u8]) -> std::io::Result<()> {
    file.write_all(bytes)?;
    file.sync_data()
}

impl RaftLogReader<kv::Kv> for MemLog {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<kv::Kv>>, StorageError<u64>> {
        Ok(self
            .lock()
            .log
            .range(range)
            .map(|(_, e)| e.clone())
            .collect())
    }
}

impl RaftLogStorage<kv::Kv> for MemLog {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<kv::Kv>, StorageError<u64>> {
        let s = self.lock();
        let last = s
            .log
            .values()
            .next_back()
            .map(|e| e.log_id)
            .or(s.last_purged);
        Ok(LogState {
            last_purged_log_id: s.last_purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> Result<(), StorageError<u64>> {
        let mut s = self.lock();
        let bytes = serde_json::to_vec(vote).map_err(|e| io(std::io::Error::other(e)))?;
        durable(&mut s.file, &bytes).map_err(io)?;
        s.vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>, StorageError<u64>> {
        Ok(self.lock().vote)
    }

    async fn save_committed(&mut self, c: Option<LogId<u64>>) -> Result<(), StorageError<u64>> {
        self.lock().committed = c;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<u64>>, StorageError<u64>> {
        Ok(self.lock().committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<kv::Kv>,
    ) -> Result<(), StorageError<u64>>
    where
        I: IntoIterator<Item = Entry<kv::Kv>> + Send,
        I::IntoIter: Send,
    {
        let mut s = self.lock();
        let mut bytes = Vec::new();
        for e in entries {
            serde_json::to_writer(&mut bytes, &e).map_err(|e| io(std::io::Error::other(e)))?;
            bytes.push(b'\n');
            s.log.insert(e.log_id.index, e);
        }
        let done = durable(&mut s.file, &bytes);
        let failed = done
            .as_ref()
            .err()
            .map(|e| std::io::Error::new(e.kind(), e.to_string()));
        callback.log_io_completed(done);
        match failed {
            Some(e) => Err(io(e)),
            None => Ok(()),
        }
    }

    async fn truncate(&mut self, log_id: LogId<u64>) -> Result<(), StorageError<u64>> {
        self.lock().log.split_off(&log_id.index);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<u64>) -> Result<(), StorageError<u64>> {
        let mut s = self.lock();
        s.log = s.log.split_off(&(log_id.index + 1));
        s.last_purged = Some(log_id);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_clusters_commit_writes() {
        let dir = std::env::temp_dir().join(format!("spindle-lab-raft-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for log in LOGS {
            let c = Cluster::start(log, &dir.join(log.id()), 2).unwrap();
            let s = c.run(Duration::from_millis(50));
            let rate = s.value("rate").unwrap();
            assert!(rate > 0.0, "{log:?}: {rate}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
