//! A request's scope, and the one table of them: what a request owns while
//! it runs.
//!
//! A [`Scope`] holds, for one request, its job (once opened), its barrier
//! (every process launched for it and the request's cgroup: see
//! [`super::barrier`]), the results it spilled and its cleanup's detail. The
//! barrier is the job's too, so whoever cleans the job stops it first. Its
//! launches and its stop take the same lock, so a launch either lands in
//! the list the stop cancels or is refused ([`ScopeLaunchError::Closed`]):
//! nothing launched for a request can miss its stop. Its spills close the same way when its completion takes them;
//! an executor that turns a process's output into spills once it settled
//! holds the stop open meanwhile ([`Scope::hold_stop`]), so that what it
//! spills is listed even when the request was cancelled.
//! Its isolated launches with the network off share one network namespace,
//! the request's (made at the first; see `process::SharedNetwork`): a
//! server one call started is reachable on loopback from the next call, and
//! from no other request.
//!
//! [`Scopes`] is the table `RequestId → Scope` of the runtime's hooks
//! (which the coordinator drives through `machine::request`). The wire's
//! node (driven by `machine::node`) keeps each open request's scope in the
//! request's row of its own one table instead (`wire::NodeRow`), from the
//! open's success to the cleanup's end. An owner adds what only it records
//! as the scope's `extra` (the runtime: the launches its policy refused;
//! the node: its sessions by id).

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::watch;

use super::LaunchError;
use super::barrier::RequestBarrier;
use crate::id::RequestId;
use crate::process::{Invocation, LaunchOptions, Running, SharedNetwork};
use crate::spill::Locator;
use crate::sync::shim::{Mutex, lock};
use crate::workspace::{CleanupResult, Job, WorkspaceError};

/// What one request owns while it runs. See the [module](self).
#[derive(Debug, Default)]
pub(crate) struct Scope<X = ()> {
    job: Mutex<Option<Job>>,
    /// The request's processes and cgroup; put on the job when it opens.
    barrier: Arc<RequestBarrier>,
    spills: Mutex<Spills>,
    cleanup: Mutex<Option<CleanupResult>>,
    /// The request's network namespace, shared by its isolated launches
    /// with the network off (made at the first one; see
    /// [`Scope::share_network`]).
    network: Mutex<Arc<SharedNetwork>>,
    /// Holds of the stop ([`Scope::hold_stop`]): [`Scope::stop`] returns
    /// once none is left.
    holds: Holds,
    /// What the scope's owner records beside (the runtime: its refused
    /// launches).
    pub(crate) extra: X,
}

/// The scope's spills. Once `closed` (its completion took the list),
/// nothing more is listed.
#[derive(Debug, Default)]
struct Spills {
    closed: bool,
    list: Vec<Locator>,
}

/// The count of the stop's holds, watched by the stop.
#[derive(Debug)]
struct Holds(Arc<watch::Sender<usize>>);

impl Default for Holds {
    fn default() -> Self {
        Holds(Arc::new(watch::channel(0).0))
    }
}

/// A hold of a request's stop: until it is dropped, the stop of the
/// request's processes (its `CancelProcesses`) does not finish, so its
/// cleanup and completion wait too. Taken with
/// [`Executor::hold_stop`](crate::runtime::Executor::hold_stop).
#[derive(Debug)]
#[must_use = "the hold is released when dropped"]
pub struct StopHold(Arc<watch::Sender<usize>>);

impl Drop for StopHold {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n -= 1);
    }
}

/// Why [`Scope::launch`] started nothing.
#[derive(Debug)]
pub(crate) enum ScopeLaunchError {
    /// The request's stop began: nothing more is launched for it.
    Closed,
    /// The job or the launcher refused.
    Launch(LaunchError),
    /// A session launch, and the request already runs `limit` sessions.
    SessionsFull {
        /// The request's bound.
        limit: usize,
    },
}

impl<X: Default> Scope<X> {
    /// A scope whose job is already open: the job's barrier is the scope's.
    ///
    /// # Errors
    ///
    /// [`WorkspaceError::RequestClosed`] once the job's cleanup started;
    /// [`WorkspaceError::BarrierTaken`] if the job holds another kind of
    /// barrier.
    pub(crate) fn with_job(job: Job) -> Result<Self, WorkspaceError> {
        let barrier = job.barrier_or_insert(|| Arc::new(RequestBarrier::default()))?;
        Ok(Scope {
            job: Mutex::new(Some(job)),
            barrier,
            ..Scope::default()
        })
    }
}

