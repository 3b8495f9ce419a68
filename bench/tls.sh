#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# TLS serving benchmark: nginx workers with gpuprov (per executor) against the default provider, many wrk connections; table + CSV.
#
# usage: bench/tls.sh [build-dir] [seconds-per-run]
# Each run: nginx (TLS 1.3, one cipher suite, worker_processes = CPUs) serves one body size to wrk
# (2 threads, keep-alive, the default provider: OPENSSL_CONF=/dev/null) over N connections for the
# given seconds. Reports requests/s, MB/s of body (10^6 bytes/s) and the server's CPU seconds per GB
# of body (utime+stime of the nginx master and workers from /proc, before and after). gpuprov runs
# with GPUPROV_STATS=1; the summed ops of its stats lines (printed at nginx's exit) are reported as a
# check that the records went through it.
# Environment: TLS_BENCH_CONNS ("256"), TLS_BENCH_SIZES ("16384 262144 1048576"), TLS_BENCH_SUITES
# ("TLS_AES_256_GCM_SHA384 TLS_CHACHA20_POLY1305_SHA256"), TLS_BENCH_CONFIGS ("default cpu host", plus
# cuda where nvidia-smi sees a GPU), TLS_BENCH_WORKERS (CPUs), BENCH_OUT (CSV; build-dir/bench/tls.csv).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
secs=${2:-5}
moddir="$build/provider"
[ -f "$moddir/gpuprov.so" ] || { echo "tls bench: $moddir/gpuprov.so not built" >&2; exit 1; }
for p in nginx wrk python3; do
  command -v "$p" >/dev/null || [ -x "/usr/sbin/$p" ] \
    || { echo "tls bench: $p not found (apt-get install nginx-light wrk python3)" >&2; exit 1; }
done
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
ncpu=$(nproc)
conns_list=${TLS_BENCH_CONNS:-256}
sizes=${TLS_BENCH_SIZES:-16384 262144 1048576}
suites=${TLS_BENCH_SUITES:-TLS_AES_256_GCM_SHA384 TLS_CHACHA20_POLY1305_SHA256}
workers=${TLS_BENCH_WORKERS:-$ncpu}
if [ -z "${TLS_BENCH_CONFIGS:-}" ]; then
  TLS_BENCH_CONFIGS="default cpu host"
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    TLS_BENCH_CONFIGS="default cuda cpu host"
  fi
fi
out=${BENCH_OUT:-$build/bench/tls.csv}
mkdir -p "$(dirname "$out")"
hz=$(getconf CLK_TCK)

tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpuprov-tlsbench.XXXXXX")
npid=""
cleanup() {
  if [ -n "$npid" ] && kill -0 "$npid" 2>/dev/null; then kill "$npid"; wait "$npid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

OPENSSL_CONF=/dev/null openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost \
  -keyout "$tmp/key.pem" -out "$tmp/cert.pem" >/dev/null 2>&1
mkdir -p "$tmp/www"
for s in $sizes; do head -c "$s" /dev/urandom > "$tmp/www/body-$s"; done
chmod -R a+rX "$tmp"

# Children of a pid, from /proc.
children() {
  local d
  for d in /proc/[0-9]*; do
    [ "$(awk '{ sub(/.*\) /, ""); print $2 }' "$d/stat" 2>/dev/null)" = "$1" ] && echo "${d#/proc/}"
  done
  return 0
}
# CPU ticks (utime+stime) of nginx: the master and its workers.
nginx_ticks() {
  local p t=0
  for p in "$npid" $(children "$npid"); do
    t=$((t + $(awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$p/stat" 2>/dev/null || echo 0)))
  done
  echo "$t"
}

start_nginx() {   # start_nginx CONFIG SUITE
  local cfg=$1 suite=$2 user="" port
  [ "$(id -u)" = 0 ] && user="user root root;"
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  mkdir -p "$tmp/ng"
  cat > "$tmp/ng/nginx.conf" <<EOF
worker_processes $workers;
daemon off;
pid $tmp/ng/nginx.pid;
error_log $tmp/ng/error.log notice;
$user
env OPENSSL_CONF;
env OPENSSL_MODULES;
env GPUPROV_BACKEND;
env GPUPROV_STATS;
worker_rlimit_nofile 8192;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $tmp/ng/body;
    proxy_temp_path $tmp/ng/proxy;
    fastcgi_temp_path $tmp/ng/fastcgi;
    uwsgi_temp_path $tmp/ng/uwsgi;
    scgi_temp_path $tmp/ng/scgi;
    default_type application/octet-stream;
    keepalive_requests 1000000;
    server {
        listen 127.0.0.1:$port ssl backlog=4096;
        ssl_certificate $tmp/cert.pem;
        ssl_certificate_key $tmp/key.pem;
        ssl_protocols TLSv1.3;
        ssl_conf_command Ciphersuites $suite;
        root $tmp/www;
    }
}
EOF
  : > "$tmp/ng/error.log"
  if [ "$cfg" = default ]; then
    env OPENSSL_CONF=/dev/null "$NGINX" -p "$tmp/ng" -c "$tmp/ng/nginx.conf" -e "$tmp/ng/error.log" &
  else
    env OPENSSL_CONF="$root/config/gpuprov.cnf" OPENSSL_MODULES="$moddir" GPUPROV_BACKEND="$cfg" \
      GPUPROV_STATS=1 "$NGINX" -p "$tmp/ng" -c "$tmp/ng/nginx.conf" -e "$tmp/ng/error.log" &
  fi
  npid=$!
  NPORT=$port
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "tls bench: nginx did not start" >&2; cat "$tmp/ng/error.log" >&2; exit 1
}
stop_nginx() {
  kill -QUIT "$npid"; wait "$npid" 2>/dev/null || true; npid=""
}

cpu_model=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
echo "tls bench: $(openssl version) | $(nginx -v 2>&1 | sed 's/.*: //') | $(wrk --version 2>&1 | head -1 | cut -d' ' -f1-2)"
echo "tls bench: CPU: $cpu_model x $ncpu | nginx workers: $workers | wrk: 2 threads on the same host | ${secs}s per run"
echo "suite,config,connections,size,requests,seconds,req_per_s,MB_per_s,server_cpu_s,server_cpu_s_per_GB,gpuprov_ops,wrk_errors" > "$out"
printf '\n%-30s %-8s %5s %8s %10s %9s %12s %12s %s\n' suite config conns size "req/s" "MB/s" "srv CPU s" "CPU s/GB" "gpuprov ops"
for suite in $suites; do
  for cfg in $TLS_BENCH_CONFIGS; do
    for conns in $conns_list; do
      for size in $sizes; do
        start_nginx "$cfg" "$suite"
        t0=$(nginx_ticks)
        OPENSSL_CONF=/dev/null wrk -t 2 -c "$conns" -d "${secs}s" --timeout 60s \
          "https://127.0.0.1:$NPORT/body-$size" > "$tmp/wrk.out" 2>&1 || true
        t1=$(nginx_ticks)
        stop_nginx
        reqs=$(sed -n 's/^ *\([0-9][0-9]*\) requests in \([0-9.]*\)\([a-z]*\),.*/\1/p' "$tmp/wrk.out")
        dur=$(sed -n 's/^ *[0-9][0-9]* requests in \([0-9.]*\)\([a-z]*\),.*/\1 \2/p' "$tmp/wrk.out")
        errs=$(sed -n 's/^ *Socket errors: //p; s/^ *Non-2xx or 3xx responses: \([0-9]*\)/non2xx \1/p' "$tmp/wrk.out" | tr '\n' ' ')
        if [ -z "$reqs" ]; then
          echo "tls bench: wrk gave no result for $suite $cfg $size:" >&2; cat "$tmp/wrk.out" >&2; continue
        fi
        ops=$(awk '/^gpuprov stats: / { for (i = 3; i <= NF; i++) if ($i ~ /^ops=/) s += substr($i, 5) } END { print s + 0 }' "$tmp/ng/error.log")
        [ "$cfg" = default ] && ops="-"
        read -r rps mbs cpu cpugb secs_run < <(python3 -c '
import sys
reqs, d, unit, size, ticks, hz = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
d = d * {"s": 1, "m": 60, "ms": 0.001}.get(unit, 1)
body = reqs * size
cpu = ticks / hz
print("%.1f %.1f %.2f %.2f %.2f" % (reqs / d, body / d / 1e6, cpu, cpu / (body / 1e9) if body else float("nan"), d))
' "$reqs" ${dur} "$size" $((t1 - t0)) "$hz")
        printf '%-30s %-8s %5s %8s %10s %9s %12s %12s %s %s\n' "$suite" "$cfg" "$conns" "$size" "$rps" "$mbs" "$cpu" "$cpugb" "$ops" "${errs:+(wrk: $errs)}"
        echo "$suite,$cfg,$conns,$size,$reqs,$secs_run,$rps,$mbs,$cpu,$cpugb,$ops,\"$errs\"" >> "$out"
      done
    done
  done
done
echo
echo "tls bench: CSV written to $out"
