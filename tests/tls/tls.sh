#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# TLS integration: s_server and nginx serve, curl and s_client fetch, gpuprov turned on by OPENSSL_CONF alone.
#
# usage: tls.sh MODE
#   sserver  openssl s_server -WWW with gpuprov; curl and s_client with gpuprov fetch each body size
#            over each suite
#   nginx    nginx (2 worker processes, gpuprov through the master's OPENSSL_CONF) instead of s_server
#   interop  nginx with gpuprov against curl and s_client on the default provider only, and s_server
#            on the default provider only against curl and s_client with gpuprov
#   tamper   a relay flips one byte of one application-data record: the receiver with gpuprov
#            (curl, s_client, s_server) fails with bad_record_mac and delivers nothing of that record
# Every body is compared by sha256; every process that loads gpuprov runs with GPUPROV_STATS=1 and its
# stats line (servers: at exit) must show more gpuprov operations than TLS records, all on the
# executor of this run; every peer that must not load gpuprov must print no stats line.
#
# Environment (set by tests/tls/meson.build): GPTEST_SOURCE_ROOT, OPENSSL_MODULES (the dir of
# gpuprov.so), GPUPROV_BACKEND (the executor), GPTEST_OPENSSL, GPTEST_NGINX, GPTEST_CURL,
# GPTEST_PYTHON; GPTEST_SANITIZER_PRELOAD in sanitized builds (preloaded into the processes that load
# gpuprov, as tests/integration/openssl-sanitized.sh does). TLS_SIZES overrides the body sizes;
# GPTEST_KEEP_TMP=1 keeps the temp dir.
set -u
# The gpu suite's runs skip (exit 77, meson's "skipped") on a machine without a GPU.
if [ "${GPTEST_NEEDS_GPU:-0}" = 1 ] && [ ! -e /dev/nvidiactl ]; then
    echo "SKIP: no NVIDIA GPU on this machine (the gpu suite needs one)"; exit 77
fi

MODE=${1:?usage: tls.sh sserver|nginx|interop|tamper}
SRC=${GPTEST_SOURCE_ROOT:?GPTEST_SOURCE_ROOT is not set}
MODDIR=${OPENSSL_MODULES:?OPENSSL_MODULES is not set}
EXECUTOR=${GPUPROV_BACKEND:-}
OPENSSL=${GPTEST_OPENSSL:-openssl}
NGINX=${GPTEST_NGINX:-nginx}
CURL=${GPTEST_CURL:-curl}
PY=${GPTEST_PYTHON:-python3}
TOOL=$SRC/tests/tls/tlstool.py
CONF=$SRC/config/gpuprov.cnf
PRELOAD=${GPTEST_SANITIZER_PRELOAD:-}
SIZES=${TLS_SIZES:-0 1 1024 16385 10485760}
TAMPER_SIZE=262144
# proto:suite:overhead (ciphertext bytes per record beyond the plaintext; the relay needs it)
SUITES="tls13:TLS_AES_128_GCM_SHA256:17 tls13:TLS_AES_256_GCM_SHA384:17
tls13:TLS_CHACHA20_POLY1305_SHA256:17 tls12:ECDHE-RSA-AES128-GCM-SHA256:24
tls12:ECDHE-RSA-AES256-GCM-SHA384:24 tls12:ECDHE-RSA-CHACHA20-POLY1305:16"
unset OPENSSL_CONF GPUPROV_STATS

for prog in "$OPENSSL" "$PY"; do
    command -v "$prog" >/dev/null || { echo "FAIL: $prog not found"; exit 1; }
done
if [ "$MODE" != sserver ] && ! command -v "$NGINX" >/dev/null; then
    echo "SKIP: nginx not found (tests/install-deps.sh installs nginx)"; exit 77
fi
if ! command -v "$CURL" >/dev/null; then
    echo "SKIP: curl not found (tests/install-deps.sh installs it)"; exit 77
fi
if [ ! -f "$MODDIR/gpuprov.so" ]; then
    echo "FAIL: $MODDIR/gpuprov.so does not exist: build the provider first"; exit 1
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpuprov-tls-$MODE.XXXXXX") || exit 1
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do
        kill -0 "$p" 2>/dev/null && kill "$p" 2>/dev/null
    done
    for p in "${PIDS[@]}"; do
        wait "$p" 2>/dev/null
    done
    if [ "${GPTEST_KEEP_TMP:-0}" = 1 ]; then echo "kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
