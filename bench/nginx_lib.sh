# SPDX-License-Identifier: Apache-2.0
# nginx + wrk helpers sourced by bench/tls.sh and bench/tax_tls.sh: test certificate and bodies, an
# nginx serving them over TLS 1.3 with one cipher suite, its CPU ticks, wrk's summary parsed.
#
# The caller sets NGX_TMP (a private directory it removes) before use; ngx_start sets NGX_PID and
# NGX_PORT; ngx_stop (or ngx_kill from an EXIT trap) ends that nginx.

NGINX=$(command -v nginx || echo /usr/sbin/nginx)
NGX_OPENSSL=${NGX_OPENSSL:-openssl}   # the openssl that makes the test certificate
NGX_PID=""
NGX_PORT=""

# ngx_need PROGRAM...: exit with the packages to install when one is missing.
ngx_need() {
  local p
  for p in "$@"; do
    command -v "$p" >/dev/null || [ -x "/usr/sbin/$p" ] \
      || { echo "$0: $p not found (apt-get install nginx wrk curl python3)" >&2; exit 1; }
  done
}

# ngx_files SIZE...: a self-signed RSA-2048 certificate and a random body of each size in
# $NGX_TMP/www/body-SIZE; what exists is kept, so that several runs can share one directory.
ngx_files() {
  local s
  mkdir -p "$NGX_TMP/www"
  if [ ! -s "$NGX_TMP/cert.pem" ]; then
    OPENSSL_CONF=/dev/null "$NGX_OPENSSL" req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost \
      -keyout "$NGX_TMP/key.pem" -out "$NGX_TMP/cert.pem" >/dev/null 2>&1
  fi
  for s in "$@"; do
    [ -s "$NGX_TMP/www/body-$s" ] || head -c "$s" /dev/urandom > "$NGX_TMP/www/body-$s"
  done
  chmod -R a+rX "$NGX_TMP"
}

# ngx_start SUITE WORKERS CPUS [VAR=VALUE...]: nginx (master + WORKERS workers) serving $NGX_TMP/www
# over TLS 1.3 with the one cipher suite SUITE, in the environment plus VAR=VALUE, under
# `taskset -c CPUS` unless CPUS is empty. The env lines are those of the README's nginx recipe:
# nginx clears its workers' environment except for the variables named there.
ngx_start() {
  local suite=$1 workers=$2 cpus=$3 user="" pin=()
  shift 3
  [ "$(id -u)" = 0 ] && user="user root root;"
  [ -n "$cpus" ] && pin=(taskset -c "$cpus")
  NGX_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  mkdir -p "$NGX_TMP/ng"
  cat > "$NGX_TMP/ng/nginx.conf" <<EOF
worker_processes $workers;
daemon off;
pid $NGX_TMP/ng/nginx.pid;
error_log $NGX_TMP/ng/error.log notice;
$user
env OPENSSL_CONF;
env OPENSSL_MODULES;
env GPUPROV_BACKEND;
env GPUPROV_STATS;
worker_rlimit_nofile 8192;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $NGX_TMP/ng/body;
    proxy_temp_path $NGX_TMP/ng/proxy;
    fastcgi_temp_path $NGX_TMP/ng/fastcgi;
    uwsgi_temp_path $NGX_TMP/ng/uwsgi;
    scgi_temp_path $NGX_TMP/ng/scgi;
    default_type application/octet-stream;
    keepalive_requests 1000000;
    server {
        listen 127.0.0.1:$NGX_PORT ssl backlog=4096;
        ssl_certificate $NGX_TMP/cert.pem;
        ssl_certificate_key $NGX_TMP/key.pem;
        ssl_protocols TLSv1.3;
        ssl_conf_command Ciphersuites $suite;
        root $NGX_TMP/www;
    }
}
EOF
  : > "$NGX_TMP/ng/error.log"
  env "$@" "${pin[@]}" "$NGINX" -p "$NGX_TMP/ng" -c "$NGX_TMP/ng/nginx.conf" -e "$NGX_TMP/ng/error.log" &
  NGX_PID=$!
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$NGX_PORT") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "$0: nginx did not start" >&2; cat "$NGX_TMP/ng/error.log" >&2; exit 1
}

# ngx_stop: graceful stop (SIGQUIT: workers finish, unload their providers, print gpuprov stats).
ngx_stop() {
  kill -QUIT "$NGX_PID"; wait "$NGX_PID" 2>/dev/null || true; NGX_PID=""
}

# ngx_kill: for EXIT traps; ends the nginx still running, if any.
ngx_kill() {
  if [ -n "$NGX_PID" ] && kill -0 "$NGX_PID" 2>/dev/null; then
    kill "$NGX_PID"; wait "$NGX_PID" 2>/dev/null || true
  fi
  NGX_PID=""
}

# ngx_children PID: the children of a process, from /proc.
ngx_children() {
  local d
  for d in /proc/[0-9]*; do
    [ "$(awk '{ sub(/.*\) /, ""); print $2 }' "$d/stat" 2>/dev/null)" = "$1" ] && echo "${d#/proc/}"
  done
  return 0
}

# ngx_ticks: CPU ticks (utime+stime, getconf CLK_TCK a second) of the nginx master and workers.
ngx_ticks() {
  local p t=0
  for p in "$NGX_PID" $(ngx_children "$NGX_PID"); do
    t=$((t + $(awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$p/stat" 2>/dev/null || echo 0)))
  done
  echo "$t"
}

# ngx_gpuprov_ops: summed ops= of the gpuprov stats lines in nginx's error log (after ngx_stop).
ngx_gpuprov_ops() {
  awk '/^gpuprov stats: / { for (i = 3; i <= NF; i++) if ($i ~ /^ops=/) s += substr($i, 5) }
       END { print s + 0 }' "$NGX_TMP/ng/error.log"
}

# wrk_parse FILE: from wrk's summary, WRK_REQS (requests completed), WRK_DUR ("value unit" of
# the run's length), WRK_NON2XX (non-2xx/3xx responses, 0 when wrk prints none) and WRK_SOCKET
# (its "Socket errors:" line, empty when none). WRK_REQS is empty when wrk gave no summary.
wrk_parse() {
  WRK_REQS=$(sed -n 's/^ *\([0-9][0-9]*\) requests in \([0-9.]*\)\([a-z]*\),.*/\1/p' "$1")
  WRK_DUR=$(sed -n 's/^ *[0-9][0-9]* requests in \([0-9.]*\)\([a-z]*\),.*/\1 \2/p' "$1")
  WRK_NON2XX=$(sed -n 's/^ *Non-2xx or 3xx responses: \([0-9]*\)/\1/p' "$1")
  WRK_NON2XX=${WRK_NON2XX:-0}
  WRK_SOCKET=$(sed -n 's/^ *Socket errors: //p' "$1")
}
