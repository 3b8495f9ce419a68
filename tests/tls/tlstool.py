# SPDX-License-Identifier: Apache-2.0
# Helpers for tests/tls/tls.sh: free ports, listen waits, a record-tampering TCP relay, HTTP body split, stats sums.
#
#   tlstool.py freeport                       print a free loopback TCP port
#   tlstool.py waitport PORT [SECONDS]        wait until something listens on 127.0.0.1:PORT (exit 1 on timeout)
#   tlstool.py body IN OUT                    write the body of an HTTP response (after the first CRLFCRLF)
#   tlstool.py prefix DELIVERED EXPECTED MAX  DELIVERED (an HTTP response when it starts with "HTTP/",
#                                             else raw) is a strict prefix of EXPECTED and at most MAX bytes
#   tlstool.py stats FILE LINES COND...       sum the "gpuprov stats:" lines of FILE (want LINES of them,
#                                             or "N+" for at least N) and check each COND "key>=number"
#   tlstool.py children PID                   print the pids whose parent is PID (from /proc)
#   tlstool.py tampered REPORT TYPE LEN       the relay's REPORT shows a tampered record and the receiver's
#                                             first record after it has TYPE and LEN (an alert); prints
#                                             the tampered record's plaintext offset
#   tlstool.py relay ...                      see relay() below
import json
import os
import re
import selectors
import socket
import sys
import time


def freeport():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    print(s.getsockname()[1])
    s.close()


def listening(port):
    """True when a socket listens on PORT (any local address, IPv4 or IPv6), from /proc/net/tcp*."""
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as f:
                next(f)
                for line in f:
                    cols = line.split()
                    if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                        return True
        except OSError:
            pass
    return False


def waitport(port, seconds=15.0):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if listening(port):
            return 0
        time.sleep(0.02)
    return 1


def split_http(data):
    """(header, body) of an HTTP response; header is None when the data is not one."""
    if not data.startswith(b"HTTP/"):
        return None, data
    i = data.find(b"\r\n\r\n")
    if i < 0:
        return data, b""          # headers cut short: no body delivered yet
    return data[:i + 4], data[i + 4:]


def body(src, dst):
    with open(src, "rb") as f:
        data = f.read()
    hdr, b = split_http(data)
    if hdr is None or not hdr.endswith(b"\r\n\r\n"):
        print("no complete HTTP header in %s (%d bytes)" % (src, len(data)))
        return 1
    with open(dst, "wb") as f:
        f.write(b)
    return 0


def prefix(delivered, expected, maxlen):
    with open(delivered, "rb") as f:
        data = f.read()
    with open(expected, "rb") as f:
        want = f.read()
    if len(data) > maxlen:
        print("delivered %d bytes, more than the %d before the tampered record" % (len(data), maxlen))
        return 1
    hdr, b = split_http(data)
    if hdr is not None and hdr.endswith(b"\r\n\r\n") \
            and not re.match(rb"HTTP/1\.[01] 200 ", hdr.split(b"\r\n")[0] + b" "):
        print("delivered response does not start with an HTTP/1.x 200 status line: %r" % hdr[:60])
        return 1
    if len(b) >= len(want):
        print("delivered body has %d bytes, not a strict prefix of the %d-byte body" % (len(b), len(want)))
        return 1
    if want[:len(b)] != b:
        print("delivered body (%d bytes) is not a prefix of the body sent" % len(b))
        return 1
    print("delivered %d bytes (body %d of %d), at most %d: strict prefix" % (len(data), len(b), len(want), maxlen))
    return 0


KEYS = ("ops", "bytes", "cuda_ops", "host_ops", "cpu_ops", "batches", "mean_batch", "fallbacks", "errors")


