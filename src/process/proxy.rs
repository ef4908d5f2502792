//! The filtering proxy of network `allow` (`Network::Allow`): what a
//! confined process reaches of the network, host by host.
//!
//! # Theory of operation
//!
//! A sandbox whose network is `allow` has a network namespace of its own,
//! as with `off`: a loopback and nothing else, no route out, no DNS. Its
//! init opens one TCP listener on `127.0.0.1:`[`PROXY_PORT`] **inside**
//! that namespace and hands it to custodian (`SCM_RIGHTS`, see
//! `process::spawn`); a socket belongs to the namespace it was made in, so
//! a connection the tool makes to that port arrives on a descriptor the
//! proxy holds outside, and no process of custodian's runs inside to relay
//! it. The child's environment names the proxy (`HTTP_PROXY`,
//! `HTTPS_PROXY`, `ALL_PROXY` and their lower-case forms; `NO_PROXY` for
//! loopback), which `curl`, `pip`, `git`, `npm`, `cargo` and most HTTP
//! clients read.
//!
//! One [`NetworkProxy`] serves every sandbox of a process (a runtime, a
//! node, one CLI run): it runs on a thread of its own with a
//! single-threaded tokio runtime, and each launch *attaches* its listener
//! with its allow-list. It speaks HTTP/1.1 through `hyper` (no HTTP parser
//! of custodian's own):
//!
//! - `CONNECT host:port` (TLS and anything else tunnelled): checked against
//!   the allow-list **by the host name as requested**; allowed, the proxy
//!   resolves it, connects, answers `200` and moves the bytes both ways
//!   with `splice(2)` through a pipe per direction (they never enter the
//!   proxy's memory; `benches/network_proxy.rs`);
//! - an absolute-form request (`GET http://host:port/path`): checked the
//!   same way, then forwarded on a fresh upstream connection in origin
//!   form, hop-by-hop headers dropped;
//! - a refused host gets `403 Forbidden` whose body names the refusal
//!   (`host:port` matches no pattern of the allow-list, which it lists);
//!   anything else malformed gets `400`, an upstream that cannot be
//!   resolved or reached `502`.
//!
//! Every connection is bounded ([`MAX_CONNECTIONS`] per proxy, served
//! concurrently), and everything of a launch (its listener, its open
//! tunnels) is closed when the launch settles (`Attachment::finish`),
//! which also returns the bounded summary the evidence records: hosts
//! allowed and refused with their counts and bytes, never a path or a
//! query string (they may carry tokens).
//!
//! # Caveats
//!
//! - The decision is by name. A name the list allows may resolve to any
//!   address, the host's loopback included (the proxy connects from the
//!   host's network): allow only names you trust to resolve where you
//!   mean.
//! - A client that ignores the proxy variables reaches nothing: a direct
//!   connection from inside has no route.

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};

use crate::confine::PROXY_PORT;
use crate::confine::hosts::{AllowList, normalize_host};
use crate::sync::lock_std;

/// The most connections one proxy serves at once (tool connections, each
/// with its upstream); one more waits until one ends.
pub const MAX_CONNECTIONS: usize = 256;
/// The most connections one launch holds at once (so that one sandbox's
/// idle connections cannot take every slot of the proxy).
pub const MAX_CONNECTIONS_PER_LAUNCH: usize = 64;
/// The most bytes of a request's head (request line and headers) the
/// proxy reads; a longer one gets `431` and the connection is closed.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
/// How long a request's head may take to arrive once a connection waits
/// for one (a client that trickles it is cut off).
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// The most distinct hosts each of the summary's two lists keeps; the rest
/// are counted in [`NetworkAccess::hosts_dropped`].
pub const MAX_SUMMARY_HOSTS: usize = 32;
/// The most bytes a tunnel moves per `splice` (a pipe's capacity).
const SPLICE_CHUNK: usize = 256 * 1024;
/// Each direction's buffer of a tunnel that cannot splice.
const TUNNEL_BUF: usize = 16 * 1024;
/// How long resolving and connecting to an upstream may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The environment entries that point a child at the proxy.
pub(crate) fn proxy_env() -> [(&'static str, String); 8] {
    let url = format!("http://127.0.0.1:{PROXY_PORT}");
    let no = "localhost,127.0.0.1,::1".to_owned();
    [
        ("HTTP_PROXY", url.clone()),
        ("HTTPS_PROXY", url.clone()),
        ("ALL_PROXY", url.clone()),
        ("http_proxy", url.clone()),
        ("https_proxy", url.clone()),
        ("all_proxy", url),
        ("NO_PROXY", no.clone()),
        ("no_proxy", no),
    ]
}

/// How a [`NetworkProxy`] resolves names.
#[derive(Clone, Debug, Default)]
pub struct ProxyConfig {
    /// Names resolved to these addresses without asking the system
    /// resolver (like `curl --resolve`), lower-case.
    fixed: HashMap<String, Vec<SocketAddr>>,
    /// At most this many connections served at once (`None`:
    /// [`MAX_CONNECTIONS`]).
    max_connections: Option<usize>,
    /// [`HEADER_TIMEOUT`], shorter in tests.
    header_timeout: Option<Duration>,
}

impl ProxyConfig {
    /// The system resolver for every name.
    pub fn new() -> Self {
        ProxyConfig::default()
    }

    /// Serves at most `n` connections at once (at least 1; default
    /// [`MAX_CONNECTIONS`]); one more waits, unanswered, until one ends.
    #[must_use]
    pub fn with_max_connections(mut self, n: usize) -> Self {
        self.max_connections = Some(n.max(1));
        self
    }

    /// Resolves `name` (any port asked) to `addr`'s IP, on the port asked,
    /// without the system resolver. The allow-list still decides first.
    #[must_use]
    pub fn with_host(mut self, name: &str, addr: std::net::IpAddr) -> Self {
        self.fixed
            .entry(name.to_ascii_lowercase())
            .or_default()
            .push(SocketAddr::new(addr, 0));
        self
    }
}

/// The summary of one launch's network through the proxy (evidence
/// field `network`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct NetworkAccess {
    /// `allow`.
    pub mode: String,
    /// The allow-list, canonical.
    pub allow_hosts: Vec<String>,
    /// Where the proxy listened inside the sandbox.
    pub proxy: String,
    /// Hosts asked for and allowed, with counts (at most
    /// [`MAX_SUMMARY_HOSTS`]).
    pub allowed: Vec<HostAccess>,
    /// Hosts asked for and refused (at most [`MAX_SUMMARY_HOSTS`]).
    pub refused: Vec<HostAccess>,
    /// Requests (`CONNECT`s and forwarded requests) allowed in all.
    pub requests_allowed: u64,
    /// Requests refused in all (`403`).
    pub requests_refused: u64,
    /// Bytes sent upstream in all.
    pub bytes_up: u64,
    /// Bytes received from upstream in all.
    pub bytes_down: u64,
    /// Hosts not listed because a list was full.
    pub hosts_dropped: u64,
}