impl<X> Scope<X> {
    /// Runs the request's isolated launches with the network off in
    /// `network` (shared with whoever else holds it: an MCP session's
    /// calls) instead of a namespace of the request's own. For launches
    /// after this call.
    #[cfg_attr(
        not(feature = "mcp"),
        allow(dead_code, reason = "only the MCP server shares one")
    )]
    pub(crate) fn share_network(&self, network: Arc<SharedNetwork>) {
        *lock(&self.network) = network;
    }

    /// The request's job, once opened.
    pub(crate) fn job(&self) -> Option<Job> {
        lock(&self.job).clone()
    }

    /// The job, opened by `open` on the first call only (under the
    /// scope's job lock: two callers never open it twice), with the
    /// scope's barrier put on it: the processes launched before it opened
    /// are stopped by its cleanup too.
    ///
    /// # Errors
    ///
    /// `open`'s, or [`WorkspaceError::RequestClosed`] when the job's
    /// cleanup started before the barrier was put on it (nothing is filed
    /// then).
    pub(crate) fn open_job<E: From<WorkspaceError>>(
        &self,
        open: impl FnOnce() -> Result<Job, E>,
    ) -> Result<Job, E> {
        let mut slot = lock(&self.job);
        if let Some(job) = slot.clone() {
            return Ok(job);
        }
        let job = open()?;
        let barrier = job.barrier_or_insert(|| Arc::clone(&self.barrier))?;
        if !Arc::ptr_eq(&barrier, &self.barrier) {
            // A job fresh from `open` holds no barrier but the scope's.
            return Err(WorkspaceError::BarrierTaken {
                request: job.id().clone(),
            }
            .into());
        }
        *slot = Some(job.clone());
        Ok(job)
    }

    /// Launches `invocation` as one of the request's processes: in its job
    /// once opened (the job's cgroup, the list its cleanup stops), else
    /// through the plain launcher; either way in the scope's list, under
    /// the lock [`Scope::stop`] takes. Refused once `closed()` says so or
    /// the stop began.
    pub(crate) fn launch(
        &self,
        invocation: Invocation,
        options: LaunchOptions,
        closed: impl FnOnce() -> bool,
    ) -> Result<Running, ScopeLaunchError> {
        self.launch_bounded(invocation, options, closed, usize::MAX)
    }

    /// [`Scope::launch`]; a session launch (`options.session`) is refused
    /// while `max_sessions` of the scope's sessions run, counted under the
    /// same lock, so two starts racing cannot both pass the bound.
    pub(crate) fn launch_bounded(
        &self,
        invocation: Invocation,
        mut options: LaunchOptions,
        closed: impl FnOnce() -> bool,
        max_sessions: usize,
    ) -> Result<Running, ScopeLaunchError> {
        options.network = Some(Arc::clone(&lock(&self.network)));
        // A launch racing the job's open may start outside the job (no
        // cgroup): it is listed in the same barrier all the same, which the
        // job's cleanup stops.
        let job = self.job();
        self.barrier
            .launch(job.as_ref(), invocation, options, closed, max_sessions)
    }

    /// Stops the request's processes: no launch is accepted from now on,
    /// each process is cancelled (`TERM`, its grace or `grace` if shorter,
    /// `KILL` of its group or cgroup), and this returns once every one
    /// settled and every hold of the stop ([`Scope::hold_stop`]) was
    /// released. Returns how many had not settled when the stop began.
    pub(crate) async fn stop(&self, grace: Option<std::time::Duration>) -> u32 {
        let active = self.barrier.stop_processes(grace).await;
        // The sender lives in `self`: the wait ends only when the count does.
        let _ = self.holds.0.subscribe().wait_for(|n| *n == 0).await;
        active
    }

    /// Keeps [`Scope::stop`] from returning until the hold is dropped:
    /// for an executor that files what a process left (its output, as
    /// spills) once it settled, so that the request's cleanup and
    /// completion, which follow the stop, come after it. A hold taken once
    /// the stop returned holds nothing. The stop is bounded by its caller
    /// (the coordinator's cancel deadline), not by the hold.
    pub(crate) fn hold_stop(&self) -> StopHold {
        self.holds.0.send_modify(|n| *n += 1);
        StopHold(Arc::clone(&self.holds.0))
    }

    /// Every process launched for the request, in launch order.
    pub(crate) fn processes(&self) -> Vec<Running> {
        self.barrier.processes()
    }

    /// Kills everything left in the request's cgroup and waits, at most
    /// `bound` (at least a second), until it is empty: whether it was seen
    /// empty (`true` too without a cgroup).
    pub(crate) async fn kill_cgroup(&self, bound: std::time::Duration) -> bool {
        self.barrier.kill_cgroup(bound).await
    }

    /// Lists `locator` among the request's spills; `false` (not listed)
    /// once [`Scope::take_spills`] closed the list.
    pub(crate) fn add_spill(&self, locator: Locator) -> bool {
        let mut spills = lock(&self.spills);
        if spills.closed {
            return false;
        }
        spills.list.push(locator);
        true
    }

    /// Whether the spill list is closed.
    pub(crate) fn spills_closed(&self) -> bool {
        lock(&self.spills).closed
    }

    /// The request's spills, in order.
    pub(crate) fn spills(&self) -> Vec<Locator> {
        lock(&self.spills).list.clone()
    }

    /// Closes the spill list and returns it: for the request's completion.
    pub(crate) fn take_spills(&self) -> Vec<Locator> {
        let mut spills = lock(&self.spills);
        spills.closed = true;
        spills.list.clone()
    }

    /// Files the detail of the request's cleanup.
    pub(crate) fn set_cleanup(&self, result: CleanupResult) {
        *lock(&self.cleanup) = Some(result);
    }

    /// The detail of the request's cleanup, once filed.
    pub(crate) fn cleanup(&self) -> Option<CleanupResult> {
        lock(&self.cleanup).clone()
    }
}

