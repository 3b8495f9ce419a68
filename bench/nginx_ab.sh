#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# nginx + wrk with a worker per core: gpuprov (OPENSSL_CONF alone) against the default provider, beside the default against itself (A/A), interleaved; medians of the rounds.
#
# usage: bench/nginx_ab.sh [BUILD_DIR]
# Each cell (suite x body size) runs three configurations per round, in an order that rotates from
# round to round (so that drift over a round falls on each in turn):
#   A   the default provider (OPENSSL_CONF=/dev/null);
#   A2  the default provider again: A2/A is the host's own noise (the A/A column);
#   B   gpuprov switched on by OPENSSL_CONF=config/gpuprov.cnf alone (OPENSSL_MODULES=<build>/provider,
#       every GPUPROV_* variable dropped: backend auto, as a user turns it on).
# nginx: TLS 1.3 with one suite, keep-alive, worker_processes = every CPU (NGINX_AB_WORKERS), not
# pinned; wrk (the default provider) on the same host. Per run: requests/s and the server's CPU
# seconds (its master and workers, /proc) per 10^5 requests. Per cell: the medians over the rounds,
# and B/A and A2/A as the medians of the per-round ratios with their range. The verdict column
# applies the issue's target: B/A >= 0.97 where the A/A is within +-3%; a cell whose A/A is not
# says "noisy" instead. Before the timed runs, one short run of B with GPUPROV_STATS=1 checks that
# gpuprov served the records (ops > 0) and reports how many workers opened the GPU (a "gpuprov
# warm-up: open" line) and how many said why they did not ("gpu not opened").
# Environment: NGINX_AB_SUITES ("TLS_AES_256_GCM_SHA384 TLS_CHACHA20_POLY1305_SHA256"),
# NGINX_AB_SIZES ("1024 16384 1048576"), NGINX_AB_ROUNDS (3), NGINX_AB_SECONDS (5), NGINX_AB_CONNS
# (256), NGINX_AB_WORKERS (CPUs), NGINX_AB_WRK_THREADS (CPUs / 4, at least 2), BENCH_OUT (CSV;
# build-dir/bench/nginx_ab.csv).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
moddir="$build/provider"
[ -f "$moddir/gpuprov.so" ] || { echo "nginx_ab: $moddir/gpuprov.so not built" >&2; exit 1; }
. "$root/bench/nginx_lib.sh"
ngx_need nginx wrk python3
for v in $(compgen -e); do
  case $v in GPUPROV_*) unset "$v" ;; esac
done
ncpu=$(nproc)
suites=${NGINX_AB_SUITES:-TLS_AES_256_GCM_SHA384 TLS_CHACHA20_POLY1305_SHA256}
sizes=${NGINX_AB_SIZES:-1024 16384 1048576}
rounds=${NGINX_AB_ROUNDS:-3}
secs=${NGINX_AB_SECONDS:-5}
conns=${NGINX_AB_CONNS:-256}
workers=${NGINX_AB_WORKERS:-$ncpu}
wrk_threads=${NGINX_AB_WRK_THREADS:-$(( ncpu / 4 > 2 ? ncpu / 4 : 2 ))}
out=${BENCH_OUT:-$build/bench/nginx_ab.csv}
mkdir -p "$(dirname "$out")"
hz=$(getconf CLK_TCK)

NGX_TMP=$(mktemp -d "${TMPDIR:-/tmp}/gpuprov-nginxab.XXXXXX")
trap 'ngx_kill; rm -rf "$NGX_TMP"' EXIT
trap 'exit 130' INT TERM
ngx_files $sizes

# start CONFIG SUITE [VAR=VALUE...]
start() {
  local cfg=$1 suite=$2
  shift 2
  case $cfg in
    A|A2) ngx_start "$suite" "$workers" "" OPENSSL_CONF=/dev/null "$@" ;;
    B) ngx_start "$suite" "$workers" "" OPENSSL_CONF="$root/config/gpuprov.cnf" OPENSSL_MODULES="$moddir" "$@" ;;
  esac
}

# One timed run: "REQ_PER_S CPU_S_PER_1E5_REQUESTS" on stdout, or nothing when wrk gave no result.
one_run() {   # CONFIG SUITE SIZE
  local t0 t1
  start "$1" "$2"
  t0=$(ngx_ticks)
  OPENSSL_CONF=/dev/null wrk -t "$wrk_threads" -c "$conns" -d "${secs}s" --timeout 60s \
    "https://127.0.0.1:$NGX_PORT/body-$3" > "$NGX_TMP/wrk.out" 2>&1 || true
  t1=$(ngx_ticks)
  ngx_stop
  wrk_parse "$NGX_TMP/wrk.out"
  if [ -z "$WRK_REQS" ] || [ -n "$WRK_SOCKET" ] || [ "$WRK_NON2XX" != 0 ]; then
    echo "nginx_ab: $1 $2 $3: wrk: ${WRK_REQS:-no result} ${WRK_SOCKET:+socket errors $WRK_SOCKET} non2xx $WRK_NON2XX" >&2
    [ -z "$WRK_REQS" ] && return 0
  fi
  python3 -c '
import sys
reqs, d, unit, ticks, hz = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
d *= {"s": 1, "m": 60, "ms": 0.001}.get(unit, 1)
print("%.1f %.4f" % (reqs / d, ticks / hz / reqs * 1e5))
' "$WRK_REQS" $WRK_DUR $((t1 - t0)) "$hz"
}

