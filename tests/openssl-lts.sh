#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The unit, kat, evp and integration suites and the fuzz regressions and fixed walk against OpenSSL 3.5 LTS, built from Debian 13's source package.
#
# usage: tests/openssl-lts.sh
#   LTS_STEPS: the steps to run, default "openssl suites fuzz" (openssl: fetch and build OpenSSL,
#     reused while build-openssl35/prefix holds a working build of the chosen version; suites: meson
#     build build-ossl35, the suites LTS_SUITES names, default "unit kat evp integration" (tls and
#     soak pass too, in two more minutes); fuzz: tests/fuzz/run.sh on the host and cpu executors in
#     build-fuzz-ossl35, as tests/run-all.sh runs it).
#   WYCHEPROOF_DIR: the vectors (tests/run-all.sh passes its own); FUZZ_RUNS, FUZZ_SEED, FUZZ_SECONDS
#     as in tests/run-all.sh.
#   LTS_ARCHIVE, LTS_SECURITY_ARCHIVE: the Debian archive and security archive to take the source
#     package from; by default those this Debian machine's apt already uses for its own release.
# The tarball comes through a private apt configuration (sources, lists and cache under
# build-openssl35/apt): the system's apt lists and its OpenSSL stay as they are. Versions 3.5.* are
# tried newest first (the archive may answer 404 for some files of a listed version); the first whose
# upstream tarball arrives, with the SHA-256 of the signed Sources index, is built. None: exit 1.
# Every step runs; the exit status is 0 only if all passed.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
series=3.5
top=$root/build-openssl35
prefix=$top/prefix
steps=${LTS_STEPS:-openssl suites fuzz}
status=0
say() { echo "openssl-lts: $*"; }
die() { echo "openssl-lts: $*" >&2; exit 1; }
want() { case " $steps " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
mkdir -p "$top"

# OpenSSL 3.5 in $prefix.
if want openssl; then
  keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  [ -f "$keyring" ] || die "no $keyring (package debian-archive-keyring)"
  # The archives this Debian machine's apt takes its own release from (its mirror, if it has one).
  codename=$(. /etc/os-release 2>/dev/null && [ "${ID:-}" = debian ] && echo "${VERSION_CODENAME:-}")
  targets=$(apt-get indextargets --format '$(REPO_URI) $(RELEASE)' 2>/dev/null | sort -u)
  archive=${LTS_ARCHIVE:-$(awk -v r="$codename" 'r != "" && $2 == r {print $1; exit}' <<< "$targets")}
  security=${LTS_SECURITY_ARCHIVE:-$(awk -v r="$codename-security" '$2 == r {print $1; exit}' <<< "$targets")}
  [ -n "$archive" ] && [ -n "$security" ] \
    || die "no Debian archive and security archive in this machine's apt sources: set LTS_ARCHIVE and LTS_SECURITY_ARCHIVE, or OPENSSL_LTS=0 to leave this out of tests/run-all.sh"
  apt_dir=$top/apt
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$top/src"
  printf 'deb-src [signed-by=%s] %s trixie main\ndeb-src [signed-by=%s] %s trixie-security main\n' \
    "$keyring" "$archive" "$keyring" "$security" > "$apt_dir/sources.list"
  apt_opts=(-o Dir::Etc::SourceList="$apt_dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
            -o Dir::State::Lists="$apt_dir/lists" -o Dir::Cache="$apt_dir/cache")
  apt-get "${apt_opts[@]}" update > "$apt_dir/update.log" 2>&1 \
    || { cat "$apt_dir/update.log"; die "apt-get update of Debian 13's sources failed"; }
  apt-cache "${apt_opts[@]}" showsrc openssl > "$apt_dir/showsrc.txt" 2>&1 \
    || { cat "$apt_dir/showsrc.txt"; die "apt-cache showsrc openssl failed"; }
  versions=$(sed -n "s/^Version: \(${series//./\\.}\.\)/\1/p" "$apt_dir/showsrc.txt" | sort -Vru | tr '\n' ' ')
  [ -n "$versions" ] || die "Debian 13's sources list no openssl $series.*"
  say "openssl $series.* in Debian 13's sources, newest first: $versions"
  version=""
  for v in $versions; do
    up=${v#*:}; up=${up%-*}
    tarball=$top/src/openssl_$up.orig.tar.gz
    sha=$(awk -v v="$v" -v f="openssl_$up.orig.tar.gz" '
      /^Version: / {cur = $2} /^Checksums-Sha256:/ {sec = 1; next} /^[^ ]/ {sec = 0}
      sec && cur == v && $3 == f {print $1; exit}' "$apt_dir/showsrc.txt")
    # The .dsc and .debian.tar.xz are not needed: their failures are ignored.
    (cd "$top/src" && apt-get "${apt_opts[@]}" source --download-only "openssl=$v") > "$top/src/apt-source.log" 2>&1
    if [ -n "$sha" ] && [ -f "$tarball" ] && [ "$(sha256sum < "$tarball" | cut -d' ' -f1)" = "$sha" ]; then
      version=$v; break
    fi
    say "$v: no verified openssl_$up.orig.tar.gz: $(grep -E '^(E|Err):' "$top/src/apt-source.log" | grep -m1 -o 'orig.tar.gz.*' || grep -m1 -E '^(E|Err):' "$top/src/apt-source.log")"
    rm -f "$tarball"
  done
  [ -n "$version" ] || die "no openssl $series.* upstream tarball could be fetched from Debian 13's archive (tried: $versions)"
  say "using $version ($tarball, sha256 $sha)"

  # Its own OPENSSLDIR: no openssl.cnf of the machine's is read where a test sets no OPENSSL_CONF.
  config=(shared no-tests no-docs --prefix="$prefix" --libdir=lib --openssldir="$prefix/ssl")
  stamp=$prefix/.built-from
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$sha ${config[*]}" ] && [ -f "$prefix/lib/pkgconfig/libcrypto.pc" ] \
     && [[ "$(LD_LIBRARY_PATH=$prefix/lib "$prefix/bin/openssl" version 2>/dev/null)" == "OpenSSL $up "* ]]; then
    say "reusing the build in $prefix"
  else
    start=$SECONDS
    src=$top/openssl-$up
    rm -rf "$src" "$prefix"
    mkdir -p "$src"
    tar -xzf "$tarball" -C "$src" --strip-components=1 || die "cannot unpack $tarball"
    say "building OpenSSL $up into $prefix (log: $top/build.log)"
    if (cd "$src" && ./Configure "${config[@]}" && make -j"$(nproc)" && make install_sw) > "$top/build.log" 2>&1; then
      echo "$sha ${config[*]}" > "$stamp"
      rm -rf "$src"
      say "built OpenSSL $up in $((SECONDS - start)) s"
    else
      tail -40 "$top/build.log"; die "building OpenSSL $up failed (log: $top/build.log)"
    fi
  fi
fi

# Everything below takes 3.5: its headers and libcrypto (pkg-config), its openssl binary (PATH, found
# by tests/integration/meson.build at setup), its libraries at run time (LD_LIBRARY_PATH).
[ -x "$prefix/bin/openssl" ] || die "no OpenSSL in $prefix: run the openssl step first"
export PATH=$prefix/bin:$PATH
export LD_LIBRARY_PATH=$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
say "$(command -v openssl): $(openssl version)"
# Fails unless every named file loads libcrypto.so.3 from $prefix/lib.
check_libcrypto() {
  local f lib
  for f in "$@"; do
    lib=$(ldd "$f" | awk '$1 == "libcrypto.so.3" {print $3}')
    [ "$lib" = "$prefix/lib/libcrypto.so.3" ] || { say "$f loads libcrypto from ${lib:-nowhere}, not $prefix/lib"; return 1; }
  done
}

if want suites; then
  wp=${WYCHEPROOF_DIR:-}
  [ -z "$wp" ] && [ -f "$root/../shared/vectors/wycheproof/aes_gcm_test.json" ] && wp=$root/../shared/vectors/wycheproof
  [ -n "$wp" ] || say "no Wycheproof vectors (WYCHEPROOF_DIR): those tests will be skipped"
  # No CUDA: without a GPU no test runs the kernels or the cuda executor, and nvcc takes longer than
  # the rest of this build many times over.
  build="build-ossl35"
  opts=(-Dcuda=disabled -Dwycheproof_dir="$wp" -Dpkg_config_path="$prefix/lib/pkgconfig")
  if [ -d "$build/meson-private" ]; then meson setup "$build" --reconfigure "${opts[@]}" >/dev/null
  else meson setup "$build" "${opts[@]}" >/dev/null; fi || die "meson setup $build failed"
  start=$SECONDS
  if ninja -C "$build" > "$build/ninja.log" 2>&1; then
    say "$build built in $((SECONDS - start)) s against libcrypto $(pkg-config --modversion libcrypto)"
    # The module really loads into 3.5's openssl and serves.
    check_libcrypto "$build/provider/gpuprov.so" "$build/tests/kat/test_kat" "$(command -v openssl)" || status=1
    OPENSSL_CONF=$root/config/gpuprov.cnf OPENSSL_MODULES=$root/$build/provider openssl list -providers \
      > "$build/list-providers.log" 2>&1
    cat "$build/list-providers.log"
    awk '$1 == "gpuprov" && NF == 1 {g = 1; next} NF == 1 {g = 0} g && /status: active/ {ok = 1} END {exit !ok}' \
      "$build/list-providers.log" || { say "gpuprov is not active in $(openssl version)"; status=1; }
    start=$SECONDS
    suites=${LTS_SUITES:-unit kat evp integration}
    # shellcheck disable=SC2046,SC2086  # one --suite per word
    meson test -C "$build" $(printf -- '--suite %s ' $suites) --no-suite gpu \
      --print-errorlogs --num-processes 2 || status=1
    say "suites ($suites) against $(openssl version -v): $((SECONDS - start)) s"
  else
    tail -40 "$build/ninja.log"; say "building gpuprov against OpenSSL $series failed"; status=1
  fi
fi

if want fuzz; then
  # tests/fuzz/run.sh sets its build up with clang and pkg-config: the exported PKG_CONFIG_PATH points
  # it at 3.5's headers and libcrypto.
  for ex in host cpu; do
    start=$SECONDS
    runs=${FUZZ_RUNS:-$([ $ex = host ] && echo 70000 || echo 200000)}
    FUZZ_FRESH=1 FUZZ_RUNS=$runs FUZZ_ARGS="-seed=${FUZZ_SEED:-2} ${FUZZ_ARGS:-}" \
      bash tests/fuzz/run.sh "$ex" "${FUZZ_SECONDS:-150}" build-fuzz-ossl35 || status=1
    [ $ex = host ] && { check_libcrypto build-fuzz-ossl35/tests/fuzz/fuzz_evp_diff build-fuzz-ossl35/provider/test-module/gpuprov.so || status=1; }
    say "fuzz $ex against $(openssl version -v): $((SECONDS - start)) s"
  done
fi

if [ $status -eq 0 ]; then say "all passed against $(openssl version -v)"; else say "FAILED against $(openssl version -v)"; fi
exit $status
