//! openraft's log storage on a spindle-wal log (feature `openraft`): the entries of one of
//! openraft's appends share one `fdatasync` (openraft 0.9 waits for each flush before it
//! issues the next command, so its appends do not overlap).
//!
//! Raft changes its log in ways an append-only log does not: it truncates a conflicting tail,
//! purges a prefix, and saves its vote and committed id. Each such change is a record of its
//! own (an *operation*: an entry, "truncate from index i", "purge up to id", a vote, a
//! committed id), and opening replays them into the log Raft sees, kept in memory. Every
//! change is durable before openraft is told so: `append` calls back only once its entries
//! are on stable storage, and the other changes return only then.
//!
//! Records are a tag byte and the operation in JSON; an operation whose JSON does not read
//! back as itself (a NaN in the application's data, a map keyed by a struct) is refused with a
//! storage error, never written. The committed id is appended without waiting (openraft
//! allows a stale one), so it rides with the next sync.
//!
//! Limits: the log is not compacted (purged entries stay in the segments and are read again
//! at open; a checkpoint of the live entries would let `truncate_before` drop them); and the
//! calls wait for their sync on the calling thread, which is the async runtime's (a runtime
//! with several worker threads keeps serving meanwhile; a current-thread one does not).

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::RangeBounds;
use std::path::Path;
use std::sync::{Arc, Mutex};

