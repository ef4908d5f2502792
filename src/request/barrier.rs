//! A request's barrier: its processes and the cgroup that holds them, what
//! the workspace's cleanup stops before it removes any file.
//!
//! The workspace knows files only ([`crate::workspace::Barrier`]). This is
//! the request layer's barrier: one per request ([`RequestBarrier`]), the list
//! of every process launched for it and, where cgroups can be made, the
//! request's cgroup (the parent of its processes' cgroups, made at the
//! first launch that may use the cgroup tier and journalled before
//! anything starts in it). A launch and the stop take the same lock, so a
//! launch either lands in the list the stop cancels or is refused.
//!
//! [`CgroupRevival`] is the workspace's side of it: it revives the request
//! cgroup a dead run journalled (the reclaim kills what is left in it
//! before any file goes), keeps emptied request cgroups for the next
//! requests while the workspace is open, and removes the bases of dead
//! runs after a reclaim.

use std::sync::Arc;
use std::time::Duration;

use super::LaunchError;
use super::scope::ScopeLaunchError;
use crate::process::{Invocation, LaunchOptions, Running};
use crate::sync::shim::{Mutex, lock};
use crate::workspace::{Barrier, CleanupCode, Job, Revival, StopFuture, Stopped, WorkspaceError};

/// A request's processes and its cgroup. See the [module](self).
#[derive(Debug, Default)]
pub(crate) struct RequestBarrier {
    procs: Mutex<Procs>,
    /// Locked after `procs` when both are held (and before the job's
    /// journal).
    #[cfg(target_os = "linux")]
    cgroup: Mutex<CgroupSlot>,
}

/// The request's processes. Once `closed` (its stop began), nothing more
/// is launched: a launch takes the same lock.
#[derive(Debug, Default)]
struct Procs {
    closed: bool,
    /// The network namespace the request's launches shared, whose
    /// prepared sandbox (if any) goes when the request stops, before its
    /// cgroup is looked at (`process::spawn`, *A prepared sandbox*).
    network: Option<Arc<crate::process::SharedNetwork>>,
    list: Vec<Running>,
}

impl RequestBarrier {
    /// Launches `invocation` as one of the request's processes, listed for
    /// its stop, under the lock the stop takes: in `job` (its directories
    /// checked, the request's cgroup as the parent of the process's own)
    /// when there is one, else through the plain launcher. Refused once
    /// `closed()` says so or the stop began; a session launch
    /// (`options.session` with stdin) is refused while `max_sessions` of
    /// the request's sessions run.
    pub(crate) fn launch(
        &self,
        job: Option<&Job>,
        invocation: Invocation,
        #[cfg_attr(not(target_os = "linux"), allow(unused_mut))] mut options: LaunchOptions,
        closed: impl FnOnce() -> bool,
        max_sessions: usize,
    ) -> Result<Running, ScopeLaunchError> {
        let mut procs = lock(&self.procs);
        if procs.closed || closed() {
            return Err(ScopeLaunchError::Closed);
        }
        if options.session.is_some_and(|s| s.stdin) {
            let live = procs
                .list
                .iter()
                .filter(|p| p.is_session() && p.try_settled().is_none())
                .count();
            if live >= max_sessions {
                return Err(ScopeLaunchError::SessionsFull {
                    limit: max_sessions,
                });
            }
        }
        if let Some(job) = job {
            let cwd = invocation.cwd().map(|c| c.as_str().to_owned());
            job.check_launch(&options.workspace, cwd.as_deref())
                .map_err(|e| ScopeLaunchError::Launch(LaunchError::Workspace(e)))?;
            #[cfg(target_os = "linux")]
            {
                options.cgroup_parent = self
                    .request_cgroup(job, options.containment, options.network.as_deref())
                    .map_err(|e| ScopeLaunchError::Launch(LaunchError::Workspace(e)))?;
            }
        }
        if procs.network.is_none() {
            procs.network.clone_from(&options.network);
        }
        let running = crate::process::launch(invocation, &options)
            .map_err(|e| ScopeLaunchError::Launch(LaunchError::Process(e)))?;
        procs.list.push(running.clone());
        Ok(running)
    }

    /// Every process launched for the request, in launch order.
    pub(crate) fn processes(&self) -> Vec<Running> {
        lock(&self.procs).list.clone()
    }

