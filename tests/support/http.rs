//! A loopback HTTP server for the network `allow` tests: the upstream the
//! proxy is pinned to (`allowed.test`, `denied.test`).

/// A loopback HTTP server answering `body` to every request (one read of
/// the request, then `200` and close), for as long as the test process
/// lives. Returns its port.
pub fn http_server(body: &'static str) -> u16 {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

/// The argv of a Python HTTP server on an ephemeral loopback port; it
/// prints `... port N ...` once it serves.
#[allow(dead_code, reason = "not every test binary starts one")]
pub const PY_SERVER: [&str; 6] = ["-u", "-m", "http.server", "0", "--bind", "127.0.0.1"];

/// A Python program fetching `argv[1]`: prints the status, or the name of
/// the exception (`URLError` when nothing listens).
#[allow(dead_code, reason = "not every test binary fetches")]
pub const PY_FETCH: &str = "import sys, urllib.request\n\
    try:\n    print(urllib.request.urlopen(sys.argv[1], timeout=5).status)\n\
    except Exception as e:\n    print(type(e).__name__)";

/// The port in a [`PY_SERVER`]'s banner.
#[allow(dead_code, reason = "not every test binary starts one")]
pub fn port_in_banner(banner: &str) -> u16 {
    banner
        .split("port ")
        .nth(1)
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {banner:?}"))
}
