//! A key-value store replicated by openraft over TCP, in pieces that the `raft_cluster`
//! example (three processes on 127.0.0.1) and the lab's `wal` experiment (three nodes in one
//! process) share: the type configuration, an in-memory state machine, the network (client
//! and server), and `start`, which makes a node of any log storage (spindle-wal's
//! `raft::LogStore`, or a peer's).
//!
//! Wire: a message is its JSON body's length (4 bytes, little-endian) and the body; a
//! connection carries one request and its reply at a time. openraft sends its RPCs to a peer
//! one after the other on one `Peer`, so one connection per peer serves them in order.
//!
//! The state machine is in memory and snapshots are off ([`config`]): a node that restarts
//! replays its whole log into an empty map (the log is what survives). A service that keeps
//! snapshots persists them and lets openraft purge the log behind them.

// The lab uses some of the pieces only.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{self, Cursor};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use openraft::error::{NetworkError, RPCError, RaftError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::storage::{RaftLogStorage, RaftStateMachine, Snapshot};
use openraft::{
    BasicNode, Entry, EntryPayload, LogId, RaftSnapshotBuilder, SnapshotMeta, SnapshotPolicy,
    StorageError, StoredMembership,
};
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A write: sets `key` to `value`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Set {
    pub key: String,
    pub value: String,
}

openraft::declare_raft_types!(
    /// The cluster's types: a write sets a key and answers with the key's previous value.
    pub Kv: D = Set, R = Option<String>
);

pub type Raft = openraft::Raft<Kv>;
pub type NodeId = u64;

/// Heartbeats every 50 ms and elections after 150 to 300 ms of silence (plus the leader's
/// lease once a vote was granted; loopback is fast); no snapshots (see the module's header).
pub fn config() -> Arc<openraft::Config> {
    let c = openraft::Config {
        cluster_name: "spindle-kv".into(),
        heartbeat_interval: 50,
        election_timeout_min: 150,
        election_timeout_max: 300,
        snapshot_policy: SnapshotPolicy::Never,
        ..Default::default()
    };
    Arc::new(c.validate().expect("a valid raft configuration"))
}

/// A node of the cluster on `log`: its Raft handle and its state machine.
pub async fn start<LS: RaftLogStorage<Kv>>(
    id: NodeId,
    log: LS,
) -> Result<(Raft, StateMachine), openraft::error::Fatal<NodeId>> {
    let sm = StateMachine::default();
    let raft = Raft::new(id, config(), Network, log, sm.clone()).await?;
    Ok((raft, sm))
}

// ---- State machine ----

#[derive(Default)]
struct SmData {
    map: BTreeMap<String, String>,
    last_applied: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, BasicNode>,
    snapshot: Option<(SnapshotMeta<NodeId, BasicNode>, Vec<u8>)>,
    built: u64,
}

/// The replicated map, as far as this node has applied the log. Clones share it.
#[derive(Clone, Default)]
pub struct StateMachine(Arc<Mutex<SmData>>);

impl StateMachine {
    fn lock(&self) -> std::sync::MutexGuard<'_, SmData> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The value of `key` here (not linearizable by itself: see [`Request::Read`]).
    pub fn get(&self, key: &str) -> Option<String> {
        self.lock().map.get(key).cloned()
    }
}

fn snapshot_error(e: serde_json::Error) -> StorageError<NodeId> {
    StorageError::IO {
        source: openraft::StorageIOError::read_snapshot(None, &e),
    }
}