    /// Closes the list (nothing more is launched), cancels every process
    /// (`TERM`, its grace or `grace` if shorter, `KILL` of its group or
    /// cgroup) and returns the list with how many had not settled when the
    /// stop began.
    fn close_and_cancel(&self, grace: Option<Duration>) -> (Vec<Running>, u32) {
        let list = {
            let mut procs = lock(&self.procs);
            procs.closed = true;
            // Nothing is launched any more: a sandbox prepared for a next
            // launch is killed now, not found in the request's cgroup.
            if let Some(network) = procs.network.take() {
                network.discard_spare(self.cgroup_id());
            }
            procs.list.clone()
        };
        let mut active = 0;
        for p in &list {
            if p.try_settled().is_none() {
                active += 1;
            }
            match grace {
                Some(grace) => p.cancel_within(grace),
                None => p.cancel(),
            }
        }
        (list, active)
    }

    /// Stops the request's processes and returns once every one settled
    /// (its caller bounds it). Returns how many had not settled when the
    /// stop began.
    pub(crate) async fn stop_processes(&self, grace: Option<Duration>) -> u32 {
        let (list, active) = self.close_and_cancel(grace);
        for p in &list {
            let _ = p.settled().await;
        }
        active
    }

    /// The cleanup's stop: the processes, at most `bound`; then everything
    /// left in the request's cgroup (escapees of settled processes,
    /// processes past the bound) is killed and seen gone, else nothing may
    /// be removed.
    async fn stop_within(&self, bound: Duration) -> Stopped {
        let (list, active) = self.close_and_cancel(None);
        let mut waiting = tokio::task::JoinSet::new();
        for p in list {
            waiting.spawn(async move {
                let _ = p.settled().await;
            });
        }
        let all = async { while waiting.join_next().await.is_some() {} };
        let unsettled = match tokio::time::timeout(bound, all).await {
            Ok(()) => 0,
            Err(_) => waiting.len() as u32,
        };
        waiting.abort_all();
        let stopped = Stopped::new(active, unsettled);
        #[cfg(target_os = "linux")]
        if let Err(code) = self.empty_cgroup(bound).await {
            tracing::warn!("request cgroup still populated; files kept");
            return stopped.refused(code);
        }
        stopped
    }
}

impl Barrier for RequestBarrier {
    fn stop(&self, bound: Duration) -> StopFuture<'_> {
        Box::pin(self.stop_within(bound))
    }

    fn finished(&self, retired: bool) {
        #[cfg(target_os = "linux")]
        {
            let mut slot = lock(&self.cgroup);
            if let CgroupSlot::Emptied(_) = &*slot {
                let CgroupSlot::Emptied(rc) = std::mem::replace(&mut *slot, CgroupSlot::Gone)
                else {
                    unreachable!("matched above")
                };
                drop(slot);
                if retired {
                    rc.release();
                }
                // Otherwise removed by its drop, while the journal still
                // names it.
            }
        }
        #[cfg(not(target_os = "linux"))]
        let _ = retired;
    }
}

/// The workspace's side of the request barriers. See the [module](self).
#[derive(Debug)]
pub(crate) struct CgroupRevival {
    /// Keeps emptied request cgroups for the next requests while the
    /// workspace is open, even between requests; dropped when the
    /// workspace closes, so that the spares (and the base, if nothing else
    /// uses it) go then, not when the last handle happens to drop.
    #[cfg(target_os = "linux")]
    keeper: Mutex<Option<crate::contain::SpareKeeper>>,
}

impl CgroupRevival {
    pub(crate) fn new() -> Self {
        CgroupRevival {
            #[cfg(target_os = "linux")]
            keeper: Mutex::new(Some(crate::contain::SpareKeeper::new())),
        }
    }
}

