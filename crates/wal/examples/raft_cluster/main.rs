//! A three-node key-value cluster on 127.0.0.1, replicated by openraft, each node's Raft log
//! on spindle-wal (`raft::LogStore`); the program checks that the cluster survives losing
//! its leader:
//!
//! 1. starts three node processes (this program with `node ID DIR ADDR`), makes them a
//!    cluster and writes 1 000 keys through the leader;
//! 2. kills the leader with SIGKILL, waits for the other two to elect a new one, writes
//!    1 000 more keys through it, and reads all 2 000 back with linearizable reads;
//! 3. restarts the killed node on its log directory, checks that its log still holds every
//!    entry it had applied before the kill (openraft 0.9's leader flushes an entry before it
//!    replicates it, so before anyone can acknowledge it), and waits until it has caught up
//!    with the new leader and holds every key.
//!
//! A node exits when its standard input closes, so nodes never outlive this program.
//!
//! Run it with `cargo run -p spindle-wal --features openraft --example raft_cluster`.
//! It exits 0 once every key was read back from the new leader and from the restarted node,
//! 1 on any failure (with the reason).

mod kv;

use std::collections::BTreeMap;
use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use kv::{Client, NodeId, Reply, Request, Set};
use openraft::BasicNode;

const KEYS_BEFORE: usize = 1000;
const KEYS_AFTER: usize = 1000;
/// Writes in flight at once, each on its own connection.
const CLIENTS: usize = 8;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("node") if args.len() == 4 => node(&args[1], Path::new(&args[2]), &args[3]),
        None => cluster(),
        _ => Err("usage: raft_cluster [node ID DIR ADDR]".to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("raft_cluster: {e}");
            ExitCode::FAILURE
        }
    }
}

