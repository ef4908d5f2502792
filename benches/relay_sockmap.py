"""import ctypes, os, socket, struct, sys, time, threading, statistics
libc = ctypes.CDLL(None, use_errno=True)
NR_BPF = 321
def bpf(cmd, attr: bytes):
    buf = ctypes.create_string_buffer(attr, 128)
    r = libc.syscall(NR_BPF, cmd, buf, 128)
    if r < 0:
        e = ctypes.get_errno(); raise OSError(e, f"bpf cmd {cmd}: {os.strerror(e)}")
    return r
BPF_MAP_CREATE, BPF_MAP_UPDATE_ELEM, BPF_PROG_LOAD, BPF_PROG_ATTACH = 0, 2, 5, 8
SOCKMAP = 15
SK_SKB = 14
ATTACH_VERDICT = int(os.environ.get("ATTACH", "5"))  # 5 STREAM_VERDICT, 38 SK_SKB_VERDICT
def map_create():
    return bpf(BPF_MAP_CREATE, struct.pack("IIII", SOCKMAP, 4, 4, 2))
def insn(code, dst, src, off, imm):
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)
def prog_load(map_fd, proxy_port):
    # r6 = skb; r2 = *(u32*)(skb+136) local_port (host order)
    # r3 = 0; if r2 == proxy_port: r3 = 1  (arrived on the client socket -> send to upstream, idx 1)
    # r1 = skb; r2 = map; r4 = 0; call sk_redirect_map(52); exit
    code = b"".join([
        insn(0xbf, 6, 1, 0, 0),            # r6 = r1
        insn(0x61, 2, 6, 136, 0),          # r2 = *(u32 *)(r6 + 136)
        insn(0xb7, 3, 0, 0, 0),            # r3 = 0
        insn(0x55, 2, 0, 1, proxy_port),   # if r2 != port goto +1
        insn(0xb7, 3, 0, 0, 1),            # r3 = 1
        insn(0xbf, 1, 6, 0, 0),            # r1 = r6
        insn(0x18, 2, 1, 0, map_fd),       # r2 = map (ld_imm64 pseudo map fd)
        insn(0x00, 0, 0, 0, 0),
        insn(0xb7, 4, 0, 0, 0),            # r4 = 0
        insn(0x85, 0, 0, 0, 52),           # call bpf_sk_redirect_map
        insn(0x95, 0, 0, 0, 0),            # exit
    ])
    insns = ctypes.create_string_buffer(code, len(code))
    lic = ctypes.create_string_buffer(b"GPL")
    log = ctypes.create_string_buffer(65536)
    attr = struct.pack("IIQQIIQ", SK_SKB, len(code)//8, ctypes.addressof(insns), ctypes.addressof(lic), 1, 65536, ctypes.addressof(log))
    try:
        return bpf(BPF_PROG_LOAD, attr)
    except OSError:
        print(log.value.decode()); raise
def attach(map_fd, prog_fd):
    bpf(BPF_PROG_ATTACH, struct.pack("IIII", map_fd, prog_fd, ATTACH_VERDICT, 0))
def update(map_fd, key, fd):
    k = ctypes.c_uint32(key); v = ctypes.c_uint32(fd)
    bpf(BPF_MAP_UPDATE_ELEM, struct.pack("IIQQQ", map_fd, 0, ctypes.addressof(k), ctypes.addressof(v), 0))

SIZE = 100 * 1024 * 1024
CHUNK = 256 * 1024
def server(port_q):
    ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", 0)); ls.listen(16); port_q.append(ls.getsockname()[1])
    data = b"x" * CHUNK
    while True:
        c, _ = ls.accept()
        c.recv(1)
        left = SIZE
        while left > 0:
            n = c.send(data[:min(CHUNK, left)]); left -= n
        c.close()
def client_read(s):
    s.send(b"g")
    buf = bytearray(CHUNK); mv = memoryview(buf); got = 0
    t = time.perf_counter()
    while got < SIZE:
        n = s.recv_into(mv)
        if n == 0: break
        got += n
    dt = time.perf_counter() - t
    assert got == SIZE, got
    return SIZE / dt / 1e6
def splice_relay(a, b):
    r, w = os.pipe(); 
    import fcntl; fcntl.fcntl(r, 1031, 256*1024)
    while True:
        n = os.splice(a.fileno(), w, 256*1024)
        if n == 0: break
        while n:
            n -= os.splice(r, b.fileno(), n)
def run():
    rp, wp = os.pipe()
    if os.fork() == 0:
        q = []
        t = threading.Thread(target=server, args=(q,), daemon=True); t.start()
        while not q: time.sleep(0.01)
        os.write(wp, struct.pack("I", q[0])); t.join(); os._exit(0)
    sport = struct.unpack("I", os.read(rp, 4))[0]
    pl = socket.socket(); pl.bind(("127.0.0.1", 0)); pl.listen(16); pport = pl.getsockname()[1]
    map_fd = None
    res = {"direct": [], "splice": [], "sockmap": []}
    for rnd in range(int(os.environ.get("ROUNDS", "15"))):
        for kind in ["direct", "splice", "sockmap"]:
            if kind == "direct":
                c = socket.create_connection(("127.0.0.1", sport)); res[kind].append(client_read(c)); c.close(); continue
            c = socket.create_connection(("127.0.0.1", pport))
            inside, _ = pl.accept()
            up = socket.create_connection(("127.0.0.1", sport))
            if kind == "splice":
                pid = os.fork()
                if pid == 0:
                    c.close()
                    ths = [threading.Thread(target=splice_relay, args=(inside, up), daemon=True), threading.Thread(target=splice_relay, args=(up, inside), daemon=True)]
                    for t in ths: t.start()
                    for t in ths: t.join(20)
                    os._exit(0)
                res[kind].append(client_read(c)); c.close()
                inside.close(); up.close()
                os.waitpid(pid, 0)
                continue
            else:
                m = map_create(); p = prog_load(m, pport); attach(m, p)
                update(m, 0, inside.fileno()); update(m, 1, up.fileno())
                res[kind].append(client_read(c)); c.close()
                os.close(m); os.close(p)
            inside.close(); up.close()
    d = statistics.median(res["direct"])
    for k in ("splice", "sockmap"):
        print(k, "median of per-round ratios", round(statistics.median(a/b for a, b in zip(res[k], res["direct"])), 3))
    for k, v in res.items():
        print(f"{k:8s} median {statistics.median(v):7.0f} MB/s  {statistics.median(v)/d:.3f}x direct   {[round(x) for x in v]}")
run()
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
