"""Could an in-kernel relay meet the network proxy's throughput goal (a
100 MB download through the proxy >= 0.8x direct loopback, issue 29)?

    sudo python3 benches/relay_sockmap.py        # ROUNDS=15 by default

Three 100 MB downloads per round over loopback, interleaved, from a
server in a process of its own to a client in this one (256 KiB reads):

- direct: the client connects to the server;
- splice: through a relay process that joins the two connections with
  two threads, each splicing one direction through a 256 KiB pipe (what
  the proxy's `CONNECT` tunnel does, without HTTP or policy);
- sockmap: through an in-kernel relay, no userspace thread at all: a
  `BPF_MAP_TYPE_SOCKMAP` of two entries per tunnel (the client's accepted
  socket, the upstream socket) with an 11-instruction `BPF_PROG_TYPE_SK_SKB`
  verdict program attached, hand-assembled here, that redirects every skb
  to the other socket's egress (`bpf_sk_redirect_map`; which socket it
  arrived on is told by its local port). `ATTACH=38` attaches it as
  `BPF_SK_SKB_VERDICT` instead of `BPF_SK_SKB_STREAM_VERDICT` (5).

Prints each kind's median rate and the median of the rounds' ratios to
direct. Needs root (BPF) and x86-64 (the `bpf` system call's number); run
by hand (recorded in docs/performance-history.md, *The network proxy*),
never by CI.
"""

import ctypes
import fcntl
import os
import signal
import socket
import statistics
import struct
import threading
import time

SIZE = 100 * 1024 * 1024
CHUNK = 256 * 1024
ROUNDS = int(os.environ.get("ROUNDS", "15"))
ATTACH_VERDICT = int(os.environ.get("ATTACH", "5"))

libc = ctypes.CDLL(None, use_errno=True)
NR_BPF = 321  # x86-64
BPF_MAP_CREATE, BPF_MAP_UPDATE_ELEM, BPF_PROG_LOAD, BPF_PROG_ATTACH = 0, 2, 5, 8
BPF_MAP_TYPE_SOCKMAP = 15
BPF_PROG_TYPE_SK_SKB = 14
BPF_FUNC_SK_REDIRECT_MAP = 52
SKB_LOCAL_PORT = 136  # offsetof(struct __sk_buff, local_port), host order
F_SETPIPE_SZ = 1031


def bpf(cmd, attr):
    buf = ctypes.create_string_buffer(attr, 128)
    r = libc.syscall(NR_BPF, cmd, buf, 128)
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"bpf({cmd}): {os.strerror(e)}")
    return r


def insn(code, dst, src, off, imm):
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


def tunnel_map(proxy_port, client, upstream):
    """A sockmap {0: client, 1: upstream} whose verdict program sends what
    arrives on one to the other; returns the map's and program's fds."""
    map_fd = bpf(BPF_MAP_CREATE, struct.pack("IIII", BPF_MAP_TYPE_SOCKMAP, 4, 4, 2))
    code = b"".join([
        insn(0xBF, 6, 1, 0, 0),                    # r6 = skb
        insn(0x61, 2, 6, SKB_LOCAL_PORT, 0),       # r2 = skb->local_port
        insn(0xB7, 3, 0, 0, 0),                    # r3 = 0 (the client)
        insn(0x55, 2, 0, 1, proxy_port),           # if r2 != proxy port: skip
        insn(0xB7, 3, 0, 0, 1),                    # r3 = 1 (the upstream)
        insn(0xBF, 1, 6, 0, 0),                    # r1 = skb
        insn(0x18, 2, 1, 0, map_fd),               # r2 = the map (ld_imm64)
        insn(0x00, 0, 0, 0, 0),
        insn(0xB7, 4, 0, 0, 0),                    # r4 = 0 (egress)
        insn(0x85, 0, 0, 0, BPF_FUNC_SK_REDIRECT_MAP),
        insn(0x95, 0, 0, 0, 0),                    # return its verdict
    ])
    insns = ctypes.create_string_buffer(code, len(code))
    lic = ctypes.create_string_buffer(b"GPL")
    log = ctypes.create_string_buffer(65536)
    attr = struct.pack(
        "IIQQIIQ", BPF_PROG_TYPE_SK_SKB, len(code) // 8, ctypes.addressof(insns),
        ctypes.addressof(lic), 1, len(log), ctypes.addressof(log),
    )
    try:
        prog_fd = bpf(BPF_PROG_LOAD, attr)
    except OSError:
        print(log.value.decode())
        raise
    bpf(BPF_PROG_ATTACH, struct.pack("IIII", map_fd, prog_fd, ATTACH_VERDICT, 0))
    for key, sock in ((0, client), (1, upstream)):
        k, v = ctypes.c_uint32(key), ctypes.c_uint32(sock.fileno())
        attr = struct.pack("IIQQQ", map_fd, 0, ctypes.addressof(k), ctypes.addressof(v), 0)
        bpf(BPF_MAP_UPDATE_ELEM, attr)
    return map_fd, prog_fd