impl Revival for CgroupRevival {
    fn revive(&self, record: &[u8]) -> Result<Option<Arc<dyn Barrier>>, CleanupCode> {
        let Some((base, name, id)) = decode_record(record) else {
            tracing::warn!("a journalled barrier is not a request cgroup record; it is left alone");
            return Err(CleanupCode::CgroupNotOwned);
        };
        #[cfg(target_os = "linux")]
        {
            use crate::contain::ReopenError;
            match crate::contain::reopen_request_cgroup(base, name, id) {
                Ok(Some(cg)) => Ok(Some(Arc::new(RequestBarrier {
                    procs: Mutex::default(),
                    cgroup: Mutex::new(CgroupSlot::Ready(RequestCgroup::new(cg))),
                }))),
                Ok(None) => Ok(None),
                Err(ReopenError::Untrusted(why)) => {
                    tracing::warn!(
                        reason = why.code(),
                        "a journalled cgroup is not custodian's; it is left alone"
                    );
                    Err(CleanupCode::CgroupNotOwned)
                }
                Err(_) => Err(CleanupCode::ProcessBoundExceeded),
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (base, name, id);
            Ok(None)
        }
    }

    fn reclaimed(&self) {
        // The reclaim's cleanups removed the request cgroups of the dead
        // runs, so their bases may now be empty.
        #[cfg(target_os = "linux")]
        match crate::contain::remove_dead_bases() {
            Ok(d) if d.removed + d.kept > 0 => {
                tracing::info!(
                    removed = d.removed,
                    kept = d.kept,
                    "base cgroups of dead custodian processes"
                );
            }
            Ok(_) => {}
            Err(why) => {
                tracing::debug!(code = %why.code(), "no cgroup tier: no dead base cgroups to remove")
            }
        }
    }

    fn closed(&self) {
        #[cfg(target_os = "linux")]
        drop(lock(&self.keeper).take());
    }
}

/// The journal record of a request cgroup: its base's name, its name (each
/// a little-endian `u16` length, then the bytes), then its id (`u64`
/// little-endian) — the bytes of the workspace journal's `Cgroup` record
/// of earlier versions.
fn encode_record(base: &[u8], name: &[u8], id: Option<u64>) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + base.len() + name.len() + 8);
    for b in [base, name] {
        let len = u16::try_from(b.len()).unwrap_or(u16::MAX);
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&b[..usize::from(len)]);
    }
    if let Some(id) = id {
        out.extend_from_slice(&id.to_le_bytes());
    }
    out
}

/// [`encode_record`]'s inverse: `None` unless the bytes are exactly one
/// record (an id is absent in records of versions that wrote none).
fn decode_record(record: &[u8]) -> Option<(&[u8], &[u8], Option<u64>)> {
    fn take<'a>(rest: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        let (head, tail) = rest.split_at_checked(n)?;
        *rest = tail;
        Some(head)
    }
    fn field<'a>(rest: &mut &'a [u8]) -> Option<&'a [u8]> {
        let len = take(rest, 2)?;
        take(rest, usize::from(u16::from_le_bytes([len[0], len[1]])))
    }
    let mut rest = record;
    let base = field(&mut rest)?;
    let name = field(&mut rest)?;
    let id = match rest.len() {
        0 => None,
        8 => Some(u64::from_le_bytes(rest.try_into().ok()?)),
        _ => return None,
    };
    Some((base, name, id))
}

/// The request's cgroup: the parent of its processes' cgroups, made at the
/// first launch that may use the cgroup tier.
#[cfg(target_os = "linux")]
#[derive(Debug, Default)]
enum CgroupSlot {
    #[default]
    Untried,
    Ready(RequestCgroup),
    /// Seen empty by the cleanup's stop (launches closed): released when
    /// the request's journal is retired (kept for another request),
    /// removed otherwise ([`Barrier::finished`]).
    Emptied(RequestCgroup),
    /// None could be made (the processes fall back on their own), or the
    /// stop took it.
    Gone,
}

/// A request's cgroup; dropped (the request dropped without a cleanup, or
/// a cleanup that could not remove it), it is removed if nothing is left in
/// it, best effort: a populated one is logged and kept.
#[cfg(target_os = "linux")]
#[derive(Debug)]
struct RequestCgroup {
    /// `None` once released.
    cg: Option<Arc<crate::contain::Cgroup>>,
    /// Removed by the cleanup already: nothing left to do on drop.
    removed: bool,
}

#[cfg(target_os = "linux")]
impl RequestCgroup {
    fn new(cg: crate::contain::Cgroup) -> Self {
        RequestCgroup::shared(Arc::new(cg))
    }

