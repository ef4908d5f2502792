//! The late-open race, through the real wire, thousands of times.
//!
//! An executor opens the request's workspace on a node while a caller
//! cancel lands anywhere around it; between edge and node a proxy loses or
//! duplicates `open_workspace` answers and duplicates `open_workspace` and
//! `cleanup_workspace` frames. The node is the real [`Node`] over a real
//! [`WorkspaceNode`] on a temporary directory, the edge the real
//! [`Coordinator`] driving the real [`WireClient`]. Afterwards: no job
//! directory remains on disk, no request was cleaned twice on the node, and
//! every request completed.
//!
//! The same harness run with the executor in the old order (open on the
//! node, *then* tell the request) leaves job directories behind: the
//! control below asserts that it does, so the check is known to bite.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use custodian::error::SafeCode;
use custodian::machine::request::{Candidate, CleanupReport, FinalResult};
use custodian::process::LaunchOptions;
use custodian::request::{
    Completion, Coordinator, RequestHandle, RequestId, RequestLimits, TerminalSink,
    TerminalWriteError,
};
use custodian::wire::{
    CleanupVerdict, Node, NodeConfig, NodeScope, NodeWorkspace, OpenError, ProcessSummary, RunSpec,
    WireClient, WorkspaceNode,
};
use custodian::workspace::{Workspace, WorkspaceConfig};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};

/// How many requests each transport races (debug build: a few seconds).
const REQUESTS: usize = 2000;
/// Requests in flight at once.
const CONCURRENCY: usize = 32;
/// Every this many requests the executor announces only after the request
/// completed (the forced refused branch).
const LATE_EVERY: usize = 50;

/// The real workspace node, counting what the node asked of it.
struct Counting {
    inner: WorkspaceNode,
    opens: Mutex<HashMap<RequestId, u32>>,
    cleanups: Mutex<HashMap<RequestId, u32>>,
}

impl Counting {
    fn bump(map: &Mutex<HashMap<RequestId, u32>>, id: &RequestId) {
        *map.lock().unwrap().entry(id.clone()).or_default() += 1;
    }
}

impl NodeWorkspace for Counting {
    type Held = NodeScope;

    async fn open(&self, request: &RequestId) -> Result<NodeScope, SafeCode> {
        let r = self.inner.open(request).await;
        if r.is_ok() {
            Counting::bump(&self.opens, request);
        }
        r
    }
    async fn write_artifact(
        &self,
        request: &RequestId,
        held: &NodeScope,
        name: &str,
        contents: &[u8],
    ) -> Result<u64, SafeCode> {
        self.inner
            .write_artifact(request, held, name, contents)
            .await
    }
    async fn run(
        &self,
        request: &RequestId,
        held: &NodeScope,
        spec: RunSpec,
    ) -> Result<ProcessSummary, SafeCode> {
        self.inner.run(request, held, spec).await
    }
    async fn cancel(&self, request: &RequestId, held: Option<&NodeScope>) -> u32 {
        self.inner.cancel(request, held).await
    }
    async fn cleanup(&self, request: &RequestId) -> CleanupVerdict {
        Counting::bump(&self.cleanups, request);
        self.inner.cleanup(request).await
    }
}

#[derive(Default)]
struct Sink;

impl TerminalSink for Sink {
    async fn write_terminal(
        &self,
        _: &RequestId,
        _: &FinalResult,
    ) -> Result<(), TerminalWriteError> {
        Ok(())
    }
}

/// A small deterministic generator (xorshift64*), one per task.
#[derive(Clone)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

/// What the proxy did to the traffic.
#[derive(Default)]
struct Faults {
    open_answers_lost: AtomicU64,
    open_answers_duplicated: AtomicU64,
    open_frames_duplicated: AtomicU64,
    cleanup_frames_duplicated: AtomicU64,
}

