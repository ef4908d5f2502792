//! Confinement overhead: 200 rounds of launch + settle of `/bin/true`
//! through custodian, unconfined vs confined, interleaved in the same run
//! so the machine's drift hits every variant alike.
//!
//! Run: `cargo bench -p custodian --bench process_confine`
//! (`CONFINE_ROUNDS=N` for more rounds on a noisy machine;
//! `CONFINE_ONLY=K` runs variant `K` of the table alone, 0-based, for a
//! profiler: `perf record -g` of one variant; `CONFINE_ONLY=keeper` the
//! last table alone; `CONFINE_ASIDE=0` runs the first table with
//! custodian's background threads on any CPU, the launcher's included). The last
//! column is the p50 of `launch()` alone (spawn latency: plan, build,
//! clone, the child's confinement calls, until `execve` returned).
//!
//! Variants: unconfined (cgroup tier), network off only (seccomp + Landlock
//! TCP), `read-only` with the network on (Landlock filesystem + scopes,
//! private TMPDIR), `read-only` (and network off), `workspace-write` (and
//! network off), the same with a `deny_read` of `$HOME/.ssh` (the read
//! grant is then split into one rule per sibling on the way down from `/`),
//! and `workspace-write` once more with the spare network namespaces
//! turned off (`custodian::__bench::set_netns_spares`): each launch's
//! `clone3` then makes its network namespace, as it does without root;
//! `workspace-write` with the network allow-list (the proxy's listener);
//! `workspace-write` with the sandbox's mount namespace not held past
//! its init's exit (`custodian::__bench::set_hold_mount_ns`): the view is
//! then torn down on the exit the driver waits for; and `workspace-write`
//! in one network namespace shared by all its launches
//! (`custodian::__bench::share_one_network`), as a request's launches are:
//! the namespace is made once and entered by each launch, none is made per
//! launch, not even off its path; from its third launch on, each runs in
//! a sandbox prepared while the one before ran (`process::spawn`, *A
//! prepared sandbox*). The last variant is the same request with
//! prepared sandboxes turned off
//! (`custodian::__bench::set_prepared_sandboxes`): every launch composes
//! its own view.

use std::time::{Duration, Instant};

use custodian::confine::{Confinement, Network};
use custodian::process::{Invocation, InvocationSpec, LaunchOptions};

// `getrusage(RUSAGE_CHILDREN)` for the CPU of the reaped sandboxes.
#[path = "support/cpu.rs"]
#[allow(unsafe_code)]
mod cpu;
use cpu::{cpu_children, cpu_self};

/// Rounds unless `CONFINE_ROUNDS` says otherwise.
const DEFAULT_ROUNDS: usize = 200;

/// One launch + settle: (`launch()` alone, launch through settled).
fn once(
    rt: &tokio::runtime::Runtime,
    opts: &LaunchOptions,
    c: &Confinement,
) -> (Duration, Duration) {
    let inv =
        Invocation::validate(InvocationSpec::new("/bin/true").with_confinement(c.clone())).unwrap();
    let t = Instant::now();
    let (spawn, ev) = rt.block_on(async {
        let running = custodian::process::launch(inv, opts).unwrap();
        let spawn = t.elapsed();
        (spawn, running.settled().await)
    });
    let d = t.elapsed();
    assert_eq!(ev.exit_code, Some(0), "{ev:?}");
    (spawn, d)
}