failures=0
passes=0

fail() {   # fail MESSAGE [FILE...]: report with the (text) files, go on
    echo "FAIL: $1"
    shift
    for f in "$@"; do
        [ -f "$f" ] || continue
        echo "----- $(basename "$f") (last 60 lines):"
        tail -n 60 "$f" | cut -c1-400
    done
    [ $# -gt 0 ] && echo "-----"
    failures=$((failures + 1))
}
pass() {
    passes=$((passes + 1))
    [ -n "${VERBOSE:-}" ] && echo "ok: $1"
    return 0
}

# curl with libasan preloaded hangs in setlocale() at start-up, with or without gpuprov (Debian 12,
# gcc 12, curl 7.88: `LD_PRELOAD=libasan.so curl --version` never returns). In sanitized builds the
# curl clients that would load gpuprov are skipped (reported); s_client, s_server and nginx run
# the sanitized module, and curl still runs as the plain peer.
skips=0
curl_gp_skipped() {   # CASE: true (and a note) when this curl-with-gpuprov case cannot run here
    [ -n "$PRELOAD" ] || return 1
    echo "skip: $1: curl cannot run with the sanitizer runtime preloaded"
    skips=$((skips + 1))
    return 0
}

# Processes that load gpuprov ("gp") and those that must not ("plain").
GP_ENV=(env OPENSSL_CONF="$CONF" OPENSSL_MODULES="$MODDIR" GPUPROV_STATS=1 GPUPROV_BACKEND="$EXECUTOR")
[ -n "$PRELOAD" ] && GP_ENV+=(LD_PRELOAD="$PRELOAD")
PLAIN_ENV=(env -u LD_PRELOAD OPENSSL_CONF=/dev/null GPUPROV_STATS=1)
side_env() { if [ "$1" = gp ]; then ENVP=("${GP_ENV[@]}"); else ENVP=("${PLAIN_ENV[@]}"); fi; }

# The executor of this run does everything: GPUPROV_BACKEND=host means no cpu ops, and the reverse.
case "$EXECUTOR" in
    host) EXEC_COND=("host_ops>0" "cpu_ops==0" "cuda_ops==0") ;;
    cpu) EXEC_COND=("cpu_ops>0" "host_ops==0" "cuda_ops==0") ;;
    cuda) EXEC_COND=("cuda_ops>0") ;;
    *) EXEC_COND=() ;;
esac

# records SIZE: a lower bound on the records of one fetch that the client and the server both
# process: the response (at least one record: the headers) and the request.
records() { local r=$((($1 + 16383) / 16384)); [ "$r" -lt 1 ] && r=1; echo $((r + 1)); }

# stats_check WHAT FILE LINES RECORDS MINBYTES [COND...]: the gpuprov stats lines of FILE show
# more operations than RECORDS, at least MINBYTES bytes, the executor of this run, no errors.
stats_check() {
    local what=$1 file=$2 lines=$3 recs=$4 minbytes=$5
    shift 5
    local verdict
    if verdict=$("$PY" "$TOOL" stats "$file" "$lines" "ops>$recs" "bytes>=$minbytes" \
            "${EXEC_COND[@]}" "$@" 2>&1); then
        pass "$what: $verdict"
    else
        fail "$what: $verdict (records lower bound $recs)" "$file"
    fi
}
no_stats_check() {   # WHAT FILE: a peer on the default provider only printed no stats line
    if grep -q '^gpuprov stats: ' "$2"; then
        fail "$1: prints a gpuprov stats line, but must run on the default provider only" "$2"
    else
        pass "$1: default provider only (no stats line)"
    fi
}

# wait_exit PID SECONDS: wait for a process we started; 1 (and kill it) when it outlives SECONDS.
wait_exit() {
    local pid=$1 n=$(($2 * 20))
    while kill -0 "$pid" 2>/dev/null && [ "$n" -gt 0 ]; do sleep 0.05; n=$((n - 1)); done
    if kill -0 "$pid" 2>/dev/null; then
        kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; return 1
    fi
    wait "$pid" 2>/dev/null
    return 0
}