impl RaftSnapshotBuilder<Kv> for StateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<Kv>, StorageError<NodeId>> {
        let mut s = self.lock();
        s.built += 1;
        let bytes = serde_json::to_vec(&s.map).map_err(snapshot_error)?;
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

impl RaftStateMachine<Kv> for StateMachine {
    type SnapshotBuilder = StateMachine;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, StoredMembership<NodeId, BasicNode>), StorageError<NodeId>>
    {
        let s = self.lock();
        Ok((s.last_applied, s.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Option<String>>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<Kv>> + Send,
        I::IntoIter: Send,
    {
        let mut s = self.lock();
        let mut out = Vec::new();
        for e in entries {
            s.last_applied = Some(e.log_id);
            out.push(match e.payload {
                EntryPayload::Blank => None,
                EntryPayload::Normal(Set { key, value }) => s.map.insert(key, value),
                EntryPayload::Membership(m) => {
                    s.membership = StoredMembership::new(Some(e.log_id), m);
                    None
                }
            });
        }
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<Cursor<Vec<u8>>>, StorageError<NodeId>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<NodeId>> {
        let bytes = snapshot.into_inner();
        let map = serde_json::from_slice(&bytes).map_err(snapshot_error)?;
        let mut s = self.lock();
        s.map = map;
        s.last_applied = meta.last_log_id;
        s.membership = meta.last_membership.clone();
        s.snapshot = Some((meta.clone(), bytes));
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<Kv>>, StorageError<NodeId>> {
        Ok(self.lock().snapshot.as_ref().map(|(meta, bytes)| Snapshot {
            meta: meta.clone(),
            snapshot: Box::new(Cursor::new(bytes.clone())),
        }))
    }
}

// ---- Wire ----

/// What a node is asked: Raft's three RPCs from its peers, and a client's requests.
#[derive(Debug, Serialize, Deserialize)]
pub enum Request {
    Append(AppendEntriesRequest<Kv>),
    Vote(VoteRequest<NodeId>),
    Snapshot(InstallSnapshotRequest<Kv>),
    /// Make these nodes the cluster (sent to one node, once).
    Init(BTreeMap<NodeId, BasicNode>),
    /// Answered once the write is committed and applied (on the leader only).
    Write(Set),
    /// A linearizable read (on the leader only).
    Read(String),
    /// The value in this node's state machine, as far as it has applied the log.
    LocalRead(String),
    /// Who this node thinks leads, and how far it has applied the log.
    Status,
}

/// A node's answer.
#[derive(Debug, Serialize, Deserialize)]
pub enum Reply {
    Append(AppendEntriesResponse<NodeId>),
    Vote(VoteResponse<NodeId>),
    Snapshot(InstallSnapshotResponse<NodeId>),
    Done,
    Value(Option<String>),
    Status {
        leader: Option<NodeId>,
        applied: u64,
    },
    /// This node does not lead; it names the leader if it knows one.
    NotLeader(Option<NodeId>),
    Failed(String),
}

/// Largest message accepted (a guard against a stream that is not ours).
const MAX_MESSAGE: usize = 64 << 20;

async fn send<T: Serialize>(s: &mut TcpStream, msg: &T) -> io::Result<()> {
    let body = serde_json::to_vec(msg).map_err(io::Error::other)?;
    if body.len() > MAX_MESSAGE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("a message of {} bytes (at most {MAX_MESSAGE})", body.len()),
        ));
    }
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
    frame.extend_from_slice(&body);
    s.write_all(&frame).await
}

async fn receive<T: DeserializeOwned>(s: &mut TcpStream) -> io::Result<T> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).await?;
    let n = u32::from_le_bytes(len) as usize;
    if n > MAX_MESSAGE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a message of {n} bytes"),
        ));
    }
    let mut body = vec![0u8; n];
    s.read_exact(&mut body).await?;
    serde_json::from_slice(&body).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// A connection to one node, opened on first use and again after an error.
pub struct Client {
    addr: String,
    conn: Option<TcpStream>,
}

