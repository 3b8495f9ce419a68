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
. "$root/bench/nginx_lib.sh"
ngx_need nginx wrk python3
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

NGX_TMP=$(mktemp -d "${TMPDIR:-/tmp}/gpuprov-tlsbench.XXXXXX")
trap 'ngx_kill; rm -rf "$NGX_TMP"' EXIT
trap 'exit 130' INT TERM
ngx_files $sizes

# start_nginx CONFIG SUITE: the default provider (no configuration), or gpuprov on one executor.
start_nginx() {
  if [ "$1" = default ]; then
    ngx_start "$2" "$workers" "" OPENSSL_CONF=/dev/null
  else
    ngx_start "$2" "$workers" "" OPENSSL_CONF="$root/config/gpuprov.cnf" OPENSSL_MODULES="$moddir" \
      GPUPROV_BACKEND="$1" GPUPROV_STATS=1
  fi
}

cpu_model=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
echo "tls bench: $(openssl version) | $("$NGINX" -v 2>&1 | sed 's/.*: //') | $(wrk --version 2>&1 | head -1 | cut -d' ' -f1-2)"
echo "tls bench: CPU: $cpu_model x $ncpu | nginx workers: $workers | wrk: 2 threads on the same host | ${secs}s per run"
echo "suite,config,connections,size,requests,seconds,req_per_s,MB_per_s,server_cpu_s,server_cpu_s_per_GB,gpuprov_ops,wrk_errors" > "$out"
printf '\n%-30s %-8s %5s %8s %10s %9s %12s %12s %s\n' suite config conns size "req/s" "MB/s" "srv CPU s" "CPU s/GB" "gpuprov ops"
for suite in $suites; do
  for cfg in $TLS_BENCH_CONFIGS; do
    for conns in $conns_list; do
      for size in $sizes; do
        start_nginx "$cfg" "$suite"
        t0=$(ngx_ticks)
        OPENSSL_CONF=/dev/null wrk -t 2 -c "$conns" -d "${secs}s" --timeout 60s \
          "https://127.0.0.1:$NGX_PORT/body-$size" > "$NGX_TMP/wrk.out" 2>&1 || true
        t1=$(ngx_ticks)
        ngx_stop
        wrk_parse "$NGX_TMP/wrk.out"
        reqs=$WRK_REQS dur=$WRK_DUR
        errs=$WRK_SOCKET
        [ "$WRK_NON2XX" != 0 ] && errs="$errs non2xx $WRK_NON2XX"
        if [ -z "$reqs" ]; then
          echo "tls bench: wrk gave no result for $suite $cfg $size:" >&2; cat "$NGX_TMP/wrk.out" >&2; continue
        fi
        ops=$(ngx_gpuprov_ops)
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
