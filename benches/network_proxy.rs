//! The filtering proxy of network `allow` (`src/process/proxy.rs`) against
//! direct loopback, in the same run: what a sandbox's client pays for going
//! through it. The proxy serves a listener of this benchmark's own, exactly
//! as it serves a sandbox's (the data path is the same; only the listener's
//! network namespace differs).
//!
//! 1. **Throughput**: a 100 MB download (`PROXY_MB` to change it), direct,
//!    through `CONNECT`, through HTTP forwarding and through a reference
//!    relay, interleaved, median of the rounds (goal: ≥ 0.8× direct). The
//!    reference relay is the least any proxy can do: no HTTP, no policy, no
//!    async runtime, two blocking threads per connection that `splice(2)`
//!    each direction through a pipe. What it loses against direct loopback
//!    is the second loopback hop's own cost on this machine; the proxy's
//!    ratio to it is what the proxy itself costs.
//! 2. **Latency**: a small request on a new connection each time (`PROXY_ROUNDS`,
//!    default 1,000), direct and through both paths, interleaved; the p50
//!    added per request (goal: ≤ 1 ms).
//! 3. **Concurrency**: 1,000 tunnels open at once across 16 launches
//!    (`PROXY_CONNS`), each seen established; the resident memory the
//!    process grew by per connection (bounded: the proxy holds two
//!    sockets and a few small buffers per tunnel).
//!
//! Run: `cargo bench --bench network_proxy`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use custodian::process::{NetworkProxy, ProxyConfig};

const MIB: usize = 1 << 20;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// An upstream on loopback: reads a request head, answers `200` with the
/// size the path names (`/N`), then closes. One thread per connection.
fn upstream() -> u16 {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let chunk = vec![b'x'; MIB];
        for s in l.incoming() {
            let Ok(s) = s else { continue };
            let chunk = chunk.clone();
            std::thread::spawn(move || {
                let _ = s.set_nodelay(true);
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut line = String::new();
                if r.read_line(&mut line).unwrap_or(0) == 0 {
                    return;
                }
                let mut h = String::new();
                while r.read_line(&mut h).unwrap_or(0) > 2 {
                    h.clear();
                }
                let size: usize = line
                    .split(' ')
                    .nth(1)
                    .and_then(|p| p.rsplit('/').next())
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(5);
                let mut s = s;
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\nContent-Length: {size}\r\nConnection: close\r\n\r\n"
                );
                let mut left = size;
                while left > 0 {
                    let n = left.min(chunk.len());
                    if s.write_all(&chunk[..n]).is_err() {
                        return;
                    }
                    left -= n;
                }
            });
        }
    });
    port
}

/// The reference relay: every connection to it is joined to the upstream
/// by two blocking threads, each splicing one direction through a pipe of
/// 256 KiB until its source ends. Returns its address.
fn reference_relay(up: u16) -> SocketAddr {
    fn one_way(src: TcpStream, dst: TcpStream) {
        use rustix::pipe::{PipeFlags, SpliceFlags, pipe_with, splice};
        let (r, w) = pipe_with(PipeFlags::CLOEXEC).unwrap();
        let room = rustix::pipe::fcntl_setpipe_size(&w, 256 * 1024).unwrap_or(64 * 1024);
        while let Ok(n @ 1..) = splice(&src, None, &w, None, room, SpliceFlags::MOVE) {
            let mut left = n;
            while left > 0 {
                match splice(&r, None, &dst, None, left, SpliceFlags::MOVE) {
                    Ok(m @ 1..) => left -= m,
                    _ => return,
                }
            }
        }
        let _ = dst.shutdown(std::net::Shutdown::Write);
    }
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for inside in l.incoming() {
            let Ok(inside) = inside else { continue };
            let Ok(upstream) = TcpStream::connect((Ipv4Addr::LOCALHOST, up)) else {
                continue;
            };
            let _ = (inside.set_nodelay(true), upstream.set_nodelay(true));
            let (i2, u2) = (inside.try_clone().unwrap(), upstream.try_clone().unwrap());
            std::thread::spawn(move || one_way(inside, upstream));
            std::thread::spawn(move || one_way(u2, i2));
        }
    });
    addr
}