    /// A request cgroup made for (or reserved for) this request.
    fn shared(cg: Arc<crate::contain::Cgroup>) -> Self {
        RequestCgroup {
            cg: Some(cg),
            removed: false,
        }
    }

    fn cg(&self) -> Arc<crate::contain::Cgroup> {
        self.cg
            .clone()
            .expect("a request cgroup is only released by its last use")
    }

    /// Ends the cgroup's use once its request's journal no longer names
    /// it: kept for another request if it is still empty and nothing else
    /// holds it ([`crate::contain::Cgroup::release`]), else removed (by
    /// `Drop`).
    fn release(mut self) {
        let Some(cg) = self.cg.take() else {
            return;
        };
        match Arc::try_unwrap(cg) {
            Ok(cg) => {
                self.removed = true;
                if let Err((_, e)) = cg.release() {
                    tracing::warn!(error = %e, code = e.code(), "request cgroup left behind");
                }
            }
            Err(shared) => self.cg = Some(shared),
        }
    }
}

#[cfg(target_os = "linux")]
impl Drop for RequestCgroup {
    fn drop(&mut self) {
        if self.removed {
            return;
        }
        let Some(cg) = self.cg.take() else {
            return;
        };
        if let Err(e) = cg.remove_tree() {
            tracing::warn!(error = %e, code = e.code(), "request cgroup left behind");
        }
    }
}

#[cfg(target_os = "linux")]
impl RequestBarrier {
    /// The id of this request's cgroup, if it has one.
    fn cgroup_id(&self) -> Option<u64> {
        match &*lock(&self.cgroup) {
            CgroupSlot::Ready(rc) | CgroupSlot::Emptied(rc) => rc.cg.as_ref()?.id().ok(),
            _ => None,
        }
    }

    /// This request's cgroup (made on first use), to be the parent of a
    /// process's cgroup when `containment` may use the cgroup tier. Where
    /// none can be made, `None`, and the launcher decides (`auto` falls
    /// back, `cgroup` fails). The first is the one `network` reserved for
    /// its session's next request, if it holds one (a sandbox may wait in
    /// it for this launch). A new request cgroup is journalled in `job`
    /// before anything is launched into it, so that a node started after
    /// this one died can kill what is left in it.
    ///
    /// # Errors
    ///
    /// [`WorkspaceError`] if the cgroup cannot be journalled (it is then
    /// removed, and nothing is launched).
    fn request_cgroup(
        &self,
        job: &Job,
        containment: crate::contain::Containment,
        network: Option<&crate::process::SharedNetwork>,
    ) -> Result<Option<Arc<crate::contain::Cgroup>>, WorkspaceError> {
        use crate::contain::Containment;
        if !matches!(containment, Containment::Auto | Containment::Cgroup) {
            return Ok(None);
        }
        let mut slot = lock(&self.cgroup);
        if matches!(*slot, CgroupSlot::Untried) {
            let made = match network.and_then(crate::process::SharedNetwork::take_reserved) {
                Some(reserved) => Ok(reserved),
                None => crate::contain::request_cgroup().map(Arc::new),
            };
            *slot = match made {
                Ok(cg) => {
                    let record = encode_record(
                        crate::contain::base_cgroup_name().as_str().as_bytes(),
                        cg.name().as_bytes(),
                        cg.id().ok(),
                    );
                    let cg = RequestCgroup::shared(cg);
                    if let Err(e) = job.journal_barrier(&record) {
                        *slot = CgroupSlot::Gone;
                        drop(cg);
                        return Err(e);
                    }
                    CgroupSlot::Ready(cg)
                }
                Err(why) => {
                    tracing::debug!(code = %why.code(), "no request cgroup");
                    CgroupSlot::Gone
                }
            };
        }
        Ok(match &*slot {
            CgroupSlot::Ready(rc) => Some(rc.cg()),
            _ => None,
        })
    }

