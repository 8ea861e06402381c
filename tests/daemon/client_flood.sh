#!/bin/sh
# client_flood.sh OUTDIR: clients that hold connections idle or never read cannot exhaust
# capuchind. With a daemon running:
#   1. 1,500 idle connections add less than 48 MiB to its resident memory (each cost a 256 KiB
#      read buffer: 2,000 connections were 520 MB); those past 1,024 are answered
#      "too-many-connections"; once they close, the daemon answers a status query;
#   2. a client that pipelines 400,000 queries (over 64 MiB of answers) and never reads is
#      closed, and the daemon says so at most twice (it wrote thousands of identical warnings);
# Environment (ctest): CAPUCHIN, CAPUCHIND.
set -eu
out=$1
rm -rf "$out"; mkdir -p "$out"
sock="$out/s.sock"
"$CAPUCHIND" --socket "$sock" --log-dir "$out/logs" > "$out/daemon.log" 2>&1 & dpid=$!
trap 'kill $dpid 2>/dev/null || true' EXIT
i=0
until "$CAPUCHIN" --socket "$sock" status > /dev/null 2>&1; do
  i=$((i + 1)); [ $i -gt 100 ] && { echo "FAIL: capuchind did not start"; cat "$out/daemon.log"; exit 1; }; sleep 0.1
done
python3 - "$sock" "$dpid" "$out/daemon.log" <<'PY'
import json, os, resource, socket, sys, time
path, pid, log = sys.argv[1], int(sys.argv[2]), sys.argv[3]
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
def rss():
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"): return int(line.split()[1]) * 1024
def status_ok():
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.settimeout(10)
    c.connect(path)
    c.sendall(b'{"v":1,"id":1,"method":"status"}\n')
    data = b""
    while not data.endswith(b"\n"):
        chunk = c.recv(65536)
        if not chunk: break
        data += chunk
    c.close()
    return json.loads(data).get("ok") is True
errors = []
before = rss()
conns = []
for _ in range(1500):
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.connect(path)
    conns.append(c)
time.sleep(1.0)
grown = rss() - before
refused = 0
for c in conns:
    c.setblocking(False)
    try:
        refused += b"too-many-connections" in c.recv(4096)
    except BlockingIOError:
        pass
for c in conns: c.close()
time.sleep(0.5)
if not status_ok(): errors.append("no status answer once the idle connections closed")
print(f"1. 1,500 idle connections: resident memory +{grown / 2**20:.1f} MiB; {refused} refused as too many")
if grown > 48 << 20: errors.append(f"idle connections cost {grown} bytes of resident memory")
if refused < 400: errors.append(f"only {refused} connections refused past the limit of 1,024")
# 2. A client that never reads.
c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
c.connect(path)
c.settimeout(30)
req = b'{"v":1,"id":1,"method":"status"}\n' * 1000
sent = 0
try:
    for _ in range(400):
        c.sendall(req)
        sent += 1000
except (BrokenPipeError, ConnectionResetError, socket.timeout):
    pass
time.sleep(1.0)
c.close()
if not status_ok(): errors.append("no status answer after the client that never reads")
warnings = sum("does not read its replies" in l for l in open(log))
print(f"2. {sent} queries sent without reading; {warnings} warning line(s) about it")
if warnings > 2: errors.append(f"{warnings} warnings about the client that never reads")
if errors:
    print("FAIL: " + "; ".join(errors)); sys.exit(1)
PY
echo "client_flood: ok"