/// One node: opens its log in `dir`, listens on `addr` (port 0: any), prints the address it
/// got and the last index in its log, and serves until killed or its standard input closes.
fn node(id: &str, dir: &Path, addr: &str) -> Result<(), String> {
    use openraft::storage::RaftLogStorage as _;
    let id: NodeId = id.parse().map_err(|e| format!("node id {id:?}: {e}"))?;
    std::thread::spawn(|| {
        // EOF (or an error) on stdin: the parent is gone.
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        std::process::exit(0);
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        let mut log =
            spindle_wal::raft::LogStore::<kv::Kv>::open(dir, spindle_wal::Options::default())
                .map_err(|e| format!("node {id}: {e}"))?;
        let last = log
            .get_log_state()
            .await
            .map_err(|e| e.to_string())?
            .last_log_id
            .map_or(0, |l| l.index);
        // A restarted node takes its old port again; another socket may hold it a moment.
        let t = Instant::now();
        let listener = loop {
            match tokio::net::TcpListener::bind(addr).await {
                Ok(l) => break l,
                Err(e) if t.elapsed() > Duration::from_secs(5) => {
                    return Err(format!("node {id}: listen on {addr}: {e}"))
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        };
        let (raft, sm) = kv::start(id, log).await.map_err(|e| e.to_string())?;
        let local = listener.local_addr().map_err(|e| e.to_string())?;
        println!("listening {local} log {last}");
        kv::serve(listener, raft, sm).await;
        Ok(())
    })
}

/// The node processes, killed when dropped (also on an early return).
struct Nodes {
    base: PathBuf,
    procs: BTreeMap<NodeId, (Child, String)>,
}

impl Nodes {
    /// Starts node `id` on `addr`: the address it listens on and the last index in its log.
    fn spawn(&mut self, id: NodeId, addr: &str) -> Result<(String, u64), String> {
        let dir = self.base.join(format!("node-{id}"));
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut child = Command::new(exe)
            .arg("node")
            .arg(id.to_string())
            .arg(&dir)
            .arg(addr)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("start node {id}: {e}"))?;
        let mut line = String::new();
        let out = child.stdout.take().expect("piped");
        std::io::BufReader::new(out)
            .read_line(&mut line)
            .map_err(|e| e.to_string())?;
        let got = line.strip_prefix("listening ").and_then(|rest| {
            let (addr, last) = rest.trim().split_once(" log ")?;
            Some((addr.to_string(), last.parse::<u64>().ok()?))
        });
        match got {
            Some((addr, last)) => {
                self.procs.insert(id, (child, addr.clone()));
                Ok((addr, last))
            }
            None => {
                let _ = child.kill();
                let _ = child.wait();
                Err(format!("node {id} did not start (it said {line:?})"))
            }
        }
    }

    fn kill(&mut self, id: NodeId) -> Result<String, String> {
        let (mut child, addr) = self.procs.remove(&id).ok_or("no such node")?;
        child.kill().map_err(|e| e.to_string())?;
        child.wait().map_err(|e| e.to_string())?;
        Ok(addr)
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for (child, _) in self.procs.values_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

fn cluster() -> Result<(), String> {
    let base = std::env::temp_dir().join(format!("spindle-raft-cluster-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let mut nodes = Nodes {
        base,
        procs: BTreeMap::new(),
    };
    let mut members = BTreeMap::new();
    for id in 1..=3 {
        let (addr, _) = nodes.spawn(id, "127.0.0.1:0")?;
        println!("node {id} listens on {addr}");
        members.insert(id, BasicNode { addr });
    }
    let addrs: BTreeMap<NodeId, String> = members
        .iter()
        .map(|(&id, n)| (id, n.addr.clone()))
        .collect();
    let addr = |id: NodeId| addrs[&id].clone();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        expect_done(
            Client::new(addr(1))
                .call(&Request::Init(members.clone()))
                .await,
        )?;
        let all: Vec<NodeId> = members.keys().copied().collect();
        let leader = kv::wait_for_leader(&all, &addr, None).await?;
        println!("node {leader} leads");
        let t = Instant::now();
        write(&addrs, leader, 0..KEYS_BEFORE).await?;
        println!(
            "wrote {KEYS_BEFORE} keys through node {leader} in {:.0} ms",
            t.elapsed().as_secs_f64() * 1e3
        );

        let had = kv::applied(&addr(leader)).await?;
        let old = nodes.kill(leader)?;
        println!("killed node {leader} (SIGKILL)");
        let rest: Vec<NodeId> = all.iter().copied().filter(|&n| n != leader).collect();
        let t = Instant::now();
        let new = kv::wait_for_leader(&rest, &addr, Some(leader)).await?;
        println!(
            "node {new} leads after {:.0} ms",
            t.elapsed().as_secs_f64() * 1e3
        );
        write(&addrs, new, KEYS_BEFORE..KEYS_BEFORE + KEYS_AFTER).await?;
        println!("wrote {KEYS_AFTER} more keys through node {new}");
        let mut c = Client::new(addr(new));
        for i in 0..KEYS_BEFORE + KEYS_AFTER {
            check(c.call(&Request::Read(key(i))).await, i, new)?;
        }
        println!(
            "read all {} keys back from node {new} (linearizable reads)",
            KEYS_BEFORE + KEYS_AFTER
        );

        let (back, last) = nodes.spawn(leader, &old)?;
        println!(
            "restarted node {leader} on its log, listening on {back}: its log ends at index {last}"
        );
        if last < had {
            return Err(format!(
                "node {leader} had applied index {had} before the kill, its log ends at {last}"
            ));
        }
        let want = kv::applied(&addr(new)).await?;
        let t = Instant::now();
        while kv::applied(&back).await.unwrap_or(0) < want {
            if t.elapsed() > Duration::from_secs(10) {
                return Err(format!("node {leader} did not catch up in 10 s"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut c = Client::new(back);
        for i in 0..KEYS_BEFORE + KEYS_AFTER {
            check(c.call(&Request::LocalRead(key(i))).await, i, leader)?;
        }
        println!("node {leader} caught up to log index {want} and holds every key");
        Ok(())
    })
}

fn key(i: usize) -> String {
    format!("key-{i:05}")
}

fn value(i: usize) -> String {
    format!("value {i} ({})", "x".repeat(i % 64))
}

fn expect_done(r: std::io::Result<Reply>) -> Result<(), String> {
    match r {
        Ok(Reply::Done) => Ok(()),
        Ok(other) => Err(format!("unexpected reply {other:?}")),
        Err(e) => Err(e.to_string()),
    }
}

fn check(r: std::io::Result<Reply>, i: usize, node: NodeId) -> Result<(), String> {
    match r {
        Ok(Reply::Value(Some(v))) if v == value(i) => Ok(()),
        other => Err(format!("node {node}: {} reads {other:?}", key(i))),
    }
}

/// Writes keys `range` through the leader at `addr` (following it if it changes), [`CLIENTS`]
/// at a time.
async fn write(
    addrs: &BTreeMap<NodeId, String>,
    leader: NodeId,
    range: std::ops::Range<usize>,
) -> Result<(), String> {
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (mut client, range) = (Client::new(addrs[&leader].clone()), range.clone());
            let addrs = addrs.clone();
            tokio::spawn(async move {
                for i in range.skip(c).step_by(CLIENTS) {
                    let set = Set {
                        key: key(i),
                        value: value(i),
                    };
                    kv::write(&mut client, &addrs, set, Duration::from_secs(10)).await?;
                }
                Ok::<(), String>(())
            })
        })
        .collect();
    for t in tasks {
        t.await.map_err(|e| e.to_string())??;
    }
    Ok(())
}