use openraft::storage::{LogFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::{
    LogId, OptionalSend, RaftLogId, RaftTypeConfig, StorageError, StorageIOError, Vote,
};

use crate::{Error, Options, Wal};

const ENTRY: u8 = 1;
const TRUNCATE: u8 = 2;
const PURGE: u8 = 3;
const VOTE: u8 = 4;
const COMMITTED: u8 = 5;

/// Raft's log as openraft sees it, rebuilt from the operations at open.
struct State<C: RaftTypeConfig> {
    entries: BTreeMap<u64, C::Entry>,
    last_purged: Option<LogId<C::NodeId>>,
    vote: Option<Vote<C::NodeId>>,
    committed: Option<LogId<C::NodeId>>,
}

/// openraft's `RaftLogStorage` (and `RaftLogReader`) on a spindle-wal log. Clones share it.
pub struct LogStore<C: RaftTypeConfig> {
    inner: Arc<(Wal, Mutex<State<C>>)>,
}

impl<C: RaftTypeConfig> Clone for LogStore<C> {
    fn clone(&self) -> Self {
        LogStore {
            inner: Arc::clone(&self.inner),
        }
    }
}

/// The record of operation `tag` on `value`, if its JSON reads back as the same value.
fn json<T>(tag: u8, value: &T) -> Result<Vec<u8>, Error>
where
    T: serde::Serialize + serde::de::DeserializeOwned + PartialEq,
{
    let bad = |why: String| Error::new(crate::ErrorKind::InvalidInput, why);
    let mut v = vec![tag];
    serde_json::to_writer(&mut v, value).map_err(|e| bad(format!("cannot encode: {e}")))?;
    match serde_json::from_slice::<T>(&v[1..]) {
        Ok(back) if back == *value => Ok(v),
        _ => Err(bad("its JSON does not read back as itself (a NaN?)".into())),
    }
}

impl<C: RaftTypeConfig> LogStore<C> {
    /// Opens (or creates) the log in `dir` and replays it.
    pub fn open(dir: impl AsRef<Path>, options: Options) -> Result<LogStore<C>, Error> {
        let wal = Wal::open(dir, options)?;
        let mut st = State::<C> {
            entries: BTreeMap::new(),
            last_purged: None,
            vote: None,
            committed: None,
        };
        let bad = |lsn, e: serde_json::Error| {
            Error::new(
                crate::ErrorKind::NotAWal,
                format!("record {lsn} is not an openraft operation: {e}"),
            )
        };
        for r in wal.iter_from(wal.recovery().first_lsn)? {
            let (lsn, bytes) = r?;
            let (tag, body) = bytes.split_first().ok_or_else(|| {
                Error::new(crate::ErrorKind::NotAWal, format!("record {lsn} is empty"))
            })?;
            match *tag {
                ENTRY => {
                    let e: C::Entry = serde_json::from_slice(body).map_err(|e| bad(lsn, e))?;
                    st.entries.insert(e.get_log_id().index, e);
                }
                TRUNCATE => {
                    let i: u64 = serde_json::from_slice(body).map_err(|e| bad(lsn, e))?;
                    st.entries.split_off(&i);
                }
                PURGE => {
                    let id: LogId<C::NodeId> =
                        serde_json::from_slice(body).map_err(|e| bad(lsn, e))?;
                    st.entries = st.entries.split_off(&(id.index + 1));
                    st.last_purged = Some(id);
                }
                VOTE => st.vote = Some(serde_json::from_slice(body).map_err(|e| bad(lsn, e))?),
                COMMITTED => {
                    st.committed = serde_json::from_slice(body).map_err(|e| bad(lsn, e))?
                }
                t => {
                    return Err(Error::new(
                        crate::ErrorKind::NotAWal,
                        format!("record {lsn} has an unknown tag {t}"),
                    ))
                }
            }
        }
        Ok(LogStore {
            inner: Arc::new((wal, Mutex::new(st))),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State<C>> {
        self.inner.1.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records one operation durably.
    fn durable(&self, record: &[u8]) -> Result<(), Error> {
        self.inner.0.append_durable(record).map(drop)
    }
}

fn io_error<C: RaftTypeConfig>(
    make: fn(openraft::AnyError) -> StorageIOError<C::NodeId>,
    e: Error,
) -> StorageError<C::NodeId> {
    StorageError::IO {
        source: make(openraft::AnyError::new(&e)),
    }
}

impl<C: RaftTypeConfig> RaftLogReader<C> for LogStore<C>
where
    C::Entry: Clone + PartialEq,
{
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<C::Entry>, StorageError<C::NodeId>> {
        Ok(self
            .state()
            .entries
            .range(range)
            .map(|(_, e)| e.clone())
            .collect())
    }
}

impl<C: RaftTypeConfig> RaftLogStorage<C> for LogStore<C>
where
    C::Entry: Clone + PartialEq,
{
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<C>, StorageError<C::NodeId>> {
        let st = self.state();
        let last = st
            .entries
            .values()
            .next_back()
            .map(|e| e.get_log_id().clone())
            .or(st.last_purged.clone());
        Ok(LogState {
            last_purged_log_id: st.last_purged.clone(),
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<C::NodeId>) -> Result<(), StorageError<C::NodeId>> {
        json(VOTE, vote)
            .and_then(|r| self.durable(&r))
            .map_err(|e| io_error::<C>(StorageIOError::write_vote, e))?;
        self.state().vote = Some(vote.clone());
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<C::NodeId>>, StorageError<C::NodeId>> {
        Ok(self.state().vote.clone())
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogId<C::NodeId>>,
    ) -> Result<(), StorageError<C::NodeId>> {
        // Not waited for: a stale committed id is allowed, and it rides with the next sync.
        json(COMMITTED, &committed)
            .and_then(|r| self.inner.0.append(&r).map(drop))
            .map_err(|e| io_error::<C>(StorageIOError::write, e))?;
        self.state().committed = committed;
        Ok(())
    }

    async fn read_committed(
        &mut self,
    ) -> Result<Option<LogId<C::NodeId>>, StorageError<C::NodeId>> {
        Ok(self.state().committed.clone())
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<C>,
    ) -> Result<(), StorageError<C::NodeId>>
    where
        I: IntoIterator<Item = C::Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        // Appended without waiting, one after the other; then one wait for the last: the
        // entries share a sync with each other and with whatever else is being appended.
        let mut last = None;
        for e in entries {
            let lsn = json(ENTRY, &e)
                .and_then(|r| self.inner.0.append(&r))
                .map_err(|e| io_error::<C>(StorageIOError::write_logs, e))?;
            self.state().entries.insert(e.get_log_id().index, e);
            last = Some(lsn);
        }
        let flushed = match last {
            Some(lsn) => self.inner.0.wait_durable(lsn),
            None => Ok(()),
        };
        let result = flushed.map_err(|e| std::io::Error::other(e.to_string()));
        let failed = result.as_ref().err().map(|e| e.to_string());
        callback.log_io_completed(result);
        match failed {
            Some(why) => Err(StorageError::IO {
                source: StorageIOError::write_logs(openraft::AnyError::error(why)),
            }),
            None => Ok(()),
        }
    }

    async fn truncate(&mut self, log_id: LogId<C::NodeId>) -> Result<(), StorageError<C::NodeId>> {
        json(TRUNCATE, &log_id.index)
            .and_then(|r| self.durable(&r))
            .map_err(|e| io_error::<C>(StorageIOError::write_logs, e))?;
        self.state().entries.split_off(&log_id.index);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<C::NodeId>) -> Result<(), StorageError<C::NodeId>> {
        json(PURGE, &log_id)
            .and_then(|r| self.durable(&r))
            .map_err(|e| io_error::<C>(StorageIOError::write_logs, e))?;
        let mut st = self.state();
        st.entries = st.entries.split_off(&(log_id.index + 1));
        st.last_purged = Some(log_id);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_whose_json_does_not_read_back_is_refused() {
        assert!(json(ENTRY, &1.5f64).is_ok());
        let e = json(ENTRY, &f64::NAN).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::InvalidInput, "{e}");
        let mut by_struct = BTreeMap::new();
        by_struct.insert((1u8, 2u8), 3u8);
        assert!(json(ENTRY, &by_struct).is_err(), "a map keyed by a tuple");
    }
}