/// Forwards edge → node, duplicating some `open_workspace` and
/// `cleanup_workspace` frames and remembering which `seq` opened.
async fn pump_requests<R, W>(
    from: R,
    mut to: W,
    opens: Arc<Mutex<HashSet<u64>>>,
    faults: Arc<Faults>,
    mut rng: Rng,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut lines = BufReader::new(from).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let v: serde_json::Value = serde_json::from_str(&line).expect("the edge sends JSON");
        let op = v["op"].as_str().unwrap_or_default();
        let copies = match op {
            "open_workspace" => {
                opens.lock().unwrap().insert(v["seq"].as_u64().unwrap());
                if rng.below(8) == 0 {
                    faults
                        .open_frames_duplicated
                        .fetch_add(1, Ordering::Relaxed);
                    2
                } else {
                    1
                }
            }
            "cleanup_workspace" if rng.below(4) == 0 => {
                faults
                    .cleanup_frames_duplicated
                    .fetch_add(1, Ordering::Relaxed);
                2
            }
            _ => 1,
        };
        for _ in 0..copies {
            if to.write_all(format!("{line}\n").as_bytes()).await.is_err() {
                return;
            }
        }
    }
    let _ = to.shutdown().await;
}

/// Forwards node → edge, losing or duplicating some answers to opens.
async fn pump_answers<R, W>(
    from: R,
    mut to: W,
    opens: Arc<Mutex<HashSet<u64>>>,
    faults: Arc<Faults>,
    mut rng: Rng,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut lines = BufReader::new(from).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let v: serde_json::Value = serde_json::from_str(&line).expect("the node sends JSON");
        let is_open = v["seq"]
            .as_u64()
            .is_some_and(|seq| opens.lock().unwrap().contains(&seq));
        let copies = if is_open {
            match rng.below(6) {
                0 => {
                    faults.open_answers_lost.fetch_add(1, Ordering::Relaxed);
                    0
                }
                1 => {
                    faults
                        .open_answers_duplicated
                        .fetch_add(1, Ordering::Relaxed);
                    2
                }
                _ => 1,
            }
        } else {
            1
        };
        for _ in 0..copies {
            if to.write_all(format!("{line}\n").as_bytes()).await.is_err() {
                return;
            }
        }
    }
}

/// The order the executor opens in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Order {
    /// Announce to the request, then open on the node
    /// ([`WireClient::open_announced`]).
    AnnounceFirst,
    /// The old order: open on the node, then tell the request.
    OpenFirst,
}

#[derive(Debug, Default)]
struct Totals {
    requests: usize,
    completed: usize,
    opened_on_node: u32,
    node_cleanups: u32,
    double_cleanups: usize,
    announced: usize,
    refused: usize,
    answer_lost_or_cancelled: usize,
    executor_succeeded: usize,
    jobs_left: usize,
}

type Edge = Coordinator<WireClient, WireClient, Sink>;

/// One executor: yields a random number of times, opens in `order`, writes
/// an artifact, reports success. Stops waiting when the request is
/// cancelled.
async fn executor(
    client: WireClient,
    h: RequestHandle,
    order: Order,
    mut rng: Rng,
    late: bool,
) -> &'static str {
    if late {
        // Forced branch: announce only once the request has completed, so
        // every run takes the refused path through the real wire whatever
        // the free race happens to produce on this transport.
        h.finished().await;
    }
    for _ in 0..rng.below(4) {
        tokio::task::yield_now().await;
    }
    let opened = match order {
        Order::AnnounceFirst => client.open_announced(&h).await,
        Order::OpenFirst => {
            let open = async {
                client
                    .open_workspace(h.id())
                    .await
                    .map_err(OpenError::Wire)?;
                h.workspace_opening().await?;
                Ok(false)
            };
            tokio::select! {
                biased;
                () = h.cancelled() => Err(OpenError::Cancelled),
                r = open => r,
            }
        }
    };
    match opened {
        Ok(_) => {
            let _ = client
                .write_artifact(h.id(), "out/result.txt", "done")
                .await;
            h.candidate(Candidate::Success);
            "succeeded"
        }
        Err(OpenError::Refused(_)) => "refused",
        Err(OpenError::Cancelled) => "cancelled",
        Err(_) => {
            h.candidate(Candidate::ExecutorError {
                code: SafeCode::new("open_failed"),
            });
            "open_failed"
        }
    }
}