def stats(path, lines_spec, conds):
    with open(path, "rb") as f:
        text = f.read().decode("utf-8", "replace")
    found = [l for l in text.splitlines() if l.startswith("gpuprov stats: ")]
    if lines_spec.endswith("+"):
        if len(found) < int(lines_spec[:-1]):
            print("want at least %s 'gpuprov stats:' lines, got %d" % (lines_spec[:-1], len(found)))
            return 1
    elif len(found) != int(lines_spec):
        print("want exactly %s 'gpuprov stats:' line(s), got %d" % (lines_spec, len(found)))
        return 1
    total = dict.fromkeys(KEYS, 0)
    for line in found:
        seen = {}
        for pair in line.split()[2:]:
            k, sep, v = pair.partition("=")
            if not sep or not re.fullmatch(r"-?[0-9]+(\.[0-9]+)?", v):
                print("malformed pair %r in %r" % (pair, line))
                return 1
            seen[k] = float(v)
        missing = [k for k in KEYS if k not in seen]
        if missing:
            print("missing keys %s in %r" % (missing, line))
            return 1
        for k in KEYS:
            if k != "mean_batch":
                total[k] += int(seen[k])
    for c in conds:
        m = re.fullmatch(r"\s*(\w+)\s*(>=|==|>)\s*(-?[0-9]+)\s*", c)
        if not m or m.group(1) not in total:
            print("bad condition %r" % c)
            return 1
        a, op, b = total[m.group(1)], m.group(2), int(m.group(3))
        if not ((op == ">=" and a >= b) or (op == ">" and a > b) or (op == "==" and a == b)):
            print("want %s, have %s=%d (sum of %d line(s))" % (c, m.group(1), a, len(found)))
            return 1
    print("stats ok (%d line(s)): " % len(found) + " ".join("%s=%d" % (k, total[k]) for k in KEYS if k != "mean_batch"))
    return 0