/// One host of [`NetworkAccess`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct HostAccess {
    /// The host as requested, normalized (lower-case, no trailing dot);
    /// what could not be a host name is `"(invalid)"`.
    pub host: String,
    /// The port asked for.
    pub port: u16,
    /// Requests for it.
    pub requests: u64,
    /// Bytes sent to it (allowed hosts only).
    pub bytes_up: u64,
    /// Bytes received from it.
    pub bytes_down: u64,
}

/// A host's entry in a launch's summary: allowed or not, host, port.
type HostKey = (bool, String, u16);

/// A launch's counters, shared by its connections.
#[derive(Default)]
struct Stats {
    hosts: Mutex<BTreeMap<HostKey, HostAccess>>,
    dropped: AtomicU64,
    allowed: AtomicU64,
    refused: AtomicU64,
}

impl Stats {
    /// Counts one request; the entry to add bytes to, when one is kept.
    fn request(&self, allowed: bool, host: &str, port: u16) -> Option<HostKey> {
        (if allowed {
            &self.allowed
        } else {
            &self.refused
        })
        .fetch_add(1, Ordering::Relaxed);
        let key = (allowed, host.to_owned(), port);
        let mut hosts = lock_std(&self.hosts);
        let listed = hosts.keys().filter(|k| k.0 == allowed).count();
        if !hosts.contains_key(&key) && listed >= MAX_SUMMARY_HOSTS {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let e = hosts.entry(key.clone()).or_insert_with(|| HostAccess {
            host: host.to_owned(),
            port,
            ..HostAccess::default()
        });
        e.requests += 1;
        Some(key)
    }

    fn bytes(&self, key: Option<&HostKey>, up: u64, down: u64) {
        if let Some(key) = key {
            if let Some(e) = lock_std(&self.hosts).get_mut(key) {
                e.bytes_up += up;
                e.bytes_down += down;
            }
        }
    }

    /// The summary, with `live` (connections still open: their key and
    /// bytes so far) counted in.
    fn summary(
        &self,
        allow: &AllowList,
        up: u64,
        down: u64,
        live: &[(Option<&HostKey>, u64, u64)],
    ) -> NetworkAccess {
        let mut hosts = lock_std(&self.hosts).clone();
        for (key, u, d) in live {
            if let Some(e) = key.and_then(|k| hosts.get_mut(k)) {
                e.bytes_up += u;
                e.bytes_down += d;
            }
        }
        let pick = |allowed: bool| {
            hosts
                .iter()
                .filter(|(k, _)| k.0 == allowed)
                .map(|(_, v)| v.clone())
                .collect()
        };
        NetworkAccess {
            mode: "allow".into(),
            allow_hosts: allow.patterns().map(ToString::to_string).collect(),
            proxy: format!("127.0.0.1:{PROXY_PORT}"),
            allowed: pick(true),
            refused: pick(false),
            requests_allowed: self.allowed.load(Ordering::Relaxed),
            requests_refused: self.refused.load(Ordering::Relaxed),
            bytes_up: up,
            bytes_down: down,
            hosts_dropped: self.dropped.load(Ordering::Relaxed),
        }
    }
}

/// What one launch shares with its connections.
struct Launch {
    allow: AllowList,
    stats: Stats,
    up: AtomicU64,
    down: AtomicU64,
    /// `true` once the launch settled: every task of it ends.
    stop: watch::Receiver<bool>,
    /// [`MAX_CONNECTIONS_PER_LAUNCH`].
    slots: Arc<Semaphore>,
    /// Connections still open, whose bytes the summary counts live (a
    /// tunnel still open when the launch settles is in its evidence).
    live: Mutex<Vec<LiveConn>>,
}

/// An open connection's counters.
struct LiveConn {
    key: Option<HostKey>,
    up: Arc<AtomicU64>,
    down: Arc<AtomicU64>,
}

impl Launch {
    /// Counts a connection's bytes from now on, live.
    fn track(&self, key: Option<HostKey>, up: &Arc<AtomicU64>, down: &Arc<AtomicU64>) {
        lock_std(&self.live).push(LiveConn {
            key,
            up: Arc::clone(up),
            down: Arc::clone(down),
        });
    }

    /// The connection counting into `up` ended: its bytes move into the
    /// totals, under the lock the summary takes (counted once, either way).
    fn untrack(&self, up: &Arc<AtomicU64>) {
        let mut live = lock_std(&self.live);
        if let Some(i) = live.iter().position(|c| Arc::ptr_eq(&c.up, up)) {
            let c = live.swap_remove(i);
            let (u, d) = (c.up.load(Ordering::Relaxed), c.down.load(Ordering::Relaxed));
            self.up.fetch_add(u, Ordering::Relaxed);
            self.down.fetch_add(d, Ordering::Relaxed);
            self.stats.bytes(c.key.as_ref(), u, d);
        }
    }

