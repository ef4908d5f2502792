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
