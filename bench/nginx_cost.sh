#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Instructions per nginx response (nginx in one process under callgrind, keep-alive requests from curl): the default provider against gpuprov, per function where they differ.
#
# usage: bench/nginx_cost.sh [BUILD_DIR] [SUITE] [BODY] [TOP]
#   defaults: build TLS_AES_256_GCM_SHA384 16384 25. nginx (master_process off: the one process
#   serves, so callgrind sees every instruction of the server) serves BODY bytes over TLS 1.3 with
#   one suite to curl (the default provider) on one keep-alive connection, N1 and then N2 requests
#   per configuration; the difference divided by N2 - N1 is one response's cost, start-up and the
#   handshake cancelled. Prints the totals, gpuprov.so's own share and the TOP functions whose self
#   instructions differ most ("default gpuprov difference object function").
#   gpuprov: config/gpuprov.cnf, OPENSSL_MODULES=<build>/provider and the GPUPROV_* variables of the
#   caller's environment (none: backend auto, as a user turns it on). On a GPU host that is the cpu
#   lane unless the process opens the GPU; on a host without one, passthrough, unless
#   GPUPROV_HYBRID_GPU=host makes the host executor stand in for a GPU (then the cpu lane).
#   Needs nginx, curl, valgrind and python3; a GPU host with no perf runs it as well (apt-get
#   install valgrind).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}; suite=${2:-TLS_AES_256_GCM_SHA384}; body=${3:-16384}; top=${4:-25}
case $build in /*) ;; *) build=$root/$build ;; esac
. "$root/bench/nginx_lib.sh"
ngx_need nginx curl valgrind python3
[ -f "$build/provider/gpuprov.so" ] || { echo "nginx_cost: $build/provider/gpuprov.so not built" >&2; exit 1; }
if [ "$body" -ge 262144 ]; then n1=10; n2=40; else n1=100; n2=600; fi
NGX_TMP=$(mktemp -d "${TMPDIR:-/tmp}/gpuprov-nginxcost.XXXXXX")
trap 'ngx_kill; rm -rf "$NGX_TMP"' EXIT
ngx_files "$body"
envlines="env OPENSSL_CONF; env OPENSSL_MODULES;"
for v in $(compgen -e); do
  case $v in GPUPROV_*) envlines="$envlines env $v;" ;; esac
done

# serve CONF N OUT: nginx under callgrind for N requests; the per-function self costs in OUT.fn.
serve() {
  local port user="" envs
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  [ "$(id -u)" = 0 ] && user="user root root;"
  mkdir -p "$NGX_TMP/ng"
  cat > "$NGX_TMP/ng/nginx.conf" <<EOC
master_process off; daemon off; worker_processes 1;
pid $NGX_TMP/ng/nginx.pid; error_log $NGX_TMP/ng/error.log notice; $user
$envlines
events { worker_connections 64; }
http {
    access_log off; client_body_temp_path $NGX_TMP/ng/body; proxy_temp_path $NGX_TMP/ng/proxy;
    fastcgi_temp_path $NGX_TMP/ng/fastcgi; uwsgi_temp_path $NGX_TMP/ng/uwsgi; scgi_temp_path $NGX_TMP/ng/scgi;
    default_type application/octet-stream; keepalive_requests 1000000;
    server {
        listen 127.0.0.1:$port ssl; ssl_certificate $NGX_TMP/cert.pem; ssl_certificate_key $NGX_TMP/key.pem;
        ssl_protocols TLSv1.3; ssl_conf_command Ciphersuites $suite; root $NGX_TMP/www;
    }
}
EOC
  if [ "$1" = default ]; then envs=(OPENSSL_CONF=/dev/null)
  else envs=(OPENSSL_CONF="$root/config/gpuprov.cnf" OPENSSL_MODULES="$build/provider"); fi
  env "${envs[@]}" valgrind --tool=callgrind --callgrind-out-file="$NGX_TMP/$3" \
    "$NGINX" -p "$NGX_TMP/ng" -c "$NGX_TMP/ng/nginx.conf" -e "$NGX_TMP/ng/error.log" 2>"$NGX_TMP/$3.vg" &
  NGX_PID=$!
  for _ in $(seq 600); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
  for _ in $(seq "$2"); do printf 'url = "https://127.0.0.1:%s/body-%s"\noutput = "/dev/null"\n' "$port" "$body"; done \
    > "$NGX_TMP/curl.cfg"
  OPENSSL_CONF=/dev/null curl -sk --http1.1 -K "$NGX_TMP/curl.cfg" -w '%{http_code}\n' > "$NGX_TMP/codes"
  [ "$(grep -c '^200$' "$NGX_TMP/codes")" = "$2" ] || { echo "nginx_cost: not every request got 200" >&2; exit 1; }
  # SIGTERM: a fast exit, at which callgrind writes its file; under valgrind a signal can be
  # missed while the process sits in epoll_wait, so it is sent until the process is gone.
  for _ in $(seq 120); do kill -TERM "$NGX_PID" 2>/dev/null || break; sleep 0.5; done
  wait "$NGX_PID" 2>/dev/null || true
  NGX_PID=""
  python3 "$root/bench/callgrind_sum.py" --functions "$NGX_TMP/$3" > "$NGX_TMP/$3.fn"
}
serve default $n1 d1; serve default $n2 d2; serve gpuprov $n1 g1; serve gpuprov $n2 g2
python3 "$root/bench/callgrind_diff.py" "$NGX_TMP" $((n2 - n1)) "$top" nginx_cost "$suite $body B" "a response"