    /// The launch's summary: the ended connections' bytes and the open
    /// ones' so far.
    fn summary(&self) -> NetworkAccess {
        let live = lock_std(&self.live);
        let now: Vec<_> = live
            .iter()
            .map(|c| {
                (
                    c.key.as_ref(),
                    c.up.load(Ordering::Relaxed),
                    c.down.load(Ordering::Relaxed),
                )
            })
            .collect();
        let up = self.up.load(Ordering::Relaxed) + now.iter().map(|n| n.1).sum::<u64>();
        let down = self.down.load(Ordering::Relaxed) + now.iter().map(|n| n.2).sum::<u64>();
        self.stats.summary(&self.allow, up, down, &now)
    }
}

/// A connection's place: one of its launch's and one of the proxy's.
struct Slot {
    _launch: tokio::sync::OwnedSemaphorePermit,
    _proxy: tokio::sync::OwnedSemaphorePermit,
}

/// A filtering proxy serving the sandboxes of this process (module docs).
///
/// Cheap to clone; the proxy's thread ends when the last clone and the
/// last launch attached to it are gone.
#[derive(Clone)]
pub struct NetworkProxy {
    inner: Arc<Inner>,
}

struct Inner {
    runtime: tokio::runtime::Handle,
    /// Dropped with the last user: the proxy's thread then ends.
    _alive: tokio::sync::oneshot::Sender<()>,
    config: ProxyConfig,
    slots: Arc<Semaphore>,
}

impl std::fmt::Debug for NetworkProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetworkProxy").finish_non_exhaustive()
    }
}

impl NetworkProxy {
    /// Starts a proxy on a thread of its own.
    ///
    /// # Errors
    ///
    /// The thread or its runtime could not be started.
    pub fn start(config: ProxyConfig) -> io::Result<NetworkProxy> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()?;
        let handle = runtime.handle().clone();
        let (alive, gone) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("custodian-proxy".into())
            .spawn(move || {
                runtime.block_on(async {
                    let _ = gone.await;
                });
                // Ends every task still running (the connections of
                // launches that never finished).
                runtime.shutdown_timeout(Duration::from_millis(100));
            })?;
        Ok(NetworkProxy {
            inner: Arc::new(Inner {
                runtime: handle,
                _alive: alive,
                slots: Arc::new(Semaphore::new(
                    config.max_connections.unwrap_or(MAX_CONNECTIONS),
                )),
                config,
            }),
        })
    }

    /// The proxy of every launch that names none: started on first use,
    /// with the system resolver, living as long as the process.
    ///
    /// # Errors
    ///
    /// As [`NetworkProxy::start`].
    pub fn shared() -> io::Result<NetworkProxy> {
        static SHARED: OnceLock<NetworkProxy> = OnceLock::new();
        if let Some(p) = SHARED.get() {
            return Ok(p.clone());
        }
        let p = NetworkProxy::start(ProxyConfig::new())?;
        Ok(SHARED.get_or_init(|| p).clone())
    }

    /// Serves the connections arriving on `listener` (a sandbox's, see
    /// the module docs) with `allow`, until [`Attachment::finish`].
    pub(crate) fn attach(&self, listener: OwnedFd, allow: AllowList) -> io::Result<Attachment> {
        let (stop_tx, stop_rx) = watch::channel(false);
        let launch = Arc::new(Launch {
            allow,
            stats: Stats::default(),
            up: AtomicU64::new(0),
            down: AtomicU64::new(0),
            stop: stop_rx,
            slots: Arc::new(Semaphore::new(MAX_CONNECTIONS_PER_LAUNCH)),
            live: Mutex::new(Vec::new()),
        });
        let std_listener = std::net::TcpListener::from(listener);
        let listener = {
            let _enter = self.inner.runtime.enter();
            TcpListener::from_std(std_listener)?
        };
        let inner = Arc::clone(&self.inner);
        let l = Arc::clone(&launch);
        let task = self.inner.runtime.spawn(accept_loop(inner, l, listener));
        Ok(Attachment {
            launch,
            stop: stop_tx,
            task: Some(task),
            _proxy: self.clone(),
        })
    }
}

/// One launch's use of the proxy: ends with [`Attachment::finish`] (or
/// when dropped), which closes its listener and every tunnel it opened.
pub(crate) struct Attachment {
    launch: Arc<Launch>,
    stop: watch::Sender<bool>,
    task: Option<tokio::task::JoinHandle<()>>,
    _proxy: NetworkProxy,
}

impl std::fmt::Debug for Attachment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attachment").finish_non_exhaustive()
    }
}

impl Attachment {
    /// Stops serving the launch and returns its summary.
    pub(crate) fn finish(mut self) -> NetworkAccess {
        self.end();
        self.launch.summary()
    }