impl Client {
    pub fn new(addr: impl Into<String>) -> Client {
        Client {
            addr: addr.into(),
            conn: None,
        }
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Sends `req` and waits for the reply. Safe to cancel (openraft drops an RPC that takes
    /// too long): the connection is taken out while a request is on it and put back only
    /// after its reply was read, so a cancelled exchange's reply is never read as the next
    /// one's.
    pub async fn call(&mut self, req: &Request) -> io::Result<Reply> {
        let mut s = match self.conn.take() {
            Some(s) => s,
            None => {
                let s = TcpStream::connect(&self.addr).await?;
                s.set_nodelay(true)?;
                s
            }
        };
        send(&mut s, req).await?;
        let reply = receive(&mut s).await?;
        self.conn = Some(s);
        Ok(reply)
    }
}

/// Serves `raft`'s peers and clients on `listener` until the runtime stops. A connection
/// that fails ends alone; a failed `accept` (out of descriptors) is tried again shortly.
pub async fn serve(listener: TcpListener, raft: Raft, sm: StateMachine) {
    loop {
        let mut s = match listener.accept().await {
            Ok((s, _)) => s,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = s.set_nodelay(true);
        let (raft, sm) = (raft.clone(), sm.clone());
        tokio::spawn(async move {
            while let Ok(req) = receive::<Request>(&mut s).await {
                let reply = handle(&raft, &sm, req).await;
                if send(&mut s, &reply).await.is_err() {
                    break;
                }
            }
        });
    }
}

async fn handle(raft: &Raft, sm: &StateMachine, req: Request) -> Reply {
    fn failed(e: impl std::fmt::Display) -> Reply {
        Reply::Failed(e.to_string())
    }
    match req {
        Request::Append(r) => raft
            .append_entries(r)
            .await
            .map_or_else(failed, Reply::Append),
        Request::Vote(r) => raft.vote(r).await.map_or_else(failed, Reply::Vote),
        Request::Snapshot(r) => raft
            .install_snapshot(r)
            .await
            .map_or_else(failed, Reply::Snapshot),
        Request::Init(members) => raft
            .initialize(members)
            .await
            .map_or_else(failed, |()| Reply::Done),
        Request::Write(set) => match raft.client_write(set).await {
            Ok(_) => Reply::Done,
            Err(e) => match e.forward_to_leader::<BasicNode>() {
                Some(f) => Reply::NotLeader(f.leader_id),
                None => failed(e),
            },
        },
        Request::Read(key) => match raft.ensure_linearizable().await {
            Ok(_) => Reply::Value(sm.get(&key)),
            Err(e) => match e.forward_to_leader::<BasicNode>() {
                Some(f) => Reply::NotLeader(f.leader_id),
                None => failed(e),
            },
        },
        Request::LocalRead(key) => Reply::Value(sm.get(&key)),
        Request::Status => {
            let m = raft.metrics().borrow().clone();
            Reply::Status {
                leader: m.current_leader,
                applied: m.last_applied.map_or(0, |l| l.index),
            }
        }
    }
}

// ---- Cluster helpers ----

/// The log index `addr` has applied.
pub async fn applied(addr: &str) -> Result<u64, String> {
    match Client::new(addr).call(&Request::Status).await {
        Ok(Reply::Status { applied, .. }) => Ok(applied),
        other => Err(format!("{addr}: status: {other:?}")),
    }
}

/// Waits (up to 10 s) until every node in `ids` names the same leader, not `not`.
pub async fn wait_for_leader(
    ids: &[NodeId],
    addr: &impl Fn(NodeId) -> String,
    not: Option<NodeId>,
) -> Result<NodeId, String> {
    let t = Instant::now();
    loop {
        let mut seen = Vec::new();
        for &id in ids {
            if let Ok(Reply::Status { leader, .. }) =
                Client::new(addr(id)).call(&Request::Status).await
            {
                seen.push(leader);
            }
        }
        if let Some(Some(l)) = seen.first() {
            if seen.len() == ids.len() && seen.iter().all(|s| *s == Some(*l)) && Some(*l) != not {
                return Ok(*l);
            }
        }
        if t.elapsed() > Duration::from_secs(10) {
            return Err(format!("no leader elected in 10 s (nodes say {seen:?})"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Writes `set` through the leader: sends it to `client`'s node, follows a `NotLeader`
/// answer to the node it names (its address from `addrs`), and tries again every 20 ms while
/// no node leads or one is unreachable, for at most `within`.
pub async fn write(
    client: &mut Client,
    addrs: &BTreeMap<NodeId, String>,
    set: Set,
    within: Duration,
) -> Result<(), String> {
    let t = Instant::now();
    loop {
        let last = match client.call(&Request::Write(set.clone())).await {
            Ok(Reply::Done) => return Ok(()),
            Ok(Reply::NotLeader(Some(id)))
                if addrs.get(&id).is_some_and(|a| a != client.addr()) =>
            {
                *client = Client::new(addrs[&id].clone());
                continue;
            }
            other => format!("{other:?}"),
        };
        if t.elapsed() > within {
            return Err(format!("write {}: {last}", set.key));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// ---- Network (openraft's side) ----

/// openraft's network: a [`Peer`] per target, at the address its membership gives.
pub struct Network;

impl RaftNetworkFactory<Kv> for Network {
    type Network = Peer;

    async fn new_client(&mut self, _target: NodeId, node: &BasicNode) -> Peer {
        Peer(Client::new(node.addr.clone()))
    }
}

/// One peer's connection, as openraft uses it.
pub struct Peer(Client);

impl Peer {
    /// `req`'s reply, if it came within the RPC's deadline and is the `want`ed kind. Only a
    /// refused connection (nobody listens: the node is down) is `Unreachable`, which makes
    /// openraft back off (500 ms, longer than an election timeout); any other failure is a
    /// `Network` error, and the next RPC connects again at once.
    async fn rpc<T, E: std::error::Error>(
        &mut self,
        req: Request,
        option: &RPCOption,
        want: fn(Reply) -> Result<T, Reply>,
    ) -> Result<T, RPCError<NodeId, BasicNode, E>> {
        let reply = match tokio::time::timeout(option.hard_ttl(), self.0.call(&req)).await {
            Ok(r) => r,
            Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "no reply in time")),
        };
        match reply {
            Ok(r) => want(r).map_err(|other| {
                let e = io::Error::other(format!("{}: {other:?}", self.0.addr));
                RPCError::Network(NetworkError::new(&e))
            }),
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                Err(RPCError::Unreachable(Unreachable::new(&e)))
            }
            Err(e) => Err(RPCError::Network(NetworkError::new(&e))),
        }
    }
}

impl RaftNetwork<Kv> for Peer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<Kv>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.rpc(Request::Append(rpc), &option, |r| match r {
            Reply::Append(a) => Ok(a),
            other => Err(other),
        })
        .await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<Kv>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, openraft::error::InstallSnapshotError>>,
    > {
        self.rpc(Request::Snapshot(rpc), &option, |r| match r {
            Reply::Snapshot(a) => Ok(a),
            other => Err(other),
        })
        .await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.rpc(Request::Vote(rpc), &option, |r| match r {
            Reply::Vote(a) => Ok(a),
            other => Err(other),
        })
        .await
    }
}