echo "nginx_ab: $(openssl version) | $("$NGINX" -v 2>&1 | sed 's/.*: //') | CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//') x $ncpu"
echo "nginx_ab: $workers nginx workers (not pinned), wrk -t $wrk_threads -c $conns -d ${secs}s on the same host, $rounds rounds, gpuprov tree $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"

# The check: gpuprov serves the records, and which workers opened the GPU.
for suite in $suites; do
  start B "$suite" GPUPROV_STATS=1
  OPENSSL_CONF=/dev/null wrk -t 2 -c 16 -d 1s "https://127.0.0.1:$NGX_PORT/body-${sizes%% *}" >/dev/null 2>&1 || true
  ngx_stop
  ops=$(ngx_gpuprov_ops)
  cuda=$(awk '/^gpuprov stats: / { for (i = 3; i <= NF; i++) if ($i ~ /^cuda_ops=/) s += substr($i, 10) } END { print s + 0 }' "$NGX_TMP/ng/error.log")
  opened=$(grep -c '^gpuprov warm-up: open' "$NGX_TMP/ng/error.log" || true)
  kept=$(grep -c '^gpuprov warm-up: gpu not opened' "$NGX_TMP/ng/error.log" || true)
  passthrough=$(grep -c '^gpuprov passthrough' "$NGX_TMP/ng/error.log" || true)
  echo "nginx_ab: check $suite: gpuprov ops=$ops cuda_ops=$cuda; processes that opened the GPU: $opened; that said why not: $kept; passthrough (no GPU here): $passthrough"
  [ "$ops" -gt 0 ] || [ "$passthrough" -gt 0 ] || { echo "nginx_ab: gpuprov served nothing: is OPENSSL_MODULES right?" >&2; exit 1; }
done

echo "suite,size,round,config,req_per_s,cpu_s_per_1e5_req" > "$out"
orders=("A B A2" "B A2 A" "A2 A B")
for suite in $suites; do
  for size in $sizes; do
    for r in $(seq "$rounds"); do
      for cfg in ${orders[$(( (r - 1) % 3 ))]}; do
        res=$(one_run "$cfg" "$suite" "$size")
        [ -n "$res" ] && echo "$suite,$size,$r,$cfg,${res// /,}" >> "$out"
      done
    done
  done
done

python3 - "$out" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
cells = {}
for r in rows:
    cells.setdefault((r["suite"], int(r["size"])), {}).setdefault(int(r["round"]), {})[r["config"]] = r
print()
print("| suite | body | A req/s | A2 req/s | gpuprov req/s | A/A (A2/A) | gpuprov/A | CPU s per 1e5 req, A / gpuprov | verdict |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
for (suite, size), rounds in sorted(cells.items()):
    full = [v for v in rounds.values() if all(c in v for c in ("A", "A2", "B"))]
    if not full:
        continue
    med = lambda c, k="req_per_s": statistics.median(float(v[c][k]) for v in full)
    aa = [float(v["A2"]["req_per_s"]) / float(v["A"]["req_per_s"]) for v in full]
    ab = [float(v["B"]["req_per_s"]) / float(v["A"]["req_per_s"]) for v in full]
    maa, mab = statistics.median(aa), statistics.median(ab)
    verdict = ("met" if mab >= 0.97 else "MISSED") if abs(maa - 1) <= 0.03 else "noisy (A/A off by more than 3%)"
    body = f"{size // 1048576} MiB" if size >= 1048576 else f"{size // 1024} KiB" if size >= 1024 else f"{size} B"
    print(f"| {suite} | {body} | {med('A'):.0f} | {med('A2'):.0f} | {med('B'):.0f} | {maa:.3f} [{min(aa):.2f}–{max(aa):.2f}] "
          f"| {mab:.3f} [{min(ab):.2f}–{max(ab):.2f}] | {med('A', 'cpu_s_per_1e5_req'):.2f} / {med('B', 'cpu_s_per_1e5_req'):.2f} | {verdict} |")
print()
print(f"nginx_ab: CSV written to {sys.argv[1]}")
PY