#[derive(Clone, Copy)]
enum Path {
    Direct,
    Connect,
    Forward,
    /// Through [`reference_relay`]: the request as sent directly.
    Relay(SocketAddr),
}

/// The paths of the latency rounds (the reference relay is measured for
/// throughput only).
const PATHS: [(Path, &str); 3] = [
    (Path::Direct, "direct loopback"),
    (Path::Connect, "through CONNECT"),
    (Path::Forward, "through HTTP forwarding"),
];

/// One GET of `size` bytes by `path`; the body's length.
fn get(path: Path, up: u16, proxy: SocketAddr, size: usize) -> usize {
    let direct = SocketAddr::from((Ipv4Addr::LOCALHOST, up));
    let mut s = TcpStream::connect(match path {
        Path::Direct => direct,
        Path::Relay(relay) => relay,
        _ => proxy,
    })
    .unwrap();
    s.set_nodelay(true).unwrap();
    let mut r = BufReader::with_capacity(256 * 1024, s.try_clone().unwrap());
    match path {
        Path::Direct | Path::Relay(_) => {
            write!(s, "GET /{size} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        }
        Path::Connect => {
            write!(
                s,
                "CONNECT allowed.test:{up} HTTP/1.1\r\nHost: allowed.test:{up}\r\n\r\n"
            )
            .unwrap();
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            assert!(line.starts_with("HTTP/1.1 200"), "{line}");
            while r.read_line(&mut line).unwrap() > 2 {
                line.clear();
            }
            write!(s, "GET /{size} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        }
        Path::Forward => {
            write!(
                s,
                "GET http://allowed.test:{up}/{size} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            )
            .unwrap();
        }
    }
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert!(line.starts_with("HTTP/1.1 200"), "{line}");
    let mut h = String::new();
    while r.read_line(&mut h).unwrap() > 2 {
        h.clear();
    }
    let mut buf = vec![0u8; 256 * 1024];
    let mut got = 0;
    while got < size {
        let n = r.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        got += n;
    }
    got
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// This process's CPU time so far (every thread: the bench's client and
/// server and the proxy's), in seconds.
fn cpu_secs() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn main() {
    let mb = env("PROXY_MB", 100);
    let rounds = env("PROXY_ROUNDS", 1000).max(20);
    let conns = env("PROXY_CONNS", 1000);
    let up = upstream();
    let proxy = NetworkProxy::start(
        ProxyConfig::new()
            .with_host("allowed.test", Ipv4Addr::LOCALHOST.into())
            .with_max_connections(conns + 64),
    )
    .unwrap();
    let hosts = [format!("allowed.test:{up}")];
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let addr = listener.local_addr().unwrap();
    let attachment = custodian::__bench::proxy_attach(&proxy, listener, &hosts).unwrap();

    // 1. Throughput.
    let size = mb * MIB;
    let tput: [(Path, &str); 4] = [
        PATHS[0],
        PATHS[1],
        PATHS[2],
        (
            Path::Relay(reference_relay(up)),
            "through the reference relay",
        ),
    ];
    let n = tput.len();
    let mut secs: Vec<Vec<f64>> = vec![Vec::new(); n];
    let mut cpu: Vec<Vec<f64>> = vec![Vec::new(); n];
    for (p, _) in tput {
        get(p, up, addr, size); // warm-up
    }
    let tput_rounds = env("PROXY_TPUT_ROUNDS", 15).max(3);
    for round in 0..tput_rounds {
        for k in 0..n {
            let (p, _) = tput[(round + k) % n];
            let (t, c) = (Instant::now(), cpu_secs());
            assert_eq!(get(p, up, addr, size), size);
            let wall = t.elapsed().as_secs_f64();
            secs[(round + k) % n].push(wall);
            cpu[(round + k) % n].push((cpu_secs() - c) / wall);
        }
    }
    println!(
        "{mb} MB download, {tput_rounds} rounds interleaved: median rate, and the median of \
         each round's ratio to the direct download of the same round"
    );
    println!(
        "{:<28} {:>8} {:>10} {:>10} {:>10}",
        "path", "MB/s", "vs direct", "vs relay", "CPUs busy"
    );
    // Each round's ratio of `i` to `base` (the same round's download).
    let ratio = |base: usize, i: usize| {
        let mut r: Vec<f64> = secs[base]
            .iter()
            .zip(&secs[i])
            .map(|(b, this)| b / this)
            .collect();
        median(&mut r)
    };
    for (i, (_, name)) in tput.iter().enumerate() {
        let rate = size as f64 / median(&mut secs[i].clone()) / 1e6;
        let busy = median(&mut cpu[i]);
        println!(
            "{name:<28} {rate:>8.0} {:>9.3}x {:>9.3}x {busy:>10.2}",
            ratio(0, i),
            ratio(n - 1, i)
        );
    }

    // 2. Latency of a small request, a new connection each.
    let mut us: [Vec<f64>; 3] = Default::default();
    for round in 0..rounds {
        for k in 0..3 {
            let (p, _) = PATHS[(round + k) % 3];
            let t = Instant::now();
            assert_eq!(get(p, up, addr, 5), 5);
            us[(round + k) % 3].push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    println!("\n{rounds} small requests each, a new connection each, interleaved");
    println!("{:<26} {:>10} {:>12}", "path", "p50 us", "added p50");
    let base = median(&mut us[0].clone());
    for (i, (_, name)) in PATHS.iter().enumerate() {
        let p50 = median(&mut us[i]);
        println!("{name:<26} {p50:>10.0} {:>10.0} us", p50 - base);
    }
    let summary = attachment.finish();
    println!(
        "(the launch's summary: {} requests allowed, {} MB down)",
        summary.requests_allowed,
        summary.bytes_down / 1_000_000
    );

    // 3. Concurrency: `conns` tunnels open at once over 16 launches.
    let _ = rustix::process::setrlimit(
        rustix::process::Resource::Nofile,
        rustix::process::Rlimit {
            current: Some(16_384),
            maximum: Some(16_384),
        },
    );
    // A slow upstream that holds each connection open: one byte each way.
    let hold = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let hold_port = hold.local_addr().unwrap().port();
    let held_hosts = [format!("allowed.test:{hold_port}")];
    let launches: Vec<_> = (0..16)
        .map(|_| {
            let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
            let a = l.local_addr().unwrap();
            (
                custodian::__bench::proxy_attach(&proxy, l, &held_hosts).unwrap(),
                a,
            )
        })
        .collect();
    let held = std::thread::spawn(move || {
        let mut kept = Vec::new();
        for s in hold.incoming().take(conns) {
            let mut s = s.unwrap();
            s.write_all(b"!").unwrap();
            kept.push(s);
        }
        kept
    });
    let before = rss_kib();
    let t = Instant::now();
    let mut tunnels = Vec::with_capacity(conns);
    for i in 0..conns {
        let a = launches[i % launches.len()].1;
        let mut s = TcpStream::connect(a).unwrap();
        write!(
            s,
            "CONNECT allowed.test:{hold_port} HTTP/1.1\r\nHost: x\r\n\r\n"
        )
        .unwrap();
        tunnels.push(s);
    }
    for s in &mut tunnels {
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut head = [0u8; 512];
        let mut got = Vec::new();
        // The `200` head, then the upstream's one byte through the tunnel.
        while !got.ends_with(b"\r\n\r\n!") {
            let n = s.read(&mut head).unwrap();
            assert!(n > 0, "a tunnel closed early");
            got.extend_from_slice(&head[..n]);
        }
        assert!(got.starts_with(b"HTTP/1.1 200"));
    }
    let opened = t.elapsed();
    let after = rss_kib();
    let kept = held.join().unwrap();
    println!(
        "\n{conns} tunnels open at once over 16 launches: established in {:.0} ms; \
         RSS {before} -> {after} KiB, {:.1} KiB per connection (the bench's own \
         client and server sockets included)",
        opened.as_secs_f64() * 1e3,
        (after.saturating_sub(before)) as f64 / conns as f64
    );
    let served: u64 = launches
        .into_iter()
        .map(|(a, _)| a.finish().requests_allowed)
        .sum();
    assert_eq!(served, conns as u64);
    drop((tunnels, kept));
}