    fn end(&mut self) {
        let _ = self.stop.send(true);
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

impl Drop for Attachment {
    fn drop(&mut self) {
        self.end();
    }
}

/// A launch's network `allow`, as its driver holds it until settlement.
#[derive(Debug)]
pub(crate) enum Served {
    /// The proxy serves the sandbox's listener.
    Attached(Attachment),
    /// The proxy could not take the listener (it was closed: the tool's
    /// connections are refused, never left hanging).
    Unavailable(AllowList),
}

impl Served {
    /// Attaches `listener` to `proxy`, or records why not.
    pub(crate) fn start(proxy: &NetworkProxy, listener: OwnedFd, allow: AllowList) -> Served {
        match proxy.attach(listener, allow.clone()) {
            Ok(a) => Served::Attached(a),
            Err(e) => {
                tracing::warn!(error = %e, "the network proxy could not take a sandbox's listener");
                Served::Unavailable(allow)
            }
        }
    }

    /// Ends the service; the evidence's summary.
    pub(crate) fn finish(self) -> NetworkAccess {
        match self {
            Served::Attached(a) => a.finish(),
            Served::Unavailable(allow) => NetworkAccess {
                proxy: "unavailable".into(),
                ..Stats::default().summary(&allow, 0, 0, &[])
            },
        }
    }
}

async fn accept_loop(inner: Arc<Inner>, launch: Arc<Launch>, listener: TcpListener) {
    let mut stop = launch.stop.clone();
    loop {
        let ours = tokio::select! {
            p = Arc::clone(&launch.slots).acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => return,
            },
            _ = stopped(&mut stop) => return,
        };
        let permit = tokio::select! {
            p = Arc::clone(&inner.slots).acquire_owned() => match p {
                Ok(p) => Slot { _launch: ours, _proxy: p },
                Err(_) => return,
            },
            _ = stopped(&mut stop) => return,
        };
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                // EMFILE and the like: back off rather than spin.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
            _ = stopped(&mut stop) => return,
        };
        let inner = Arc::clone(&inner);
        let launch = Arc::clone(&launch);
        tokio::spawn(async move {
            // Shared with a tunnel the connection turns into: the slot is
            // free only once both ended.
            let permit = Arc::new(permit);
            let mut stop = launch.stop.clone();
            let service = {
                let inner = Arc::clone(&inner);
                let launch = Arc::clone(&launch);
                let permit = Arc::clone(&permit);
                hyper::service::service_fn(move |req| {
                    serve(
                        Arc::clone(&inner),
                        Arc::clone(&launch),
                        Arc::clone(&permit),
                        req,
                    )
                })
            };
            let conn = hyper::server::conn::http1::Builder::new()
                .max_buf_size(MAX_HEAD_BYTES)
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(inner.config.header_timeout.unwrap_or(HEADER_TIMEOUT))
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades();
            tokio::select! {
                _ = conn => {}
                _ = stopped(&mut stop) => {}
            }
        });
    }
}

/// Completes once the launch settled (or its attachment is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await.map(|_| ());
}

type Body = BoxBody<Bytes, hyper::Error>;

fn text(status: StatusCode, body: String) -> Response<Body> {
    let mut r = Response::new(
        Full::new(Bytes::from(body))
            .map_err(|never: Infallible| match never {})
            .boxed(),
    );
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    // A refusal ends the connection: nothing more is served on it.
    r.headers_mut().insert(
        hyper::header::CONNECTION,
        hyper::header::HeaderValue::from_static("close"),
    );
    r
}

fn refused(allow: &AllowList, host: &str, port: u16) -> Response<Body> {
    let list: Vec<String> = allow.patterns().map(ToString::to_string).collect();
    text(
        StatusCode::FORBIDDEN,
        format!(
            "custodian: {host}:{port} refused by the network allow-list \
             (rule: no pattern matches; allowed: {})\n",
            list.join(", ")
        ),
    )
}

/// The host as the summary records it.
fn shown(host: &str) -> String {
    normalize_host(host).unwrap_or_else(|| "(invalid)".to_owned())
}

async fn serve(
    inner: Arc<Inner>,
    launch: Arc<Launch>,
    permit: Arc<Slot>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let is_connect = req.method() == Method::CONNECT;
    let Some((host, port)) = target(&req, is_connect) else {
        return Ok(text(
            StatusCode::BAD_REQUEST,
            "custodian: a proxy request names its host: CONNECT host:port or an absolute http:// URI\n"
                .into(),
        ));
    };
    if launch.allow.allows(&host, port).is_none() {
        launch.stats.request(false, &shown(&host), port);
        return Ok(refused(&launch.allow, &host, port));
    }
    let key = launch.stats.request(true, &shown(&host), port);
    let upstream = match connect(&inner.config, &host, port).await {
        Ok(s) => s,
        Err(why) => {
            return Ok(text(
                StatusCode::BAD_GATEWAY,
                format!("custodian: {host}:{port} could not be reached: {why}\n"),
            ));
        }
    };
    if is_connect {
        let launch = Arc::clone(&launch);
        tokio::spawn(async move {
            let _slot = permit;
            let (up, down) = (Arc::clone(&upstream.up), Arc::clone(&upstream.down));
            launch.track(key, &up, &down);
            let mut stop = launch.stop.clone();
            let mut upstream = upstream;
            tokio::select! {
                upgraded = hyper::upgrade::on(req) => {
                    if let Ok(upgraded) = upgraded {
                        tokio::select! {
                            _ = tunnel(upgraded, &mut upstream) => {}
                            _ = stopped(&mut stop) => {}
                        }
                    }
                }
                _ = stopped(&mut stop) => {}
            }
            launch.untrack(&up);
        });
        return Ok(Response::new(
            http_body_util::Empty::new()
                .map_err(|never: Infallible| match never {})
                .boxed(),
        ));
    }
    Ok(forward(launch, key, upstream, req).await)
}

/// Copies a tunnel's bytes both ways until both sides closed: with
/// `splice(2)` through a pipe per direction when the tool's side is the raw
/// socket (the bytes never enter this process's memory), else through
/// small buffers.
async fn tunnel(upgraded: hyper::upgrade::Upgraded, upstream: &mut Counted) -> io::Result<()> {
    use tokio::io::AsyncWriteExt;
    match upgraded.downcast::<TokioIo<TcpStream>>() {
        Ok(parts) => {
            let inside = parts.io.into_inner();
            // What the tool sent after its CONNECT, read with the head.
            if !parts.read_buf.is_empty() {
                upstream.write_all(&parts.read_buf).await?;
            }
            let (up, down) = (Arc::clone(&upstream.up), Arc::clone(&upstream.down));
            tokio::try_join!(
                splice_one(&inside, &upstream.stream, &up),
                splice_one(&upstream.stream, &inside, &down),
            )?;
            Ok(())
        }
        Err(upgraded) => {
            let mut inside = TokioIo::new(upgraded);
            tokio::io::copy_bidirectional_with_sizes(&mut inside, upstream, TUNNEL_BUF, TUNNEL_BUF)
                .await
                .map(|_| ())
        }
    }
}