fn main() {
    if custodian::confine::landlock_abi() == 0 {
        println!("no Landlock on this kernel: nothing to compare");
        return;
    }
    let n: usize = std::env::var("CONFINE_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n >= 20)
        .unwrap_or(DEFAULT_ROUNDS);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // `CONFINE_ASIDE=0`: the first table with custodian's background
    // threads on any CPU, the launcher's included.
    custodian::__bench::set_background_aside(
        std::env::var("CONFINE_ASIDE").map_or(true, |v| v != "0"),
    );
    let ws = std::env::temp_dir();
    let opts = LaunchOptions::new(&ws);
    let mut in_request = opts.clone();
    custodian::__bench::share_one_network(&mut in_request);
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
    let ssh = std::path::Path::new(&home).join(".ssh");
    // (name, confinement, spare network namespaces on, the sandbox's mount
    // namespace held past its init's exit, one network namespace shared by
    // every launch)
    let variants: [(&str, Confinement, bool, bool, bool); 11] = [
        ("unconfined", Confinement::none(), true, true, false),
        (
            "network off",
            Confinement::none().with_network(Network::Off),
            true,
            true,
            false,
        ),
        (
            "read-only, network on",
            Confinement::read_only().with_network(Network::On),
            true,
            true,
            false,
        ),
        ("read-only", Confinement::read_only(), true, true, false),
        (
            "workspace-write",
            Confinement::workspace_write(),
            true,
            true,
            false,
        ),
        (
            "workspace-write + deny $HOME/.ssh",
            Confinement::workspace_write().with_deny_read(ssh),
            true,
            true,
            false,
        ),
        (
            "workspace-write, no spare netns",
            Confinement::workspace_write(),
            false,
            true,
            false,
        ),
        (
            "workspace-write, network allow",
            Confinement::workspace_write().with_allow_host("pypi.org"),
            true,
            true,
            false,
        ),
        (
            "workspace-write, view torn down at exit",
            Confinement::workspace_write(),
            true,
            false,
            false,
        ),
        (
            "workspace-write, the request's network",
            Confinement::workspace_write(),
            true,
            true,
            true,
        ),
        (
            "the same, no prepared sandbox",
            Confinement::workspace_write(),
            true,
            true,
            true,
        ),
    ];
    let mut in_request_cold = opts.clone();
    custodian::__bench::share_one_network(&mut in_request_cold);
    let last = variants.len() - 1;
    let once = |(name, c, spares, hold, shared): &(&str, Confinement, bool, bool, bool)| {
        custodian::__bench::set_netns_spares(*spares);
        custodian::__bench::set_hold_mount_ns(*hold);
        let cold = *name == variants[last].0;
        custodian::__bench::set_prepared_sandboxes(!cold);
        let opts = match (*shared, cold) {
            (false, _) => &opts,
            (true, false) => &in_request,
            (true, true) => &in_request_cold,
        };
        once(&rt, opts, c)
    };
    if std::env::var("CONFINE_ONLY").is_ok_and(|v| v == "keeper") {
        keeper_table(&rt, &opts, n);
        return;
    }
    if let Some(k) = std::env::var("CONFINE_ONLY")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        let v = &variants[k.min(variants.len() - 1)];
        let mut s: Vec<Duration> = (0..n).map(|_| once(v).1).collect();
        s.sort();
        println!(
            "{}: {n} launches, p50 {:.0} us",
            v.0,
            s[n / 2].as_secs_f64() * 1e6
        );
        return;
    }
    let (samples, spawns) = interleaved(&variants, n, once);
    println!(
        "launch + settle of /bin/true, {n} rounds interleaved, Landlock ABI {}",
        custodian::confine::landlock_abi()
    );
    println!(
        "{:<36} {:>10} {:>10} {:>10} {:>10} {:>10} {:>14}",
        "variant", "total ms", "p50 us", "p95 us", "vs none", "p50 ratio", "launch() p50"
    );
    let total = |v: &[Duration]| v.iter().sum::<Duration>().as_secs_f64();
    let base = total(&samples[0]);
    let mut base_p50 = samples[0].clone();
    base_p50.sort();
    let base_p50 = base_p50[n / 2].as_secs_f64();
    for (((name, _, _, _, _), mut s), mut sp) in variants.iter().zip(samples).zip(spawns) {
        s.sort();
        sp.sort();
        println!(
            "{:<36} {:>10.1} {:>10.0} {:>10.0} {:>9.3}x {:>9.3}x {:>11.0} us",
            name,
            total(&s) * 1e3,
            s[n / 2].as_secs_f64() * 1e6,
            s[n * 95 / 100].as_secs_f64() * 1e6,
            total(&s) / base,
            s[n / 2].as_secs_f64() / base_p50,
            sp[n / 2].as_secs_f64() * 1e6,
        );
    }
    keeper_table(&rt, &opts, n);
}

/// Each of `variants` once (a warm-up), then `n` rounds of all, each
/// round starting one further on: per variant, the samples of launch +
/// settle and of `launch()` alone.
fn interleaved<V>(
    variants: &[V],
    n: usize,
    once: impl Fn(&V) -> (Duration, Duration),
) -> (Vec<Vec<Duration>>, Vec<Vec<Duration>>) {
    for v in variants {
        once(v);
    }
    let mut samples = vec![Vec::with_capacity(n); variants.len()];
    let mut spawns = vec![Vec::with_capacity(n); variants.len()];
    for round in 0..n {
        for k in 0..variants.len() {
            let i = (round + k) % variants.len();
            let (spawn, total) = once(&variants[i]);
            spawns[i].push(spawn);
            samples[i].push(total);
        }
    }
    (samples, spawns)
}

