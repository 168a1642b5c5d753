//! Oversubscribed stress: pools of 2 × and 4 × as many workers as CPUs run 10⁶ tasks through
//! every path (joins, scope spawns, `'static` spawns from outside, parallel loops), counting
//! tasks lost or run twice. Lost wake-ups show as work that never finishes while the workers
//! sleep: every wait below has a watchdog that fails the test (with what was pending) instead
//! of hanging it.

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use spindle_pool::ThreadPool;

const WATCHDOG: Duration = Duration::from_secs(120);

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Run `f` on a helper thread; fail if it does not finish within the watchdog.
fn within_watchdog<R: Send + 'static>(what: &str, f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(WATCHDOG)
        .unwrap_or_else(|_| panic!("{what}: not finished after {WATCHDOG:?} (a lost wake-up?)"))
}

/// Every task's mark: how many times it ran.
fn marks(n: usize) -> Arc<Vec<AtomicU8>> {
    Arc::new((0..n).map(|_| AtomicU8::new(0)).collect())
}

fn assert_each_once(what: &str, marks: &[AtomicU8]) {
    let lost = marks.iter().filter(|m| m.load(SeqCst) == 0).count();
    let twice = marks.iter().filter(|m| m.load(SeqCst) > 1).count();
    assert_eq!((lost, twice), (0, 0), "{what}: tasks lost, run twice");
}

/// A join tree over `range` of task ids, marking each leaf.
fn tree(marks: &[AtomicU8], lo: usize, hi: usize) {
    if hi - lo == 1 {
        marks[lo].fetch_add(1, SeqCst);
        return;
    }
    let mid = lo + (hi - lo) / 2;
    spindle_pool::join(|| tree(marks, lo, mid), || tree(marks, mid, hi));
}

#[test]
fn oversubscribed_joins_spawns_and_loops_lose_nothing() {
    for factor in [2, 4] {
        let threads = factor * cpus();
        let pool = Arc::new(ThreadPool::new(threads).unwrap());

        // Joins: 400 000 leaves in trees of 4 000, from four outside threads at once.
        let m = marks(400_000);
        let (p, mm) = (pool.clone(), m.clone());
        within_watchdog("joins", move || {
            std::thread::scope(|s| {
                for t in 0..4 {
                    let (p, mm) = (&p, &mm);
                    s.spawn(move || {
                        for k in (t..100).step_by(4) {
                            p.install(|| tree(mm, k * 4000, (k + 1) * 4000));
                        }
                    });
                }
            })
        });
        assert_each_once("joins", &m);

        // Scope spawns, nested two deep: 300 000 tasks.
        let m = marks(300_000);
        let (p, mm) = (pool.clone(), m.clone());
        within_watchdog("scope spawns", move || {
            p.scope(|s| {
                for k in 0..300 {
                    let mm = &mm;
                    s.spawn(move |s| {
                        for j in 0..1000 {
                            s.spawn(move |_| {
                                mm[k * 1000 + j].fetch_add(1, SeqCst);
                            });
                        }
                    });
                }
            })
        });
        assert_each_once("scope spawns", &m);

        // 'static spawns from outside, in bursts separated by pauses long enough for the
        // workers to go to sleep: 200 000 tasks, 2 000 wake-ups from an idle pool.
        let m = marks(200_000);
        let done = Arc::new(AtomicUsize::new(0));
        let (p, mm, d) = (pool.clone(), m.clone(), done.clone());
        within_watchdog("spawns from outside", move || {
            for burst in 0..2000 {
                for j in 0..100 {
                    let (mm, d) = (mm.clone(), d.clone());
                    p.spawn(move || {
                        mm[burst * 100 + j].fetch_add(1, SeqCst);
                        d.fetch_add(1, SeqCst);
                    });
                }
                if burst % 20 == 0 {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
            while d.load(SeqCst) < 200_000 {
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        assert_each_once("spawns from outside", &m);

        // Parallel loops: 100 000 items.
        let m = marks(100_000);
        let (p, mm) = (pool.clone(), m.clone());
        within_watchdog("loops", move || {
            p.for_each(&mm[..], |x| {
                x.fetch_add(1, SeqCst);
            });
        });
        assert_each_once("loops", &m);

        // The paths under test were taken (with one CPU, nobody asks for work).
        let st = pool.stats();
        if cpus() > 1 {
            assert!(st.promotions > 0 && st.steals > 0, "{st:?}");
        }
        assert!(st.sleeps > 0, "{st:?}");
        let p = Arc::try_unwrap(pool).expect("the only handle");
        within_watchdog("shutdown", move || p.shutdown());
    }
}

#[test]
fn wake_ups_from_an_idle_pool_are_never_lost() {
    // One job at a time into a pool whose workers are asleep: each must be picked up. A lost
    // wake-up leaves the job queued with every worker asleep, and the watchdog fires.
    let pool = Arc::new(ThreadPool::new(2 * cpus()).unwrap());
    let p = pool.clone();
    let rounds = within_watchdog("single jobs into an idle pool", move || {
        let mut rounds = 0;
        for i in 0..3000u32 {
            let (tx, rx) = mpsc::channel();
            p.spawn(move || tx.send(i).unwrap());
            assert_eq!(rx.recv().unwrap(), i);
            if i % 3 == 0 {
                std::thread::sleep(Duration::from_micros(50 + (i % 7) as u64 * 30));
            }
            rounds += 1;
        }
        rounds
    });
    assert_eq!(rounds, 3000);
}

#[test]
fn a_job_blocked_on_its_child_always_finds_a_worker_for_it() {
    // Each round, into a pool whose workers are asleep: a job spawns a child (a push to its
    // own deque: plain stores) and then blocks its worker until the child has run. Only
    // another worker can run the child, and that worker went to sleep last — the case where
    // a sleeper skips the heavy fence. A push it slept through would block the round forever;
    // the watchdog turns that into a failure. (It checks the claims and hand-offs around that
    // path; the store-buffering window itself is nanoseconds wide: in three runs this test did
    // not catch a build with no fence at all, so the module's argument is what covers it.)
    let pool = Arc::new(ThreadPool::new(2.max(cpus())).unwrap());
    let p = pool.clone();
    let rounds = within_watchdog("jobs blocked on their children", move || {
        let mut rounds = 0u32;
        for i in 0..3000u32 {
            let (tx, rx) = mpsc::channel();
            p.spawn(move || {
                let (ctx, crx) = mpsc::channel();
                spindle_pool::spawn(move || ctx.send(i).unwrap());
                let got = crx.recv_timeout(WATCHDOG).expect("the child never ran");
                tx.send(got).unwrap();
            });
            assert_eq!(rx.recv().unwrap(), i);
            if i % 2 == 0 {
                std::thread::sleep(Duration::from_micros(30 + (i % 11) as u64 * 20));
            }
            rounds += 1;
        }
        rounds
    });
    assert_eq!(rounds, 3000);
}