    /// Kills everything in this request's cgroup (`cgroup.kill`) and waits,
    /// at most `bound` (at least a second), until it is empty. Returns
    /// whether it was seen empty (`true` too when the request has no
    /// cgroup). Later launches of the request still get a cgroup of their
    /// own; the request cgroup is removed by the cleanup.
    pub(crate) async fn kill_cgroup(&self, bound: Duration) -> bool {
        let cg = match &*lock(&self.cgroup) {
            CgroupSlot::Ready(rc) => rc.cg(),
            _ => return true,
        };
        if let Err(e) = cg.kill() {
            tracing::warn!(error = %e, "cgroup.kill on the request cgroup failed");
        }
        let deadline = tokio::time::Instant::now() + bound.max(Duration::from_secs(1));
        cg.wait_unpopulated(deadline).await.unwrap_or(false)
    }

    /// `cgroup.kill` on the request's cgroup, then waits (a watch on
    /// `cgroup.events`, at most `bound`, at least a second) until it is
    /// unpopulated, then removes it and whatever process cgroups are left
    /// beneath. A cgroup already seen unpopulated (every process settled
    /// and nothing outlived it: the usual case) holds nothing to kill, and
    /// nothing can enter it any more (the request's launches are closed),
    /// so it is kept `Emptied` for [`Barrier::finished`]. Leaves the slot
    /// `Gone` otherwise, so no later launch uses it.
    ///
    /// # Errors
    ///
    /// [`CleanupCode::ProcessBoundExceeded`] if the cgroup is still
    /// populated (or cannot be read) at the deadline: the caller must keep
    /// every file.
    async fn empty_cgroup(&self, bound: Duration) -> Result<(), CleanupCode> {
        let taken = std::mem::replace(&mut *lock(&self.cgroup), CgroupSlot::Gone);
        let CgroupSlot::Ready(mut rc) = taken else {
            return Ok(());
        };
        let cg = rc.cg();
        if matches!(cg.populated(), Ok(false)) {
            drop(cg);
            *lock(&self.cgroup) = CgroupSlot::Emptied(rc);
            return Ok(());
        }
        if let Err(e) = cg.kill() {
            tracing::warn!(error = %e, "cgroup.kill on the request cgroup failed");
        }
        let deadline = tokio::time::Instant::now() + bound.max(Duration::from_secs(1));
        match cg.wait_unpopulated(deadline).await {
            Ok(true) => {}
            // Keep the handle's directory for the operator; the files too.
            Ok(false) | Err(_) => return Err(CleanupCode::ProcessBoundExceeded),
        }
        match cg.remove_tree() {
            Ok(()) => rc.removed = true,
            // Empty but not removable: logged, the files are safe to remove.
            Err(e) => {
                tracing::warn!(error = %e, code = e.code(), "removing the request cgroup failed")
            }
        }
        Ok(())
    }
}

#[cfg(not(target_os = "linux"))]
impl RequestBarrier {
    /// No request cgroup off Linux: nothing to kill.
    pub(crate) async fn kill_cgroup(&self, _bound: Duration) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cgroup_record_round_trips_and_nothing_else_decodes() {
        let rec = encode_record(b"custodian-4242", b"r7", Some(0x1234));
        assert_eq!(
            rec,
            b"\x0e\x00custodian-4242\x02\x00r7\x34\x12\0\0\0\0\0\0".to_vec(),
            "the bytes of the journal's earlier `Cgroup` record"
        );
        assert_eq!(
            decode_record(&rec),
            Some((&b"custodian-4242"[..], &b"r7"[..], Some(0x1234)))
        );
        let old = encode_record(b"custodian-9", b"r1", None);
        assert_eq!(
            decode_record(&old),
            Some((&b"custodian-9"[..], &b"r1"[..], None))
        );
        for bad in [
            &rec[..rec.len() - 1],
            &rec[..3],
            &[][..],
            &[0xff, 0xff, 1][..],
        ] {
            assert_eq!(decode_record(bad), None, "{bad:?}");
        }
        let mut long = rec.clone();
        long.push(0);
        assert_eq!(decode_record(&long), None);
    }

    /// A barrier record that is not a request cgroup's is refused before
    /// anything is opened: the reclaim keeps its job.
    #[test]
    fn a_record_that_is_no_cgroup_record_is_not_honoured() {
        let barriers = CgroupRevival::new();
        for bad in [&b"forged"[..], &[][..], &[2, 0, b'r'][..]] {
            assert!(
                matches!(barriers.revive(bad), Err(CleanupCode::CgroupNotOwned)),
                "{bad:?}"
            );
        }
    }
}