def serve(listener):
    """Sends SIZE bytes to each connection once it sent one byte."""
    data = b"x" * CHUNK
    while True:
        conn, _ = listener.accept()
        conn.recv(1)
        left = SIZE
        while left > 0:
            left -= conn.send(data[: min(CHUNK, left)])
        conn.close()


def download(sock):
    """MB/s of one download read from `sock`."""
    sock.send(b"g")
    buf = memoryview(bytearray(CHUNK))
    got = 0
    start = time.perf_counter()
    while got < SIZE:
        n = sock.recv_into(buf)
        if n == 0:
            break
        got += n
    elapsed = time.perf_counter() - start
    assert got == SIZE, got
    return SIZE / elapsed / 1e6


def splice_one_way(src, dst):
    r, w = os.pipe()
    fcntl.fcntl(r, F_SETPIPE_SZ, CHUNK)
    while True:
        n = os.splice(src.fileno(), w, CHUNK)
        if n == 0:
            return
        while n:
            n -= os.splice(r, dst.fileno(), n)


def main():
    if os.geteuid() != 0:
        raise SystemExit("needs root (BPF)")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    server_pid = os.fork()
    if server_pid == 0:
        serve(server)
    sport = server.getsockname()[1]
    proxy = socket.socket()
    proxy.bind(("127.0.0.1", 0))
    proxy.listen(16)
    pport = proxy.getsockname()[1]
    res = {"direct": [], "splice": [], "sockmap": []}
    for _ in range(ROUNDS):
        for kind in res:
            if kind == "direct":
                with socket.create_connection(("127.0.0.1", sport)) as c:
                    res[kind].append(download(c))
                continue
            c = socket.create_connection(("127.0.0.1", pport))
            inside, _ = proxy.accept()
            up = socket.create_connection(("127.0.0.1", sport))
            if kind == "splice":
                pid = os.fork()
                if pid == 0:
                    c.close()
                    ways = [threading.Thread(target=splice_one_way, args=p, daemon=True)
                            for p in ((inside, up), (up, inside))]
                    for t in ways:
                        t.start()
                    for t in ways:
                        t.join(60)
                    os._exit(0)
                inside_up = (inside, up)
                res[kind].append(download(c))
                c.close()
                for s in inside_up:
                    s.close()
                os.waitpid(pid, 0)
                continue
            fds = tunnel_map(pport, inside, up)
            res[kind].append(download(c))
            c.close()
            for fd in fds:
                os.close(fd)
            inside.close()
            up.close()
    for kind in ("splice", "sockmap"):
        ratio = statistics.median(a / b for a, b in zip(res[kind], res["direct"]))
        print(f"{kind}: median of the rounds' ratios to direct {ratio:.3f}")
    for kind, rates in res.items():
        print(f"{kind:8s} median {statistics.median(rates):6.0f} MB/s  {[round(r) for r in rates]}")
    os.kill(server_pid, signal.SIGKILL)
    os.waitpid(server_pid, 0)


if __name__ == "__main__":
    main()