# ---- material: a certificate for localhost and the bodies ----
mkdir -p "$tmp/www"
if ! OPENSSL_CONF=/dev/null "$OPENSSL" req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost \
        -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" -keyout "$tmp/key.pem" -out "$tmp/cert.pem" \
        > "$tmp/req.log" 2>&1; then
    fail "cannot make a test certificate" "$tmp/req.log"; exit 1
fi
for s in $SIZES; do
    head -c "$s" /dev/urandom > "$tmp/www/body-$s"
done
head -c "$TAMPER_SIZE" /dev/urandom > "$tmp/www/tamper"
chmod -R a+rX "$tmp"   # nginx workers may run as another user

# ---- per suite: TLS options of each program ----
set_suite() {   # proto:suite:overhead
    PROTO=${1%%:*}
    SUITE=${1#*:}
    OVERHEAD=${SUITE#*:}
    SUITE=${SUITE%%:*}
    if [ "$PROTO" = tls13 ]; then
        PROTO_NAME=TLSv1.3
        SERVER_TLS=(-tls1_3 -ciphersuites "$SUITE" -num_tickets 0)
        SCLIENT_TLS=(-tls1_3 -ciphersuites "$SUITE")
        CURL_TLS=(--tlsv1.3 --tls-max 1.3 --tls13-ciphers "$SUITE")
        NGINX_TLS="ssl_protocols TLSv1.3; ssl_conf_command Ciphersuites $SUITE;"
        ALERT_TYPE=23
    else
        PROTO_NAME=TLSv1.2
        SERVER_TLS=(-tls1_2 -cipher "$SUITE")
        SCLIENT_TLS=(-tls1_2 -cipher "$SUITE")
        CURL_TLS=(--tlsv1.2 --tls-max 1.2 --ciphers "$SUITE")
        NGINX_TLS="ssl_protocols TLSv1.2; ssl_ciphers $SUITE;"
        ALERT_TYPE=21
    fi
    ALERT_LEN=$((2 + OVERHEAD))
}

# ---- servers ----
# start_sserver NAME SIDE NACCEPT [ARGS...]: s_server -WWW serving $tmp/www, exits after NACCEPT
# connections; sets SPORT and SPID.
start_sserver() {
    local name=$1 side=$2 n=$3 i
    shift 3
    side_env "$side"
    (cd "$tmp/www" && exec "${ENVP[@]}" "$OPENSSL" s_server -accept 127.0.0.1:0 -cert "$tmp/cert.pem" \
        -key "$tmp/key.pem" -naccept "$n" "${SERVER_TLS[@]}" -WWW "$@") \
        > "$tmp/$name.out" 2> "$tmp/$name.err" < /dev/null &
    SPID=$!
    PIDS+=("$SPID")
    SPORT=""
    for i in $(seq 200); do
        SPORT=$(sed -n 's/^ACCEPT .*:\([0-9][0-9]*\)$/\1/p' "$tmp/$name.out")
        [ -n "$SPORT" ] && return 0
        kill -0 "$SPID" 2>/dev/null || break
        sleep 0.05
    done
    fail "$name: s_server did not start listening" "$tmp/$name.out" "$tmp/$name.err"
    return 1
}

# start_nginx NAME SIDE: nginx with 2 workers serving $tmp/www over the current suite only; sets
# NPORT, NPID (the master), NDIR. The env directives hand OPENSSL_CONF, OPENSSL_MODULES and
# GPUPROV_* to the workers (nginx clears the environment of its workers otherwise).
start_nginx() {
    local name=$1 side=$2 try user="" i
    NDIR=$tmp/$name
    mkdir -p "$NDIR"
    [ "$(id -u)" = 0 ] && user="user root root;"
    side_env "$side"
    for try in 1 2 3 4 5; do
        NPORT=$("$PY" "$TOOL" freeport)
        cat > "$NDIR/nginx.conf" <<EOF
worker_processes 2;
daemon off;
master_process on;
pid $NDIR/nginx.pid;
error_log $NDIR/error.log info;
$user
env OPENSSL_CONF;
env OPENSSL_MODULES;
env GPUPROV_BACKEND;
env GPUPROV_STATS;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $NDIR/body;
    proxy_temp_path $NDIR/proxy;
    fastcgi_temp_path $NDIR/fastcgi;
    uwsgi_temp_path $NDIR/uwsgi;
    scgi_temp_path $NDIR/scgi;
    default_type application/octet-stream;
    keepalive_timeout 5s;
    server {
        listen 127.0.0.1:$NPORT ssl;
        server_name localhost;
        ssl_certificate $tmp/cert.pem;
        ssl_certificate_key $tmp/key.pem;
        $NGINX_TLS
        ssl_session_tickets off;
        ssl_conf_command NumTickets 0;
        root $tmp/www;
    }
}
EOF
        : > "$NDIR/error.log"
        # Sanitized: no leak check in nginx (it leaves its pools to exit), the other checks stay on.
        "${ENVP[@]}" ${PRELOAD:+ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0} "$NGINX" -p "$NDIR" -c "$NDIR/nginx.conf" -e "$NDIR/error.log" \
            > "$NDIR/stdout.log" 2>&1 < /dev/null &
        NPID=$!
        PIDS+=("$NPID")
        for i in $(seq 200); do
            kill -0 "$NPID" 2>/dev/null || break
            if "$PY" "$TOOL" waitport "$NPORT" 0.05 && [ "$("$PY" "$TOOL" children "$NPID" | wc -l)" -ge 2 ]; then
                return 0
            fi
        done
        wait_exit "$NPID" 5
        grep -q 'Address already in use' "$NDIR/error.log" "$NDIR/stdout.log" || break
    done
    fail "$name: nginx did not start" "$NDIR/nginx.conf" "$NDIR/error.log" "$NDIR/stdout.log"
    return 1
}

# nginx_workers_check NAME: each worker (forked from the master, never exec'd) has gpuprov.so mapped.
nginx_workers_check() {
    local w n=0 bad=""
    for w in $("$PY" "$TOOL" children "$NPID"); do
        n=$((n + 1))
        grep -q '/gpuprov\.so$' "/proc/$w/maps" 2>/dev/null || bad="$bad $w"
    done
    if [ "$n" -ge 2 ] && [ -z "$bad" ]; then
        pass "$1: gpuprov.so is mapped in all $n nginx workers"
    else
        fail "$1: nginx workers without gpuprov.so mapped:${bad:- (found $n workers)}" "$NDIR/error.log"
    fi
}

# stop_nginx NAME: graceful stop (SIGQUIT) so that workers and master exit through exit(3) and
# gpuprov prints its stats lines into the error log (nginx points its stderr there).
stop_nginx() {
    kill -QUIT "$NPID" 2>/dev/null
    wait_exit "$NPID" 30 || fail "$1: nginx did not stop within 30 s of SIGQUIT" "$NDIR/error.log"
    if grep -qE 'exited on signal|exited with code [1-9]|ERROR: AddressSanitizer|runtime error:' \
            "$NDIR/error.log"; then
        fail "$1: an nginx process crashed or a sanitizer reported an error" "$NDIR/error.log"
    fi
}

# ---- clients ----
# fetch CASE CLIENT SIDE PORT FILE SIZE SERVERLOG...: fetch /FILE with curl or s_client; the body must
# equal $tmp/www/FILE (sha256), the suite must be the one negotiated, and the client's stats (SIDE gp)
# must show the records went through gpuprov.
fetch() {
    local case=$1 client=$2 side=$3 port=$4 file=$5 size=$6 rc got want
    shift 6
    local out=$tmp/$case.out err=$tmp/$case.err body=$tmp/$case.body
    side_env "$side"
    if [ "$client" = curl ] && [ "$side" = gp ] && curl_gp_skipped "$case"; then
        return
    fi
    SRV_RECORDS=$((SRV_RECORDS + $(records "$size")))   # what the server must have processed
    SRV_BYTES=$((SRV_BYTES + size))
    if [ "$client" = curl ]; then
        echo "+ ${ENVP[*]} $CURL ... ${CURL_TLS[*]} https://localhost:$port/$file" > "$tmp/$case.cmd"
        timeout 120 "${ENVP[@]}" "$CURL" --silent --show-error --verbose --http1.1 \
            --cacert "$tmp/cert.pem" --resolve "localhost:$port:127.0.0.1" "${CURL_TLS[@]}" \
            -o "$body" "https://localhost:$port/$file" > "$out" 2> "$err" < /dev/null
        rc=$?
        if [ "$rc" != 0 ]; then
            fail "$case: curl exit status $rc" "$tmp/$case.cmd" "$err" "$@"; return
        fi
        if ! grep -qF "SSL connection using $PROTO_NAME / $SUITE" "$err"; then
            fail "$case: curl did not negotiate $PROTO_NAME / $SUITE" "$err"; return
        fi
    else
        echo "+ ${ENVP[*]} $OPENSSL s_client -connect 127.0.0.1:$port ${SCLIENT_TLS[*]} (GET /$file)" > "$tmp/$case.cmd"
        printf 'GET /%s HTTP/1.0\r\nHost: localhost\r\n\r\n' "$file" \
            | timeout 120 "${ENVP[@]}" "$OPENSSL" s_client -connect "127.0.0.1:$port" -servername localhost \
                -CAfile "$tmp/cert.pem" -verify_return_error -brief -ign_eof "${SCLIENT_TLS[@]}" \
                > "$out" 2> "$err"
        rc=$?
        if [ "$rc" != 0 ]; then
            fail "$case: s_client exit status $rc" "$tmp/$case.cmd" "$err" "$@"; return
        fi
        if ! grep -qx "Protocol version: $PROTO_NAME" "$err" || ! grep -qx "Ciphersuite: $SUITE" "$err"; then
            fail "$case: s_client did not negotiate $PROTO_NAME / $SUITE" "$err"; return
        fi
        if ! "$PY" "$TOOL" body "$out" "$body" > "$tmp/$case.split" 2>&1; then
            fail "$case: s_client output is no HTTP response" "$tmp/$case.split" "$err" "$@"; return
        fi
    fi
    got=$(sha256sum < "$body" | cut -d' ' -f1)
    want=$(sha256sum < "$tmp/www/$file" | cut -d' ' -f1)
    if [ "$got" = "$want" ]; then
        pass "$case: body of $size bytes identical (sha256 $want)"
    else
        fail "$case: body differs: sha256 $got ($(wc -c < "$body") bytes), want $want ($size bytes)" "$err"
    fi
    if [ "$side" = gp ]; then
        stats_check "$case: client stats" "$err" 1 "$(records "$size")" "$size" "errors==0"
    else
        no_stats_check "$case: client" "$err"
    fi
}

# ---- modes ----
nsizes=$(echo $SIZES | wc -w)

# serve NAME SERVER SERVERSIDE CLIENTSIDE: one server for the suite, both clients fetch every size.
serve() {
    local name=$1 server=$2 sside=$3 cside=$4 s c port log naccept
    SRV_RECORDS=0
    SRV_BYTES=0
    if [ "$server" = sserver ]; then
        naccept=$((2 * nsizes))
        [ "$cside" = gp ] && [ -n "$PRELOAD" ] && naccept=$nsizes   # curl with gpuprov skipped
        start_sserver "$name-server" "$sside" "$naccept" || return
        port=$SPORT
        log=$tmp/$name-server.err
    else
        start_nginx "$name-server" "$sside" || return
        port=$NPORT
        log=$NDIR/error.log
        [ "$sside" = gp ] && nginx_workers_check "$name"
    fi
    for s in $SIZES; do
        for c in curl sclient; do
            fetch "$name-$c-$s" "$c" "$cside" "$port" "body-$s" "$s" "$log"
        done
    done
    if [ "$server" = sserver ]; then
        wait_exit "$SPID" 30 || fail "$name: s_server did not exit after its $naccept connections" "$log"
        lines=1
    else
        stop_nginx "$name"
        lines=3   # two workers and the master
    fi
    if [ "$sside" = gp ]; then
        stats_check "$name: server stats at exit" "$log" "$lines" "$SRV_RECORDS" "$SRV_BYTES" "errors==0"
    else
        no_stats_check "$name: server" "$log"
    fi
}

# tamper_s2c NAME CLIENT: through the relay, the client (gpuprov) receives a tampered response record.
tamper_s2c() {
    local name=$1 client=$2 rpid rport="" i rc offset verdict
    local out=$tmp/$name.out err=$tmp/$name.err report=$tmp/$name.report
    if [ "$client" = curl ] && curl_gp_skipped "$name"; then
        return
    fi
    "$PY" "$TOOL" relay "$NPORT" "$tmp/$name.port" "$report" s2c "$PROTO" "$OVERHEAD" 3 \
        > "$tmp/$name.relay" 2>&1 &
    rpid=$!
    PIDS+=("$rpid")
    for i in $(seq 200); do [ -f "$tmp/$name.port" ] && break; sleep 0.05; done
    rport=$(cat "$tmp/$name.port" 2>/dev/null)
    side_env gp
    if [ "$client" = curl ]; then
        timeout 60 "${ENVP[@]}" "$CURL" --silent --show-error --verbose --http1.1 -i \
            --cacert "$tmp/cert.pem" --resolve "localhost:$rport:127.0.0.1" "${CURL_TLS[@]}" \
            -o "$out" "https://localhost:$rport/tamper" > /dev/null 2> "$err" < /dev/null
        rc=$?
    else
        # HTTP/1.1 keeps the connection open: only the tampered record can end it.
        printf 'GET /tamper HTTP/1.1\r\nHost: localhost\r\n\r\n' \
            | timeout 60 "${ENVP[@]}" "$OPENSSL" s_client -connect "127.0.0.1:$rport" -servername localhost \
                -CAfile "$tmp/cert.pem" -verify_return_error -brief -ign_eof "${SCLIENT_TLS[@]}" \
                -msg -msgfile "$tmp/$name.msg" > "$out" 2> "$err"
        rc=$?
    fi
    wait_exit "$rpid" 30 || fail "$name: relay did not finish" "$tmp/$name.relay"
    check_tampered "$name" "$rc" "$err" "$out" "$tmp/www/tamper" "$report" "$tmp/$name.relay" "$tmp/$name.msg"
    stats_check "$name: client stats" "$err" 1 3 16384
}

# check_tampered NAME RC RECEIVER_ERR DELIVERED EXPECTED REPORT RELAYLOG RECEIVER_MSGFILE
check_tampered() {
    local name=$1 rc=$2 err=$3 out=$4 want=$5 report=$6 rlog=$7 msg=$8 offset verdict
    if [ "$rc" = 0 ] || [ "$rc" = 124 ]; then
        fail "$name: receiver exit status $rc, want a failure (124: timed out)" "$err" "$rlog"
    fi
    # The receiver's own trace of the alert it sent: curl -v ("(OUT), TLS alert, bad record mac"),
    # -msg of s_client and s_server (">>> ... Alert ... fatal bad_record_mac"); and its error:
    # libssl's "decryption failed or bad record mac" (SSL_AD_BAD_RECORD_MAC); curl shows only the
    # first error of the queue: gpuprov's "tag verification failed", or where the record ran on the
    # cpu lane the default provider's own "cipher operation failed" (gpuprov's follows it).
    if grep -q '(OUT), TLS alert, bad record mac' "$err" \
            || grep -q '^>>> .*Alert.*fatal bad_record_mac' "$msg" 2>/dev/null; then
        pass "$name: the receiver sent a fatal bad_record_mac alert"
    else
        fail "$name: no bad_record_mac alert sent by the receiver in its trace" "$err" "$msg" "$rlog"
    fi
    if grep -qi 'decryption failed or bad record mac\|gpuprov::tag verification failed\|Provider routines::cipher operation failed' "$err"; then
        pass "$name: the receiver reports a failed record decryption"
    else
        fail "$name: receiver output reports no failed record decryption" "$err" "$rlog"
    fi
    if offset=$("$PY" "$TOOL" tampered "$report" "$ALERT_TYPE" "$ALERT_LEN" 2>&1); then
        pass "$name: the receiver answered the tampered record with an alert record"
        if verdict=$("$PY" "$TOOL" prefix "$out" "$want" "$offset" 2>&1); then
            pass "$name: $verdict"
        else
            fail "$name: $verdict" "$err"
        fi
    else
        fail "$name: $offset" "$err" "$rlog" "$report"
    fi
}

# tamper_c2s NAME: s_client (default provider) uploads to s_server (gpuprov, echo mode) through the
# relay, which tampers with a record of the upload; s_server must fail and echo a strict prefix.
tamper_c2s() {
    local name=$1 port rpid spid rport="" i
    local report=$tmp/$name.report fifo=$tmp/$name.stdin
    port=$("$PY" "$TOOL" freeport)
    mkfifo "$fifo"
    exec 9<> "$fifo"   # s_server's stdin stays open: it would end the connection at EOF
    side_env gp
    "${ENVP[@]}" "$OPENSSL" s_server -accept "127.0.0.1:$port" -cert "$tmp/cert.pem" -key "$tmp/key.pem" \
        -naccept 1 -quiet -msg -msgfile "$tmp/$name.msg" "${SERVER_TLS[@]}" < "$fifo" > "$tmp/$name-server.out" 2> "$tmp/$name-server.err" &
    spid=$!
    PIDS+=("$spid")
    if ! "$PY" "$TOOL" waitport "$port" 10; then
        exec 9>&-
        fail "$name: s_server did not listen on $port" "$tmp/$name-server.err"; return
    fi
    "$PY" "$TOOL" relay "$port" "$tmp/$name.port" "$report" c2s "$PROTO" "$OVERHEAD" 3 \
        > "$tmp/$name.relay" 2>&1 &
    rpid=$!
    PIDS+=("$rpid")
    for i in $(seq 200); do [ -f "$tmp/$name.port" ] && break; sleep 0.05; done
    rport=$(cat "$tmp/$name.port" 2>/dev/null)
    side_env plain
    timeout 60 "${ENVP[@]}" "$OPENSSL" s_client -connect "127.0.0.1:$rport" -servername localhost \
        -CAfile "$tmp/cert.pem" -verify_return_error -brief -ign_eof "${SCLIENT_TLS[@]}" \
        < "$tmp/www/tamper" > "$tmp/$name-client.out" 2> "$tmp/$name-client.err"
    wait_exit "$rpid" 30 || fail "$name: relay did not finish" "$tmp/$name.relay"
    wait_exit "$spid" 15 || fail "$name: s_server did not exit after the connection" "$tmp/$name-server.err"
    exec 9>&-
    # s_server -naccept 1 exits 0 after a failed connection too: the checks are on its output.
    check_tampered "$name" 1 "$tmp/$name-server.err" "$tmp/$name-server.out" "$tmp/www/tamper" \
        "$report" "$tmp/$name.relay" "$tmp/$name.msg"
    if grep -qi 'alert bad record mac' "$tmp/$name-client.err"; then
        pass "$name: the sender received a bad_record_mac alert"
    else
        fail "$name: the sender's output shows no bad_record_mac alert" "$tmp/$name-client.err"
    fi
    stats_check "$name: server stats" "$tmp/$name-server.err" 1 3 16384
    no_stats_check "$name: client" "$tmp/$name-client.err"
}

start=$(date +%s)
echo "tls.sh $MODE: executor=${EXECUTOR:-(unset)} openssl=$("$OPENSSL" version 2>&1) sizes=[$SIZES]"
[ -n "$PRELOAD" ] && echo "tls.sh: sanitizer runtimes preloaded into gpuprov processes: $PRELOAD"
for spec in $SUITES; do
    set_suite "$spec"
    f0=$failures
    tag=$(echo "$SUITE" | tr 'A-Z_' 'a-z-')
    case "$MODE" in
        sserver) serve "sserver-$tag" sserver gp gp ;;
        nginx) serve "nginx-$tag" nginx gp gp ;;
        interop)
            serve "gpnginx-plainclients-$tag" nginx gp plain
            serve "plainsserver-gpclients-$tag" sserver plain gp
            ;;
        tamper)
            if start_nginx "tamper-nginx-$tag" gp; then
                tamper_s2c "tamper-s2c-curl-$tag" curl
                tamper_s2c "tamper-s2c-sclient-$tag" sclient
                stop_nginx "tamper-nginx-$tag"
            fi
            tamper_c2s "tamper-c2s-sserver-$tag"
            ;;
        *) echo "unknown mode $MODE"; exit 2 ;;
    esac
    if [ "$failures" = "$f0" ]; then
        echo "ok: $PROTO_NAME $SUITE ($MODE)"
    else
        echo "FAILED: $PROTO_NAME $SUITE ($MODE): $((failures - f0)) check(s)"
    fi
done
echo "tls.sh $MODE: $passes checks passed, $failures failed, $skips cases skipped, $(($(date +%s) - start)) s"
[ "$failures" = 0 ]