/// One direction of a tunnel: `src` to `dst` through a pipe, until `src`
/// ends (then `dst`'s writing side is shut down), counting into `moved`.
/// It reads into the pipe while there is room and writes out of it while
/// it holds bytes, whichever the sockets allow first, so neither side
/// waits for the other to finish a chunk.
async fn splice_one(src: &TcpStream, dst: &TcpStream, moved: &AtomicU64) -> io::Result<()> {
    use rustix::pipe::{PipeFlags, SpliceFlags, pipe_with, splice};
    use std::os::fd::AsFd;
    use tokio::io::Interest;
    let (pipe_r, pipe_w) = pipe_with(PipeFlags::NONBLOCK | PipeFlags::CLOEXEC)?;
    // A larger pipe moves more per call; the default (64 KiB) where refused.
    let room = rustix::pipe::fcntl_setpipe_size(&pipe_w, SPLICE_CHUNK).unwrap_or(64 * 1024);
    let flags = SpliceFlags::MOVE | SpliceFlags::NONBLOCK;
    let mut held = 0usize;
    let mut ended = false;
    loop {
        if ended && held == 0 {
            let _ = rustix::net::shutdown(dst, rustix::net::Shutdown::Write);
            return Ok(());
        }
        tokio::select! {
            ready = src.readable(), if !ended && held < room => {
                ready?;
                match src.try_io(Interest::READABLE, || {
                    splice(src.as_fd(), None, &pipe_w, None, room - held, flags)
                        .map_err(io::Error::from)
                }) {
                    Ok(0) => ended = true,
                    Ok(n) => held += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
            }
            ready = dst.writable(), if held > 0 => {
                ready?;
                match dst.try_io(Interest::WRITABLE, || {
                    splice(&pipe_r, None, dst.as_fd(), None, held, flags).map_err(io::Error::from)
                }) {
                    Ok(m) => {
                        held -= m;
                        moved.fetch_add(m as u64, Ordering::Relaxed);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
            }
        }
    }
}

/// The host and port a request names: `CONNECT`'s authority (port
/// required), or an absolute `http://` URI's (port 80 by default).
fn target(req: &Request<Incoming>, connect: bool) -> Option<(String, u16)> {
    let uri = req.uri();
    if connect {
        let a = uri.authority()?;
        return Some((a.host().to_owned(), a.port_u16()?));
    }
    if uri.scheme_str() != Some("http") {
        return None;
    }
    let a = uri.authority()?;
    Some((a.host().to_owned(), a.port_u16().unwrap_or(80)))
}

async fn connect(config: &ProxyConfig, host: &str, port: u16) -> Result<Counted, &'static str> {
    let addrs: Vec<SocketAddr> = match config.fixed.get(&host.to_ascii_lowercase()) {
        Some(fixed) => fixed
            .iter()
            .map(|a| SocketAddr::new(a.ip(), port))
            .collect(),
        None => {
            let found: Vec<SocketAddr> = match tokio::time::timeout(
                CONNECT_TIMEOUT,
                tokio::net::lookup_host((host.to_owned(), port)),
            )
            .await
            {
                Ok(Ok(a)) => a.collect(),
                Ok(Err(_)) => return Err("name_not_resolved"),
                Err(_) => return Err("resolve_timeout"),
            };
            // A name resolved by DNS never leads to this host itself: its
            // loopback and link-local services are not the allowed host
            // (an IP literal, or a name pinned by `with_host`, is taken
            // as meant).
            let literal = host.parse::<std::net::IpAddr>().is_ok();
            let outside: Vec<SocketAddr> = found
                .iter()
                .copied()
                .filter(|a| literal || !is_local(a.ip()))
                .collect();
            if outside.is_empty() && !found.is_empty() {
                return Err("resolves_to_a_local_address");
            }
            outside
        }
    };
    if addrs.is_empty() {
        return Err("name_not_resolved");
    }
    for addr in addrs {
        if let Ok(Ok(s)) = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
            let _ = s.set_nodelay(true);
            return Ok(Counted::new(s));
        }
    }
    Err("connect_failed")
}

/// Loopback, unspecified or link-local: this host's own, not a remote
/// host's.
fn is_local(ip: std::net::IpAddr) -> bool {
    match ip {
        std::net::IpAddr::V4(v4) => v4.is_loopback() || v4.is_unspecified() || v4.is_link_local(),
        std::net::IpAddr::V6(v6) => {
            v6.is_loopback()
                || v6.is_unspecified()
                || (v6.segments()[0] & 0xffc0) == 0xfe80
                || v6
                    .to_ipv4_mapped()
                    .is_some_and(|v4| v4.is_loopback() || v4.is_unspecified() || v4.is_link_local())
        }
    }
}

const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "upgrade",
];

async fn forward(
    launch: Arc<Launch>,
    key: Option<(bool, String, u16)>,
    upstream: Counted,
    req: Request<Incoming>,
) -> Response<Body> {
    let (up, down) = (Arc::clone(&upstream.up), Arc::clone(&upstream.down));
    let (mut parts, body) = req.into_parts();
    // The upstream sees the host that was checked, whatever `Host` the tool
    // sent: a different one would reach another site behind the same
    // address (a shared front end).
    let Some(Ok(host)) = parts
        .uri
        .authority()
        .map(|a| hyper::header::HeaderValue::from_str(a.as_str()))
    else {
        return text(
            StatusCode::BAD_REQUEST,
            "custodian: bad request target\n".into(),
        );
    };
    parts.headers.insert(hyper::header::HOST, host);
    let origin = parts
        .uri
        .path_and_query()
        .map_or("/", hyper::http::uri::PathAndQuery::as_str)
        .to_owned();
    let Ok(uri) = origin.parse() else {
        return text(
            StatusCode::BAD_REQUEST,
            "custodian: bad request target\n".into(),
        );
    };
    parts.uri = uri;
    for h in HOP_BY_HOP {
        parts.headers.remove(h);
    }
    let req = Request::from_parts(parts, body);
    let Ok((mut sender, conn)) =
        hyper::client::conn::http1::handshake(TokioIo::new(upstream)).await
    else {
        return text(
            StatusCode::BAD_GATEWAY,
            "custodian: upstream handshake failed\n".into(),
        );
    };
    let mut stop = launch.stop.clone();
    let l = Arc::clone(&launch);
    l.track(key, &up, &down);
    tokio::spawn(async move {
        tokio::select! {
            _ = conn => {}
            _ = stopped(&mut stop) => {}
        }
        l.untrack(&up);
    });
    match sender.send_request(req).await {
        Ok(resp) => resp.map(BodyExt::boxed),
        Err(_) => text(
            StatusCode::BAD_GATEWAY,
            "custodian: the upstream request failed\n".into(),
        ),
    }
}