/// The table `RequestId → Scope`: one entry per request that runs.
#[derive(Debug)]
pub(crate) struct Scopes<X = ()> {
    table: Mutex<HashMap<RequestId, Arc<Scope<X>>>>,
}

impl<X> Default for Scopes<X> {
    fn default() -> Self {
        Scopes {
            table: Mutex::new(HashMap::new()),
        }
    }
}

impl<X> Scopes<X> {
    /// Files `scope` for `id`; refused (`None`) while `id` holds one.
    pub(crate) fn insert(&self, id: &RequestId, scope: Scope<X>) -> Option<Arc<Scope<X>>> {
        let mut table = lock(&self.table);
        if table.contains_key(id) {
            return None;
        }
        let scope = Arc::new(scope);
        table.insert(id.clone(), Arc::clone(&scope));
        Some(scope)
    }

    /// `id`'s scope, while it runs.
    pub(crate) fn get(&self, id: &RequestId) -> Option<Arc<Scope<X>>> {
        lock(&self.table).get(id).cloned()
    }

    /// Forgets `id`'s scope and returns it.
    pub(crate) fn remove(&self, id: &RequestId) -> Option<Arc<Scope<X>>> {
        lock(&self.table).remove(id)
    }

    /// The ids of every scope filed.
    pub(crate) fn ids(&self) -> Vec<RequestId> {
        lock(&self.table).keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::InvocationSpec;

    fn sleeper(secs: &str) -> Invocation {
        Invocation::validate(InvocationSpec::new("sleep").with_args([secs])).unwrap()
    }

    /// A launch and a stop take the scope's one lock: what launched before
    /// the stop is stopped by it, and nothing launches after (before, the
    /// wire node's cancel took a copy of the list and a launch admitted
    /// just before it joined the list unseen, left to the cleanup).
    #[tokio::test]
    async fn a_stop_stops_every_launch_before_it_and_refuses_every_launch_after() {
        let dir = tempfile::tempdir().unwrap();
        let options = LaunchOptions::new(dir.path());
        let scope: Scope = Scope::default();
        let first = scope
            .launch(sleeper("30"), options.clone(), || false)
            .unwrap();
        let second = scope
            .launch(sleeper("30"), options.clone(), || false)
            .unwrap();
        assert!(matches!(
            scope.launch(sleeper("30"), options.clone(), || true),
            Err(ScopeLaunchError::Closed)
        ));
        let stopped = tokio::time::timeout(std::time::Duration::from_secs(20), scope.stop(None))
            .await
            .expect("the stop did not return");
        assert_eq!(stopped, 2);
        for p in [&first, &second] {
            let ev = p.try_settled().expect("settled by the stop");
            assert_eq!(
                ev.status,
                crate::machine::process::ProcessStatus::Cancelled,
                "{ev:?}"
            );
        }
        assert!(matches!(
            scope.launch(sleeper("0"), options, || false),
            Err(ScopeLaunchError::Closed)
        ));
        assert_eq!(scope.processes().len(), 2);
        // A second stop finds nothing running.
        assert_eq!(scope.stop(None).await, 0);
    }

    /// The stop returns only once its processes settled and every hold was
    /// released.
    #[tokio::test]
    async fn a_stop_waits_for_every_hold_after_its_processes_settled() {
        let dir = tempfile::tempdir().unwrap();
        let scope: Arc<Scope> = Arc::new(Scope::default());
        let running = scope
            .launch(sleeper("30"), LaunchOptions::new(dir.path()), || false)
            .unwrap();
        let first = scope.hold_stop();
        let second = scope.hold_stop();
        let stop = tokio::spawn({
            let scope = Arc::clone(&scope);
            async move { scope.stop(None).await }
        });
        // The process settles (cancelled); the stop still waits.
        let ev = tokio::time::timeout(std::time::Duration::from_secs(20), running.settled())
            .await
            .expect("the stop did not cancel the process");
        assert_eq!(ev.status, crate::machine::process::ProcessStatus::Cancelled);
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        assert!(!stop.is_finished(), "the stop returned with two holds");
        drop(first);
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        assert!(!stop.is_finished(), "the stop returned with one hold");
        drop(second);
        let stopped = tokio::time::timeout(std::time::Duration::from_secs(5), stop)
            .await
            .expect("the stop did not return once every hold was released")
            .unwrap();
        assert_eq!(stopped, 1);
    }

    #[test]
    fn spills_are_listed_until_the_list_is_taken() {
        let scope: Scope = Scope::default();
        let a: Locator = "cspill:1:00cc505504b0c996:s:7a7f0000000000000000000000000001"
            .parse()
            .unwrap();
        let b: Locator = "cspill:1:00cc505504b0c996:s:7a7f0000000000000000000000000002"
            .parse()
            .unwrap();
        assert!(scope.add_spill(a.clone()));
        assert!(!scope.spills_closed());
        assert_eq!(scope.take_spills(), std::slice::from_ref(&a));
        assert!(scope.spills_closed());
        assert!(!scope.add_spill(b));
        assert_eq!(scope.spills(), [a]);
    }

    #[test]
    fn a_table_files_one_scope_per_id() {
        let scopes: Scopes = Scopes::default();
        let id = RequestId::new("req-1").unwrap();
        assert!(scopes.insert(&id, Scope::default()).is_some());
        assert!(scopes.insert(&id, Scope::default()).is_none());
        assert_eq!(scopes.ids(), std::slice::from_ref(&id));
        assert!(scopes.remove(&id).is_some());
        assert!(scopes.get(&id).is_none());
        assert!(scopes.insert(&id, Scope::default()).is_some());
    }

    /// A scope's isolated launches with the network off share one network
    /// namespace: its own, or the one [`Scope::share_network`] gave it (an
    /// MCP session's, shared by the scopes of its calls); a scope given
    /// none has another. The launches need Landlock (the confinement that
    /// turns the network off); as root the namespaces are the host's user
    /// namespace's, otherwise each of a user namespace of its own.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn scopes_given_one_network_share_its_namespace_and_no_other_scope_does() {
        let shared = Arc::new(SharedNetwork::default());
        let (a, b, other): (Scope, Scope, Scope) = Default::default();
        a.share_network(Arc::clone(&shared));
        b.share_network(Arc::clone(&shared));
        for scope in [&a, &b] {
            assert!(Arc::ptr_eq(&lock(&scope.network), &shared));
        }
        assert!(!Arc::ptr_eq(&lock(&other.network), &shared));
        if crate::confine::landlock_abi() == 0 {
            skipped!("needs Landlock");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let options = LaunchOptions::new(dir.path());
        let net = net_of(&options);
        let (in_a, in_a_again) = (net(&a).await, net(&a).await);
        let (in_other, in_other_again) = (net(&other).await, net(&other).await);
        assert_eq!(in_a, in_a_again, "one scope, one network");
        assert_eq!(in_other, in_other_again, "one scope, one network");
        let in_b = net(&b).await;
        let host = std::fs::read_link("/proc/self/ns/net").unwrap();
        assert!(in_a.starts_with("net:[") && in_a != host.to_str().unwrap());
        assert_eq!(in_a, in_b, "one network given to both scopes");
        assert_ne!(in_a, in_other, "another scope's network is its own");
    }

    /// `readlink /proc/self/ns/net` of an isolated launch of a scope, with
    /// the network off.
    #[cfg(target_os = "linux")]
    fn net_of(
        options: &LaunchOptions,
    ) -> impl Fn(&Scope) -> std::pin::Pin<Box<dyn std::future::Future<Output = String> + Send>> + '_
    {
        move |scope: &Scope| {
            let inv = Invocation::validate(
                InvocationSpec::new("/bin/sh")
                    .with_args(["-c", "readlink /proc/self/ns/net"])
                    .with_confinement(crate::confine::Confinement::workspace_write()),
            )
            .unwrap();
            let running = scope.launch(inv, options.clone(), || false).unwrap();
            Box::pin(async move {
                let ev = running.settled().await;
                assert_eq!(ev.exit_code, Some(0), "{ev:?}");
                ev.stdout.text.trim().to_owned()
            })
        }
    }

    /// A request's network namespace owned by a user namespace of the
    /// request's (what an unprivileged process makes; made here whoever
    /// runs the test) is entered by each launch through the pre-init, its
    /// loopback up; one whose user namespace cannot be entered (here: not
    /// a namespace at all) leaves each launch a namespace of its own, never
    /// the host's.
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    #[tokio::test]
    async fn a_network_owned_by_a_user_namespace_of_the_requests_is_entered_by_each_launch() {
        use std::os::fd::AsFd;
        if crate::confine::landlock_abi() == 0 {
            skipped!("needs Landlock");
            return;
        }
        let ns = crate::process::spawn::user_network_namespace().unwrap();
        let inode = rustix::fs::fstat(ns.net.as_fd()).unwrap().st_ino;
        let (a, b, broken): (Scope, Scope, Scope) = Default::default();
        let shared = Arc::new(SharedNetwork::with(Some(ns)));
        a.share_network(Arc::clone(&shared));
        b.share_network(Arc::clone(&shared));
        let host_net = rustix::fs::open(
            "/proc/self/ns/net",
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .unwrap();
        let not_a_namespace = rustix::fs::open(
            "/dev/null",
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .unwrap();
        broken.share_network(Arc::new(SharedNetwork::with(Some(
            crate::confine::build::SharedNet::new(host_net, Some(not_a_namespace)),
        ))));
        let dir = tempfile::tempdir().unwrap();
        let options = LaunchOptions::new(dir.path());
        let net = net_of(&options);
        let want = format!("net:[{inode}]");
        assert_eq!(net(&a).await, want);
        assert_eq!(net(&b).await, want);
        assert_eq!(net(&a).await, want);
        // Its loopback is up: a server and a client in one launch.
        let inv = Invocation::validate(
            InvocationSpec::new("/usr/bin/python3")
                .with_args([
                    "-c",
                    "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n\
                     socket.create_connection(s.getsockname(), timeout=2); print('LOOPBACK')",
                ])
                .with_confinement(crate::confine::Confinement::workspace_write()),
        )
        .unwrap();
        let ev = a
            .launch(inv, options.clone(), || false)
            .unwrap()
            .settled()
            .await;
        assert_eq!(ev.stdout.text.trim(), "LOOPBACK", "{ev:?}");
        let host = std::fs::read_link("/proc/self/ns/net").unwrap();
        let (own, own_again) = (net(&broken).await, net(&broken).await);
        assert!(
            own.starts_with("net:[") && own != host.to_str().unwrap(),
            "{own}"
        );
        assert_ne!(own, want);
        assert_ne!(own, own_again, "each launch its own");
    }
}
