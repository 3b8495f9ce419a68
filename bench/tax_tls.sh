#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One nginx + wrk measurement (or its check) for bench/tax: nginx with the default provider or with gpuprov switched on by OPENSSL_CONF alone; key=value lines on stdout.
#
# usage: bench/tax_tls.sh run|verify --config default|gpuprov --suite SUITE --size BYTES
#          [--seconds S] [--conns C] [--workers W] [--nginx-cpus LIST] [--wrk-cpus LIST]
#          [--wrk-threads T] [--build DIR] [--workdir DIR] [--openssl-bin PATH]
# run:    nginx (W workers, under taskset -c LIST when given) serves one body to wrk (T threads, C
#         keep-alive connections, its own taskset) for S seconds; prints requests=, duration=,
#         non2xx=, socket_errors=, server_cpu_s= and wrk's summary under "wrk:" lines.
# verify: the same nginx, with GPUPROV_STATS=1; prints the suite a stock `openssl s_client`
#         negotiated (cipher=), curl's status and body length (http=, body_bytes=, body_matches=)
#         and, after a graceful stop, the gpuprov stats lines of nginx's processes.
# --openssl-bin: the openssl that makes the certificate and runs s_client (default: openssl on PATH);
# bench/tax passes its --openssl's, with LD_LIBRARY_PATH at that installation's libraries for all.
# Clients (wrk, s_client, curl) always run with the default provider (OPENSSL_CONF=/dev/null). The
# gpuprov configuration is config/gpuprov.cnf with OPENSSL_MODULES=<build>/provider and no GPUPROV_*
# knob: every GPUPROV_* variable of the caller's environment is dropped.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/bench/nginx_lib.sh"

action=${1:-}
[ "$action" = run ] || [ "$action" = verify ] || { sed -n '5,18p' "$0" >&2; exit 2; }
shift
config="" suite="" size="" secs=5 conns=16 workers=1 nginx_cpus="" wrk_cpus="" wrk_threads=1
build="$root/build" workdir="" NGX_OPENSSL=openssl
while [ $# -gt 0 ]; do
  case $1 in
    --config) config=$2 ;;
    --suite) suite=$2 ;;
    --size) size=$2 ;;
    --seconds) secs=$2 ;;
    --conns) conns=$2 ;;
    --workers) workers=$2 ;;
    --nginx-cpus) nginx_cpus=$2 ;;
    --wrk-cpus) wrk_cpus=$2 ;;
    --wrk-threads) wrk_threads=$2 ;;
    --build) build=$2 ;;
    --workdir) workdir=$2 ;;
    --openssl-bin) NGX_OPENSSL=$2 ;;
    *) echo "tax_tls: unknown argument $1" >&2; exit 2 ;;
  esac
  shift 2
done
[ -n "$suite" ] && [ -n "$size" ] || { echo "tax_tls: --suite and --size are required" >&2; exit 2; }
ngx_need nginx wrk curl python3

for v in $(compgen -e); do
  case $v in GPUPROV_*) unset "$v" ;; esac
done
case $config in
  default) server_env=(OPENSSL_CONF=/dev/null) ;;
  gpuprov)
    moddir=$(cd "$build/provider" && pwd)
    [ -f "$moddir/gpuprov.so" ] || { echo "tax_tls: $moddir/gpuprov.so not built" >&2; exit 1; }
    server_env=(OPENSSL_CONF="$root/config/gpuprov.cnf" OPENSSL_MODULES="$moddir") ;;
  *) echo "tax_tls: --config default|gpuprov" >&2; exit 2 ;;
esac
# verify: stats on in both configurations, so that a gpuprov loaded where it should not be shows.
[ "$action" = verify ] && server_env+=(GPUPROV_STATS=1)

if [ -n "$workdir" ]; then
  NGX_TMP=$workdir
  trap 'ngx_kill' EXIT
else
  NGX_TMP=$(mktemp -d "${TMPDIR:-/tmp}/gpuprov-tax.XXXXXX")
  trap 'ngx_kill; rm -rf "$NGX_TMP"' EXIT
fi
trap 'exit 130' INT TERM
ngx_files "$size"
ngx_start "$suite" "$workers" "$nginx_cpus" "${server_env[@]}"
url="https://127.0.0.1:$NGX_PORT/body-$size"

if [ "$action" = run ]; then
  pin=()
  [ -n "$wrk_cpus" ] && pin=(taskset -c "$wrk_cpus")
  t0=$(ngx_ticks)
  OPENSSL_CONF=/dev/null "${pin[@]}" wrk -t "$wrk_threads" -c "$conns" -d "${secs}s" --timeout 60s \
    "$url" > "$NGX_TMP/wrk.out" 2>&1 || true
  t1=$(ngx_ticks)
  ngx_stop
  wrk_parse "$NGX_TMP/wrk.out"
  echo "requests=$WRK_REQS"
  echo "duration=$WRK_DUR"
  echo "non2xx=$WRK_NON2XX"
  echo "socket_errors=$WRK_SOCKET"
  echo "server_cpu_s=$(awk -v t=$((t1 - t0)) -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f", t / hz }')"
  sed 's/^/wrk: /' "$NGX_TMP/wrk.out"
else
  # No -ciphersuites: the client offers OpenSSL's default TLS 1.3 suites, as wrk does, so the
  # suite printed is the one the server's ssl_conf_command chose.
  cipher=$(OPENSSL_CONF=/dev/null timeout 20 "$NGX_OPENSSL" s_client -connect "127.0.0.1:$NGX_PORT" -brief \
             </dev/null 2>&1 | sed -n 's/^Ciphersuite: *//p')
  echo "cipher=$cipher"
  echo "http=$(OPENSSL_CONF=/dev/null curl -sk --max-time 20 -o "$NGX_TMP/got" -w '%{http_code}' "$url" || true)"
  echo "body_bytes=$(stat -c %s "$NGX_TMP/got" 2>/dev/null || echo 0)"
  cmp -s "$NGX_TMP/got" "$NGX_TMP/www/body-$size" && echo "body_matches=1" || echo "body_matches=0"
  ngx_stop
  grep -E '^gpuprov (stats|passthrough): ' "$NGX_TMP/ng/error.log" || true
fi