/// Launches outside a request by an embedder that launches again and
/// again and so holds a `SpareKeeper`: the unconfined launch's empty cgroup
/// then serves the next, and an isolated launch's next sandbox is prepared
/// while it runs. Unconfined and `workspace-write`, with and without
/// prepared sandboxes, interleaved, `n` rounds; and the unconfined launch
/// once more with a spare network namespace taken before it and dropped
/// after its settle, as each isolated launch outside a request takes one:
/// what the kernel's making (on the filler thread, beside the launch) and
/// release of one namespace cost a launch that does nothing else; and the
/// prepared `workspace-write` launch once more with custodian's background
/// threads on any CPU (`custodian::__bench::set_background_aside`), the
/// launcher's included. (Outside a request the one sandbox prepared
/// serves the next prepared launch, whichever variant it is: each of the
/// two prepared variants runs in a sandbox the other may have prepared,
/// and meets the background work its own launch sets off.)
fn keeper_table(rt: &tokio::runtime::Runtime, opts: &LaunchOptions, n: usize) {
    custodian::__bench::set_netns_spares(true);
    custodian::__bench::set_hold_mount_ns(true);
    custodian::__bench::set_prepared_sandboxes(true);
    let _keeper = custodian::contain::SpareKeeper::new();
    // (name, confinement, prepared sandboxes on, a spare network
    // namespace taken before the launch and dropped after its settle,
    // background threads off the launcher's CPU)
    let variants = [
        ("unconfined", Confinement::none(), true, false, true),
        (
            "workspace-write",
            Confinement::workspace_write(),
            true,
            false,
            true,
        ),
        (
            "the same, no prepared sandbox",
            Confinement::workspace_write(),
            false,
            false,
            true,
        ),
        (
            "unconfined, a netns made beside it",
            Confinement::none(),
            true,
            true,
            true,
        ),
        (
            "workspace-write, background anywhere",
            Confinement::workspace_write(),
            true,
            false,
            false,
        ),
    ];
    // Launches of each variant that ran in a prepared sandbox.
    let ran_prepared = std::cell::RefCell::new(vec![0u64; variants.len()]);
    let made = std::cell::Cell::new(0usize);
    // CPU of this process (every thread) and its reaped children (each
    // sandbox's init, with its tool) per variant.
    let cpu = std::cell::RefCell::new(vec![Duration::ZERO; variants.len()]);
    let once = |v @ (_, c, prepared, beside, aside): &(&str, Confinement, bool, bool, bool)| {
        let k = variants.iter().position(|w| w.0 == v.0).unwrap_or(0);
        let c0 = cpu_self() + cpu_children();
        custodian::__bench::set_prepared_sandboxes(*prepared);
        custodian::__bench::set_background_aside(*aside);
        let before = custodian::__bench::prepared_launches();
        // What an isolated launch outside a request costs the kernel
        // besides its own work: the spare it takes is replaced by the
        // filler thread while it runs, and released once it settled.
        let taken = beside
            .then(custodian::__bench::take_spare_network_namespace)
            .flatten();
        made.set(made.get() + usize::from(taken.is_some()));
        let t = once(rt, opts, c);
        ran_prepared.borrow_mut()[k] += custodian::__bench::prepared_launches() - before;
        drop(taken);
        cpu.borrow_mut()[k] += (cpu_self() + cpu_children()).saturating_sub(c0);
        t
    };
    let (samples, spawns) = interleaved(&variants, n, once);
    println!();
    println!(
        "outside a request, a SpareKeeper held: {n} rounds interleaved, \
         {} of the fourth variant's beside a network namespace made for it; \
         prepared: of {} launches (the warm-up's included)",
        made.get().saturating_sub(1),
        n + 1
    );
    println!(
        "{:<38} {:>10} {:>10} {:>10} {:>14} {:>12} {:>9}",
        "variant", "p50 us", "p95 us", "p50 ratio", "launch() p50", "CPU/launch", "prepared"
    );
    let p = |s: &mut Vec<Duration>, q: usize| {
        s.sort();
        s[n * q / 100].as_secs_f64()
    };
    let base = p(&mut samples[0].clone(), 50);
    let cpu = cpu.into_inner();
    let ran_prepared = ran_prepared.into_inner();
    for (((((name, ..), mut s), mut sp), cpu), prepared) in variants
        .iter()
        .zip(samples)
        .zip(spawns)
        .zip(cpu)
        .zip(ran_prepared)
    {
        println!(
            "{:<38} {:>10.0} {:>10.0} {:>9.3}x {:>11.0} us {:>9.0} us {:>9}",
            name,
            p(&mut s, 50) * 1e6,
            p(&mut s, 95) * 1e6,
            p(&mut s, 50) / base,
            p(&mut sp, 50) * 1e6,
            cpu.as_secs_f64() * 1e6 / (n + 1) as f64,
            prepared,
        );
    }
}