/// An upstream connection that counts its bytes.
struct Counted {
    stream: TcpStream,
    up: Arc<AtomicU64>,
    down: Arc<AtomicU64>,
}

impl Counted {
    fn new(stream: TcpStream) -> Counted {
        Counted {
            stream,
            up: Arc::new(AtomicU64::new(0)),
            down: Arc::new(AtomicU64::new(0)),
        }
    }
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.stream).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        self.down.fetch_add(n as u64, Ordering::Relaxed);
        r
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.stream).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = &r {
            self.up.fetch_add(*n as u64, Ordering::Relaxed);
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::{Ipv4Addr, TcpListener as StdListener, TcpStream as StdStream};
    use std::sync::mpsc;
    use std::thread;

    use super::*;

    const LOCAL: std::net::IpAddr = std::net::IpAddr::V4(Ipv4Addr::LOCALHOST);

    /// An upstream HTTP server on loopback: answers every request with
    /// `hello` and reports each request's head (line and headers).
    fn upstream() -> (u16, mpsc::Receiver<String>) {
        let l = StdListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind upstream");
        let port = l.local_addr().expect("addr").port();
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            for s in l.incoming() {
                let Ok(s) = s else { return };
                let tx = tx.clone();
                thread::spawn(move || {
                    let mut r = BufReader::new(s.try_clone().expect("clone"));
                    let mut head = String::new();
                    loop {
                        let mut line = String::new();
                        if r.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                            break;
                        }
                        head.push_str(&line);
                    }
                    let _ = tx.send(head);
                    let mut s = s;
                    let _ = s.write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
                    );
                });
            }
        });
        (port, rx)
    }

    /// A proxy with `allowed.test` and `denied.test` on loopback, attached
    /// to a listener of this test (standing in for a sandbox's).
    fn attached(allow: &[String]) -> (Attachment, std::net::SocketAddr) {
        let proxy = NetworkProxy::start(
            ProxyConfig::new()
                .with_host("allowed.test", LOCAL)
                .with_host("sub.allowed.test", LOCAL)
                .with_host("denied.test", LOCAL),
        )
        .expect("proxy");
        attached_to(&proxy, allow)
    }

    /// `proxy` attached to a listener of this test with `allow`.
    fn attached_to(proxy: &NetworkProxy, allow: &[String]) -> (Attachment, std::net::SocketAddr) {
        let l = StdListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
        l.set_nonblocking(true).expect("nonblocking");
        let addr = l.local_addr().expect("addr");
        let a = proxy
            .attach(OwnedFd::from(l), AllowList::parse(allow).expect("list"))
            .expect("attach");
        (a, addr)
    }

    fn exchange(addr: std::net::SocketAddr, request: &str) -> String {
        let mut s = StdStream::connect(addr).expect("connect to the proxy");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        s.write_all(request.as_bytes()).expect("send");
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    }

    /// A tunnel still open when the launch settles is in its summary with
    /// the bytes it moved so far (its task adds them only once it ends,
    /// after the summary was taken: a test saw `bytes_down: 0` for a page
    /// `curl` had read whole).
    #[test]
    fn a_tunnel_still_open_at_the_settlement_counts_its_bytes() {
        let l = StdListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind upstream");
        let up = l.local_addr().expect("addr").port();
        let (held_tx, held) = mpsc::channel();
        thread::spawn(move || {
            let (mut s, _) = l.accept().expect("accept");
            s.write_all(b"0123456789").expect("greet");
            let mut got = [0u8; 5];
            s.read_exact(&mut got).expect("read");
            // Keeps the connection open until the test ends.
            let _ = held_tx.send(s);
        });
        let (a, addr) = attached(&[format!("allowed.test:{up}")]);
        let mut s = StdStream::connect(addr).expect("connect to the proxy");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        write!(
            s,
            "CONNECT allowed.test:{up} HTTP/1.1\r\nHost: allowed.test:{up}\r\n\r\n"
        )
        .expect("connect");
        let mut seen = Vec::new();
        let mut buf = [0u8; 256];
        while !seen.ends_with(b"0123456789") {
            let n = s.read(&mut buf).expect("read");
            assert!(n > 0, "{}", String::from_utf8_lossy(&seen));
            seen.extend_from_slice(&buf[..n]);
        }
        assert!(
            seen.starts_with(b"HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&seen)
        );
        s.write_all(b"abcde").expect("send");
        let _conn = held
            .recv_timeout(Duration::from_secs(10))
            .expect("upstream read it");
        // The proxy counts a chunk just after the kernel delivered it:
        // wait for the live count (what `finish` reads) to show it.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let counted = |n: &NetworkAccess| n.bytes_up >= 5 && n.bytes_down >= 10;
        while !counted(&a.launch.summary()) && std::time::Instant::now() < deadline {
            thread::sleep(Duration::from_millis(5));
        }
        let summary = a.finish();
        assert_eq!(summary.allowed.len(), 1, "{summary:?}");
        assert_eq!(
            (summary.allowed[0].bytes_down, summary.allowed[0].bytes_up),
            (10, 5),
            "{summary:?}"
        );
        assert_eq!(
            (summary.bytes_down, summary.bytes_up),
            (10, 5),
            "{summary:?}"
        );
    }

    #[test]
    fn an_allowed_host_is_forwarded_in_origin_form_and_a_refused_one_gets_403() {
        let (up, heads) = upstream();
        let (a, addr) = attached(&[format!("allowed.test:{up}"), "*.allowed.test".into()]);
        let r = exchange(
            addr,
            &format!(
                "GET http://allowed.test:{up}/secret-path?token=abc HTTP/1.1\r\n\
                 Host: fronted.evil\r\nProxy-Connection: keep-alive\r\n\
                 Connection: close\r\n\r\n"
            ),
        );
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
        assert!(r.ends_with("hello"), "{r}");
        let head = heads
            .recv_timeout(Duration::from_secs(5))
            .expect("upstream saw it");
        assert!(
            head.starts_with("GET /secret-path?token=abc HTTP/1.1\r\n"),
            "{head}"
        );
        assert!(
            !head.to_ascii_lowercase().contains("proxy-connection"),
            "{head}"
        );
        // The checked host, not the one the tool's `Host` named.
        assert!(
            head.contains(&format!("host: allowed.test:{up}\r\n")),
            "{head}"
        );
        assert!(!head.contains("fronted.evil"), "{head}");

        // Same name, another port: refused; another name: refused.
        for target in [
            format!("allowed.test:{}", up.wrapping_add(1)),
            format!("denied.test:{up}"),
        ] {
            let r = exchange(
                addr,
                &format!(
                    "GET http://{target}/x HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n"
                ),
            );
            assert!(r.starts_with("HTTP/1.1 403"), "{r}");
            assert!(r.contains("refused by the network allow-list"), "{r}");
            assert!(
                r.contains(&format!("allowed.test:{up}, *.allowed.test")),
                "{r}"
            );
        }
        // The wildcard does not cover its own name on the web's ports, nor a
        // suffix trick.
        let r = exchange(
            addr,
            "CONNECT allowed.test.evil:443 HTTP/1.1\r\nHost: allowed.test.evil:443\r\n\r\n",
        );
        assert!(r.starts_with("HTTP/1.1 403"), "{r}");
        // Not a proxy request at all.
        let r = exchange(
            addr,
            "GET /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        );
        assert!(r.starts_with("HTTP/1.1 400"), "{r}");

        let summary = a.finish();
        assert_eq!(summary.requests_allowed, 1);
        assert_eq!(summary.requests_refused, 3);
        assert_eq!(summary.allowed.len(), 1);
        assert_eq!(
            (summary.allowed[0].host.as_str(), summary.allowed[0].port),
            ("allowed.test", up)
        );
        assert!(summary.allowed[0].bytes_down >= 5, "{summary:?}");
        let refused: Vec<&str> = summary.refused.iter().map(|h| h.host.as_str()).collect();
        assert_eq!(
            refused,
            ["allowed.test", "allowed.test.evil", "denied.test"]
        );
        let json = serde_json::to_string(&summary).expect("json");
        assert!(
            !json.contains("secret-path") && !json.contains("token"),
            "{json}"
        );
    }

    #[test]
    fn connect_tunnels_to_an_allowed_host_and_finishing_closes_the_tunnel() {
        let (up, heads) = upstream();
        let (a, addr) = attached(&[format!("*.allowed.test:{up}")]);
        let mut s = StdStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        s.write_all(
            format!(
                "CONNECT sub.allowed.test:{up} HTTP/1.1\r\nHost: sub.allowed.test:{up}\r\n\r\n"
            )
            .as_bytes(),
        )
        .expect("send");
        let mut r = BufReader::new(s.try_clone().expect("clone"));
        let mut status = String::new();
        r.read_line(&mut status).expect("status");
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
        let mut line = String::new();
        while r.read_line(&mut line).expect("head") > 2 {
            line.clear();
        }
        // Through the tunnel: the upstream sees the bytes as sent.
        s.write_all(b"GET /in-tunnel HTTP/1.1\r\nHost: x\r\n\r\n")
            .expect("tunnel");
        let head = heads
            .recv_timeout(Duration::from_secs(5))
            .expect("upstream saw it");
        assert!(head.starts_with("GET /in-tunnel"), "{head}");
        let mut body = [0u8; 64];
        let n = r.read(&mut body).expect("answer");
        assert!(String::from_utf8_lossy(&body[..n]).starts_with("HTTP/1.1 200"));

        // A second tunnel stays open (the upstream has not answered) until
        // the launch settles.
        let mut t = StdStream::connect(addr).expect("connect");
        t.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        t.write_all(
            format!("CONNECT sub.allowed.test:{up} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes(),
        )
        .expect("send");
        let mut rt = BufReader::new(t.try_clone().expect("clone"));
        let mut status = String::new();
        rt.read_line(&mut status).expect("status");
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
        let summary = a.finish();
        assert_eq!(summary.requests_allowed, 2);
        let mut rest = Vec::new();
        // Ends (EOF or reset) instead of timing out after ten seconds.
        let started = std::time::Instant::now();
        let _ = rt.read_to_end(&mut rest);
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the tunnel outlived its launch"
        );
        // And the listener itself is closed (a sandbox's holds its network
        // namespace): a connection is refused, within a moment.
        let started = std::time::Instant::now();
        while StdStream::connect(addr).is_ok() {
            assert!(
                started.elapsed() < Duration::from_secs(2),
                "the launch's listener outlived it"
            );
            thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn an_allowed_host_that_cannot_be_reached_gets_502_naming_why() {
        let closed = {
            let l = StdListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
            l.local_addr().expect("addr").port()
        };
        let (a, addr) = attached(&[format!("allowed.test:{closed}")]);
        let r = exchange(
            addr,
            &format!("CONNECT allowed.test:{closed} HTTP/1.1\r\nHost: x\r\n\r\n"),
        );
        assert!(r.starts_with("HTTP/1.1 502"), "{r}");
        assert!(r.contains("connect_failed"), "{r}");
        drop(a);
    }

    #[test]
    fn a_name_resolved_by_dns_to_this_hosts_loopback_is_refused_and_a_literal_is_not() {
        let (up, _heads) = upstream();
        let proxy = NetworkProxy::start(ProxyConfig::new()).expect("proxy");
        let allow = [format!("localhost:{up}"), format!("127.0.0.1:{up}")];
        let (a, addr) = attached_to(&proxy, &allow);
        // `localhost` comes from the system resolver (/etc/hosts).
        let r = exchange(
            addr,
            &format!("CONNECT localhost:{up} HTTP/1.1\r\nHost: x\r\n\r\n"),
        );
        assert!(r.starts_with("HTTP/1.1 502"), "{r}");
        assert!(r.contains("resolves_to_a_local_address"), "{r}");
        let r = exchange(
            addr,
            &format!("GET http://127.0.0.1:{up}/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
        );
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
        drop(a);
        for (ip, local) in [
            ("127.0.0.2", true),
            ("0.0.0.0", true),
            ("169.254.1.1", true),
            ("::1", true),
            ("fe80::1", true),
            ("::ffff:127.0.0.1", true),
            ("10.0.0.1", false),
            ("93.184.216.34", false),
            ("2001:db8::1", false),
        ] {
            assert_eq!(is_local(ip.parse().expect("ip")), local, "{ip}");
        }
    }

    #[test]
    fn connections_past_the_bound_wait_until_one_ends() {
        let (up, _heads) = upstream();
        let proxy = NetworkProxy::start(
            ProxyConfig::new()
                .with_host("allowed.test", LOCAL)
                .with_max_connections(1),
        )
        .expect("proxy");
        let (a, addr) = attached_to(&proxy, &[format!("allowed.test:{up}")]);
        // The first connection holds the only slot (an open tunnel).
        let mut first = StdStream::connect(addr).expect("connect");
        first
            .write_all(format!("CONNECT allowed.test:{up} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .expect("send");
        let mut buf = [0u8; 256];
        first
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let n = first.read(&mut buf).expect("answer");
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
        // The second waits, unanswered, while the first is open …
        let mut second = StdStream::connect(addr).expect("connect");
        second
            .write_all(
                format!(
                    "GET http://allowed.test:{up}/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                )
                .as_bytes(),
            )
            .expect("send");
        second
            .set_read_timeout(Some(Duration::from_millis(500)))
            .expect("timeout");
        assert!(second.read(&mut buf).is_err(), "served past the bound");
        // … and is served once it closes.
        drop(first);
        second
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut out = String::new();
        let _ = second.read_to_string(&mut out);
        assert!(out.starts_with("HTTP/1.1 200"), "{out}");
        drop(a);
    }

    #[test]
    fn hostile_requests_get_typed_refusals_and_a_trickled_head_is_cut_off() {
        let (up, _heads) = upstream();
        let proxy = NetworkProxy::start(ProxyConfig {
            header_timeout: Some(Duration::from_millis(300)),
            ..ProxyConfig::new().with_host("allowed.test", LOCAL)
        })
        .expect("proxy");
        let (a, addr) = attached_to(&proxy, &[format!("allowed.test:{up}")]);
        // Not HTTP at all.
        let r = exchange(addr, "\x16\x03\x01 garbage\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 400"), "{r:?}");
        // A head past the bound: 431, nothing forwarded.
        let huge = format!(
            "GET http://allowed.test:{up}/ HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
            "a".repeat(MAX_HEAD_BYTES * 2)
        );
        let r = exchange(addr, &huge);
        assert!(r.starts_with("HTTP/1.1 431"), "{:?}", &r[..r.len().min(80)]);
        // CONNECT without a port, to an address literal not on the list
        // (this host's loopback included): refused.
        for target in ["allowed.test", "127.0.0.1:22", "[::1]:22", "10.0.0.1:443"] {
            let r = exchange(
                addr,
                &format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n"),
            );
            assert!(
                r.starts_with("HTTP/1.1 400") || r.starts_with("HTTP/1.1 403"),
                "{target}: {r}"
            );
        }
        // https:// in absolute form is not forwarded (TLS goes through
        // CONNECT).
        let r = exchange(
            addr,
            &format!("GET https://allowed.test:{up}/ HTTP/1.1\r\nHost: x\r\n\r\n"),
        );
        assert!(r.starts_with("HTTP/1.1 400"), "{r}");
        // Slowloris: half a head, then nothing; the proxy hangs up.
        let mut slow = StdStream::connect(addr).expect("connect");
        slow.write_all(b"GET http://allowed.test/ HTTP/1.1\r\nHost: a")
            .expect("send");
        slow.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let started = std::time::Instant::now();
        let mut rest = Vec::new();
        let _ = slow.read_to_end(&mut rest);
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "a trickled head held its connection for {:?}",
            started.elapsed()
        );
        let s = a.finish();
        assert_eq!(s.requests_allowed, 0, "{s:?}");
    }

    #[test]
    fn the_summary_keeps_a_bounded_number_of_hosts() {
        let stats = Stats::default();
        for i in 0..(MAX_SUMMARY_HOSTS + 5) {
            stats.request(false, &format!("h{i}.test"), 443);
        }
        stats.request(false, "h0.test", 443);
        let s = stats.summary(&AllowList::parse(&["a.test"]).expect("list"), 0, 0, &[]);
        assert_eq!(s.refused.len(), MAX_SUMMARY_HOSTS);
        assert_eq!(s.hosts_dropped, 5);
        assert_eq!(s.requests_refused, MAX_SUMMARY_HOSTS as u64 + 6);
        assert_eq!(
            s.refused
                .iter()
                .find(|h| h.host == "h0.test")
                .map(|h| h.requests),
            Some(2)
        );
    }

    #[test]
    fn the_child_environment_names_the_proxy_in_both_cases() {
        let env = proxy_env();
        let get = |k: &str| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.as_str());
        for k in ["HTTP_PROXY", "https_proxy", "ALL_PROXY", "http_proxy"] {
            assert_eq!(get(k), Some("http://127.0.0.1:28080"), "{k}");
        }
        assert_eq!(get("no_proxy"), Some("localhost,127.0.0.1,::1"));
    }
}