def relay(argv):
    """One-connection TCP relay that flips one byte of one TLS application-data record.

    relay TARGET_PORT PORT_FILE REPORT DIRECTION PROTO OVERHEAD NTH
      DIRECTION  s2c or c2s: the direction whose record is tampered with
      PROTO      tls12 or tls13
      OVERHEAD   ciphertext bytes per record beyond the plaintext (TLS 1.3: 17 = tag + inner type,
                 TLS 1.2 AES-GCM: 24 = explicit nonce + tag, TLS 1.2 ChaCha20-Poly1305: 16)
      NTH        tamper with the NTH application-data record of DIRECTION (1-based)
    Records are forwarded whole. Application data: every record of type 23 in TLS 1.2 (Finished is
    type 22 there); in TLS 1.3 the type-23 records after the client's first one (its Finished). The
    server must send no session tickets (they would look like application data). After the
    tampered record the rest of that direction is read and dropped, so the receiver can only fail
    on the tampered record (or wait). REPORT gets JSON: tampered, offset (plaintext bytes of that
    direction's application data before the tampered record), length (its plaintext length),
    after (type and length of the receiver's records after the tampering).
    """
    target, port_file, report, direction, proto = int(argv[0]), argv[1], argv[2], argv[3], argv[4]
    overhead, nth = int(argv[5]), int(argv[6])
    lsock = socket.socket()
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(1)
    with open(port_file + ".tmp", "w") as f:
        f.write("%d\n" % lsock.getsockname()[1])
    os.rename(port_file + ".tmp", port_file)
    lsock.settimeout(30)
    state = {"tampered": False, "offset": 0, "length": 0, "after": [], "app_records": 0,
             "records": {"c2s": [], "s2c": []}}
    try:
        client, _ = lsock.accept()
    except socket.timeout:
        state["error"] = "no connection within 30 s"
        with open(report, "w") as f:
            json.dump(state, f)
        return 1
    server = socket.create_connection(("127.0.0.1", target), timeout=10)
    server.settimeout(None)
    client.settimeout(None)
    peer = {"c2s": (client, server), "s2c": (server, client)}
    buf = {"c2s": b"", "s2c": b""}
    open_dirs = {"c2s", "s2c"}
    client_fin_seen = proto == "tls12"
    receiver_dir = "c2s" if direction == "s2c" else "s2c"

    def handle(d, rec):
        nonlocal client_fin_seen
        rtype, rlen = rec[0], len(rec) - 5
        state["records"][d].append([rtype, rlen])
        if state["tampered"] and d == receiver_dir:
            state["after"].append([rtype, rlen])
        if state["tampered"] and d == direction:
            return None                              # dropped: nothing after the tampered record
        is_app = False
        if rtype == 23:
            if d == "c2s" and not client_fin_seen:
                client_fin_seen = True               # TLS 1.3: the client's Finished
            elif client_fin_seen:
                is_app = True
        if d == direction and is_app:
            state["app_records"] += 1
            if state["app_records"] == nth:
                pos = 5 + rlen // 2
                rec = rec[:pos] + bytes([rec[pos] ^ 0x01]) + rec[pos + 1:]
                state["tampered"] = True
                state["length"] = rlen - overhead
            else:
                state["offset"] += rlen - overhead
        return rec

    sel = selectors.DefaultSelector()
    sel.register(client, selectors.EVENT_READ, "c2s")
    sel.register(server, selectors.EVENT_READ, "s2c")
    deadline = time.monotonic() + 60
    idle_after_tamper = None
    while open_dirs and time.monotonic() < deadline:
        if idle_after_tamper is not None and time.monotonic() > idle_after_tamper:
            state["error"] = "receiver still open 10 s after the tampered record"
            break
        events = sel.select(timeout=0.5)
        for key, _ in events:
            d = key.data
            src, dst = peer[d]
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            if not data:
                sel.unregister(src)
                open_dirs.discard(d)
                try:
                    if buf[d] and not (state["tampered"] and d == direction):
                        dst.sendall(buf[d])
                    dst.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                continue
            buf[d] += data
            out = []
            while len(buf[d]) >= 5:
                rlen = int.from_bytes(buf[d][3:5], "big")
                if len(buf[d]) < 5 + rlen:
                    break
                rec, buf[d] = buf[d][:5 + rlen], buf[d][5 + rlen:]
                rec = handle(d, rec)
                if rec is not None:
                    out.append(rec)
            if state["tampered"] and idle_after_tamper is None:
                idle_after_tamper = time.monotonic() + 10
            if out:
                try:
                    dst.sendall(b"".join(out))
                except OSError:
                    open_dirs.clear()
    client.close()
    server.close()
    with open(report, "w") as f:
        json.dump(state, f)
    return 0


def children(pid):
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    st = f.read()
            except OSError:
                continue
            if int(st.rsplit(")", 1)[1].split()[1]) == pid:
                print(d)
    return 0


def tampered(report, atype, alen):
    with open(report) as f:
        r = json.load(f)
    if not r.get("tampered"):
        print("relay did not tamper with any record (%s; records seen: %s)" % (r.get("error", "no error"), r.get("records")))
        return 1
    if not r["after"]:
        print("the receiver sent nothing after the tampered record (no alert)")
        return 1
    if r["after"][0] != [atype, alen]:
        print("the receiver's first record after the tampered one is type %d length %d, not an alert (type %d length %d)"
              % (r["after"][0][0], r["after"][0][1], atype, alen))
        return 1
    print(r["offset"])
    return 0


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "freeport":
        freeport()
        return 0
    if cmd == "waitport":
        return waitport(int(args[0]), float(args[1]) if len(args) > 1 else 15.0)
    if cmd == "body":
        return body(args[0], args[1])
    if cmd == "prefix":
        return prefix(args[0], args[1], int(args[2]))
    if cmd == "stats":
        return stats(args[0], args[1], args[2:])
    if cmd == "children":
        return children(int(args[0]))
    if cmd == "tampered":
        return tampered(args[0], int(args[1]), int(args[2]))
    if cmd == "relay":
        return relay(args)
    print("unknown command %r" % cmd, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