async fn race<IO>(
    name: &str,
    order: Order,
    edge_io: (IO, IO),
    node_io: (IO, IO),
    workspace_dir: &Path,
) -> Totals
where
    IO: AsyncRead + AsyncWrite + Send + 'static,
{
    let workspace = Workspace::open(workspace_dir, WorkspaceConfig::default()).unwrap();
    let node = Node::new(
        Counting {
            inner: WorkspaceNode::new(
                workspace,
                LaunchOptions::new(workspace_dir),
                Duration::from_secs(5),
            ),
            opens: Mutex::default(),
            cleanups: Mutex::default(),
        },
        NodeConfig::default(),
    );
    // edge_io.0 ↔ edge_io.1 ↔ proxy ↔ node_io.0 ↔ node_io.1
    let (edge, edge_far) = edge_io;
    let (node_near, node_end) = node_io;
    let n = Arc::clone(&node);
    tokio::spawn(async move { n.serve_to_end(node_end).await });
    let faults = Arc::new(Faults::default());
    let opens = Arc::new(Mutex::new(HashSet::new()));
    let (far_r, far_w) = tokio::io::split(edge_far);
    let (near_r, near_w) = tokio::io::split(node_near);
    tokio::spawn(pump_requests(
        far_r,
        near_w,
        Arc::clone(&opens),
        Arc::clone(&faults),
        Rng::new(1),
    ));
    tokio::spawn(pump_answers(
        near_r,
        far_w,
        Arc::clone(&opens),
        Arc::clone(&faults),
        Rng::new(2),
    ));
    let client = WireClient::new(edge, custodian::wire::DEFAULT_MAX_FRAME);
    let co: Edge = Coordinator::new(
        Arc::new(client.clone()),
        Arc::new(client.clone()),
        Arc::new(Sink),
        RequestLimits::default(),
    );

    let started = Instant::now();
    let mut totals = Totals::default();
    let outcomes = Arc::new(Mutex::new(HashMap::<&'static str, usize>::new()));
    let completed = Arc::new(AtomicU32::new(0));
    let mut ids = Vec::new();
    for batch in 0..REQUESTS.div_ceil(CONCURRENCY) {
        let mut tasks = Vec::new();
        for k in 0..CONCURRENCY {
            let i = batch * CONCURRENCY + k;
            if i >= REQUESTS {
                break;
            }
            let id = RequestId::new(&format!("{name}-{i}")).unwrap();
            ids.push(id.clone());
            let h = co.start(id);
            let mut rng = Rng::new(1000 + i as u64);
            let late = i % LATE_EVERY == LATE_EVERY - 1;
            let exec = tokio::spawn(executor(
                client.clone(),
                h.clone(),
                order,
                rng.clone(),
                late,
            ));
            let cancel_after = rng.below(12);
            let canceller = {
                let h = h.clone();
                tokio::spawn(async move {
                    for _ in 0..cancel_after {
                        tokio::task::yield_now().await;
                    }
                    h.candidate(Candidate::CallerCancel);
                })
            };
            let outcomes = Arc::clone(&outcomes);
            let completed = Arc::clone(&completed);
            tasks.push(tokio::spawn(async move {
                let done: Completion = tokio::time::timeout(Duration::from_secs(20), h.finished())
                    .await
                    .unwrap_or_else(|_| panic!("{}: never completed", h.id()));
                completed.fetch_add(1, Ordering::Relaxed);
                canceller.await.unwrap();
                let what = exec.await.unwrap();
                *outcomes.lock().unwrap().entry(what).or_default() += 1;
                let announced = h.state().workspace_announced();
                if announced {
                    assert_ne!(
                        done.result.cleanup(),
                        CleanupReport::NotNeeded,
                        "{}: an announced workspace was not cleaned",
                        h.id()
                    );
                }
                (announced, h.state().open_refused())
            }));
        }
        for t in tasks {
            let (announced, refused) = t.await.unwrap();
            totals.announced += usize::from(announced);
            totals.refused += usize::from(refused);
        }
    }
    let elapsed = started.elapsed();

    let ws = node.workspace();
    totals.requests = ids.len();
    totals.completed = completed.load(Ordering::Relaxed) as usize;
    totals.opened_on_node = ws.opens.lock().unwrap().values().sum();
    let cleanups = ws.cleanups.lock().unwrap();
    totals.node_cleanups = cleanups.values().sum();
    totals.double_cleanups = cleanups.values().filter(|&&n| n > 1).count();
    let outcomes = outcomes.lock().unwrap();
    totals.executor_succeeded = outcomes.get("succeeded").copied().unwrap_or(0);
    totals.answer_lost_or_cancelled = outcomes.get("cancelled").copied().unwrap_or(0);
    let jobs = workspace_dir.join(".custodian/job");
    totals.jobs_left = std::fs::read_dir(&jobs)
        .map(|d| d.filter_map(Result::ok).count())
        .unwrap_or(0);
    eprintln!(
        "{name} ({order:?}): {} requests in {:.1}s; completed {}, announced {}, refused {}, \
         opened on the node {}, node cleanups {}, double cleanups {}, executor: {:?}; \
         proxy: open answers lost {} / duplicated {}, open frames duplicated {}, \
         cleanup frames duplicated {}; job directories left {}",
        totals.requests,
        elapsed.as_secs_f64(),
        totals.completed,
        totals.announced,
        totals.refused,
        totals.opened_on_node,
        totals.node_cleanups,
        totals.double_cleanups,
        *outcomes,
        faults.open_answers_lost.load(Ordering::Relaxed),
        faults.open_answers_duplicated.load(Ordering::Relaxed),
        faults.open_frames_duplicated.load(Ordering::Relaxed),
        faults.cleanup_frames_duplicated.load(Ordering::Relaxed),
        totals.jobs_left,
    );
    totals
}

fn assert_nothing_left(t: &Totals) {
    assert_eq!(t.completed, t.requests, "every request completed");
    assert_eq!(t.jobs_left, 0, "job directories left on the node: {t:?}");
    assert_eq!(t.double_cleanups, 0, "a request was cleaned twice: {t:?}");
    // The race was really run: every branch was taken.
    assert!(t.opened_on_node > 0 && t.executor_succeeded > 0, "{t:?}");
    assert!(
        t.refused > 0,
        "no cancel landed before an announcement: {t:?}"
    );
    assert!(
        t.answer_lost_or_cancelled > 0,
        "no cancel landed while an open was in flight: {t:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::race_in_a_private_mount_namespace"]
async fn the_late_open_race_leaves_nothing_in_memory() {
    let dir = crate::sandbox::tempdir();
    let edge = tokio::io::duplex(1 << 16);
    let node = tokio::io::duplex(1 << 16);
    let t = race("mem", Order::AnnounceFirst, edge, node, dir.path()).await;
    assert_nothing_left(&t);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::race_in_a_private_mount_namespace"]
async fn the_late_open_race_leaves_nothing_over_a_unix_socket() {
    let dir = crate::sandbox::tempdir();
    let edge = tokio::net::UnixStream::pair().unwrap();
    let node = tokio::net::UnixStream::pair().unwrap();
    let t = race("unix", Order::AnnounceFirst, edge, node, dir.path()).await;
    assert_nothing_left(&t);
}

/// The control: the old order (open, then report) through the same harness
/// loses job directories, so the checks above can fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::race_in_a_private_mount_namespace"]
async fn the_old_order_leaves_job_directories_behind() {
    let dir = crate::sandbox::tempdir();
    let edge = tokio::io::duplex(1 << 16);
    let node = tokio::io::duplex(1 << 16);
    let t = race("old", Order::OpenFirst, edge, node, dir.path()).await;
    assert_eq!(t.completed, t.requests);
    assert!(
        t.jobs_left > 0,
        "the old order should leak under this race: {t:?}"
    );
}
