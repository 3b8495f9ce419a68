# SPDX-License-Identifier: Apache-2.0
"""The price of loading gpuprov: the default provider against gpuprov switched on by OPENSSL_CONF
alone, side by side in one run, on any host (with or without a GPU).

Two configurations, interleaved cell by cell:
  default   OPENSSL_CONF=/dev/null: the default provider, as a host without gpuprov has it
  gpuprov   OPENSSL_CONF=config/gpuprov.cnf, OPENSSL_MODULES=<build>/provider, no GPUPROV_*
            variable (every one in the caller's environment is dropped): gpuprov as a user turns
            it on, with its default configuration (backend auto; without a GPU, passthrough)

Part speed: one `openssl speed -mr -elapsed -seconds S -bytes N [-aead] [-decrypt]
[-async_jobs A] -evp CIPHER` process per measurement. Modes: stream (speed's update loop on one
context) and aead (-aead: speed's TLS-like record: IV, 13-byte AAD, payload, tag; AEAD ciphers
only, as speed refuses -aead for AES-CTR). Each cell runs --repeat times per configuration, the
two alternating (default, gpuprov, gpuprov, default, ...) so that drift hits both alike.

Part tls: nginx (TLS 1.3, one cipher suite) serves one body to wrk over keep-alive connections
(bench/tax_tls.sh); requests/s, --tls-rounds rounds, configurations interleaved. nginx and wrk are
pinned to separate cores (taskset) where the host has two or more: nginx's workers on the first
half of the usable cores, wrk's threads on the rest (2 cores: 1 worker on core 0, wrk on core 1).
A run counts only when wrk saw no socket error and no non-2xx response.

--openssl PREFIX: both parts under another OpenSSL installation (speed's openssl, and the libssl
and libcrypto of nginx, wrk and curl through LD_LIBRARY_PATH); see --help.

Proof that gpuprov served: before the timed runs, one short run per (cipher, mode, direction,
async_jobs) in the gpuprov configuration with GPUPROV_STATS=1 (only there: the counters cost a
little) must print gpuprov's stats line with at least the bytes speed processed; per TLS suite, a
stock `openssl s_client` must negotiate that suite in both configurations, curl must get the body
intact, and the gpuprov nginx must count operations in its stats lines. A failed check stops the
run: a silent fall-back to the default provider would read as a fake 1.00x.

Figures: per cell, the median and range (min-max) of each configuration's rate and of the
per-repeat ratio gpuprov/default (each against the default run of the same repeat); also the
ratio of work per CPU second (speed: operations per user+sys second of the speed process; tls:
requests per CPU second of nginx's processes): the price in CPU, and a figure from which time
spent waiting for a core on a busy host is left out. Written: a
CSV (one row per run) and a JSON of the run's host and command in --out (default <build>/tax),
and the section between <!-- tax:begin --> and <!-- tax:end --> of bench/RESULTS.md (under the
heading "## Cost of loading gpuprov (bench/tax)", created when absent).
"""

import argparse
import csv
import datetime
import json
import os
import re
import resource
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import (OPENSSL_HELP, ROOT, OpenSSL, csv_list, fmt_dur, host_info, median,
                      openssl_numbers, parse_stats, say, sh, short_version, wrap_prose,
                      write_section)

CIPHERS = ["aes-128-gcm", "aes-256-gcm", "aes-128-ctr", "chacha20-poly1305"]
AEAD_CIPHERS = {"aes-128-gcm", "aes-256-gcm", "chacha20-poly1305"}
PRETTY = {"aes-128-gcm": "AES-128-GCM", "aes-256-gcm": "AES-256-GCM",
          "aes-128-ctr": "AES-128-CTR", "chacha20-poly1305": "ChaCha20-Poly1305"}
SIZES = [16, 64, 256, 1024, 16384]
MODES = ["stream", "aead"]
DIRS = ["enc", "dec"]
ASYNC = [0, 32]
SUITES = ["TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"]
TLS_SIZES = [1024, 16384, 1048576]
CONFIGS = ["default", "gpuprov"]
PARTS = ["speed", "tls"]
HEADING = "## Cost of loading gpuprov (bench/tax)"
BEGIN, END = "<!-- tax:begin -->", "<!-- tax:end -->"
COMPARE_END = "<!-- compare:end -->"
# The CPU path's target (issue 34): gpuprov/default at least this, by message size.
TARGET_SMALL, TARGET = 0.95, 0.97
SMALL_SIZES = (16, 64)
# Seconds a speed or nginx run costs beyond its measured seconds (process start, nginx start and
# graceful stop), for the estimate only.
SPEED_OVERHEAD_S, TLS_OVERHEAD_S = 0.05, 1.0
EXAMPLES = """
Examples:
  bench/tax                                      # the whole matrix (~18 min)
  bench/tax --ciphers aes-256-gcm,chacha20-poly1305 --sizes 16,1024 --dirs enc \\
            --tls-suites TLS_AES_256_GCM_SHA384 --tls-sizes 16384   # a subset (~2.5 min)
  bench/tax --parts tls                          # nginx + wrk only (~2.5 min)
  bench/tax --report-only build/tax/tax.csv      # tables and RESULTS section again
"""
FIELDS = ["date", "part", "cipher", "mode", "dir", "async_jobs", "size", "config", "rep",
          "seconds", "status", "rate", "unit", "count", "wall_s", "connections", "workers",
          "wrk_threads", "nginx_cpus", "wrk_cpus", "cpu_s", "note"]


def size_label(n):
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return "%d MiB" % (n >> 20)
    if n >= 1024 and n % 1024 == 0:
        return "%d KiB" % (n >> 10)
    return "%d B" % n


CPUS = ""    # --cpus: speed runs pinned to these cores (taskset -c)
AA = False   # --aa: both configurations are the default provider (the host's noise floor)
OPENSSL = None   # --openssl: the benchlib.OpenSSL every run uses (set in main)


def clean_env(config, build, stats=False):
    """The environment of a run: the caller's, without any GPUPROV_* variable, plus the
    configuration's OpenSSL variables."""
    env = OPENSSL.env({k: v for k, v in os.environ.items() if not k.startswith("GPUPROV_")})
    if config == "default" or AA:
        env["OPENSSL_CONF"] = "/dev/null"
        env.pop("OPENSSL_MODULES", None)
    else:
        env["OPENSSL_CONF"] = str(ROOT / "config" / "gpuprov.cnf")
        env["OPENSSL_MODULES"] = str(build / "provider")
        if stats:
            env["GPUPROV_STATS"] = "1"
    return env


# ---------------------------------------------------------------------------------------------
# openssl speed

def speed_cmd(cell, seconds):
    cipher, mode, direction, async_jobs, size = cell
    # Not -propquery: 3.0.13's speed would fetch its DRBG with that query too and exit 1;
    # config/gpuprov.cnf prefers gpuprov and keeps the DRBG on the default provider.
    cmd = [OPENSSL.bin, "speed", "-mr", "-elapsed", "-seconds", str(seconds), "-bytes", str(size)]
    if CPUS:
        cmd = ["taskset", "-c", CPUS] + cmd
    if mode == "aead":
        cmd.append("-aead")
    if direction == "dec":
        cmd.append("-decrypt")
    if async_jobs > 0:
        cmd += ["-async_jobs", str(async_jobs)]
    return cmd + ["-evp", cipher]


def run_speed(cell, config, seconds, build, stats=False):
    """One speed process. Returns status ('ok' or what went wrong), rate (bytes/s, speed's +F),
    count (operations, +R), wall seconds, cpu (user+sys seconds of the process and its threads,
    from RUSAGE_CHILDREN: runs are sequential), stderr and the command."""
    cmd = speed_cmd(cell, seconds)
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=clean_env(config, build, stats), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    status = "ok"
    try:
        out, err = proc.communicate(timeout=3 * seconds + 60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        status = "timeout"
    wall = time.monotonic() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    # -mr: "+F:<n>:<name>:<bytes/s per size...>" on stdout (one size here, -bytes N), and
    # "+R:<count>:<name>:<seconds>" on stderr.
    rates = [float(l.split(":")[3]) for l in out.splitlines() if l.startswith("+F:")]
    counts = [int(l.split(":")[1]) for l in err.splitlines() if l.startswith("+R:")]
    if status == "ok" and proc.returncode != 0:
        status = "exit-%d" % proc.returncode
    elif status == "ok" and not rates:
        status = "no-figures"
    return {"status": status, "rate": rates[-1] if rates else 0.0,
            "count": counts[-1] if counts else 0, "wall": wall, "stderr": err, "cmd": cmd,
            "cpu": (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)}


def verify_speed(args, groups):
    """One short stats run per (cipher, mode, dir, async) in the gpuprov configuration: gpuprov
    must have processed at least the bytes speed reports."""
    size = min(args.sizes)
    if AA:
        say("tax: A/A: no gpuprov check (both configurations are the default provider)")
        return
    for cipher, mode, direction, async_jobs in groups:
        cell = (cipher, mode, direction, async_jobs, size)
        res = run_speed(cell, "gpuprov", 1, args.build, stats=True)
        st = parse_stats(res["stderr"])
        what = "%s %s %s async %d, %d B" % (cipher, mode, direction, async_jobs, size)
        problem = None
        if res["status"] != "ok":
            problem = res["status"]
        elif st is None:
            problem = "no gpuprov stats line: gpuprov was not loaded"
        elif st.get("passthrough"):
            say("tax: check: gpuprov served %s through passthrough (no GPU: the default provider's"
                " functions under gpuprov's names)" % what)
            continue
        elif st.get("ops", 0) == 0 or st.get("bytes", 0) < res["count"] * size:
            problem = "gpuprov counted %d bytes in %d ops, speed %d bytes: work bypassed gpuprov" % (
                st.get("bytes", 0), st.get("ops", 0), res["count"] * size)
        if problem:
            say("tax: ERROR: gpuprov check failed for %s: %s\n  command: %s %s\n  stderr: %s" % (
                what, problem, "%sOPENSSL_CONF=%s OPENSSL_MODULES=%s GPUPROV_STATS=1" % (
                    "LD_LIBRARY_PATH=%s " % OPENSSL.libdir if OPENSSL.libdir else "",
                    ROOT / "config" / "gpuprov.cnf", args.build / "provider"),
                " ".join(res["cmd"]), "\n    ".join(res["stderr"].strip().splitlines()[-5:])))
            sys.exit(2)
        split = ", ".join("%s %d" % (e, st[e + "_ops"]) for e in ("cuda", "host", "cpu")
                          if st.get(e + "_ops"))
        say("tax: check: gpuprov served %s: %d ops, %d bytes >= speed's %d (%s)" % (
            what, st["ops"], st["bytes"], res["count"] * size, split or "no executor split"))


# ---------------------------------------------------------------------------------------------
# nginx + wrk

def tls_layout(args):
    """nginx cores, wrk cores, workers and wrk threads (taskset lists; empty when not pinned)."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return {"nginx_cpus": "", "wrk_cpus": "", "workers": 1, "wrk_threads": 1,
                "text": "1 core: nginx (1 worker) and wrk (1 thread) share it, not pinned"}
    half = len(cores) // 2
    ng, wk = cores[:half], cores[half:]
    lay = {"nginx_cpus": ",".join(map(str, ng)), "wrk_cpus": ",".join(map(str, wk)),
           "workers": len(ng), "wrk_threads": len(wk)}
    lay["text"] = "nginx: %d worker%s on core%s %s; wrk: %d thread%s on core%s %s (taskset)" % (
        len(ng), "s" if len(ng) > 1 else "", "s" if len(ng) > 1 else "", lay["nginx_cpus"],
        len(wk), "s" if len(wk) > 1 else "", "s" if len(wk) > 1 else "", lay["wrk_cpus"])
    return lay


def tls_cmd(action, args, lay, config, suite, size, workdir):
    return ["bash", str(ROOT / "bench" / "tax_tls.sh"), action, "--config", config,
            "--suite", suite, "--size", str(size), "--seconds", str(args.tls_seconds),
            "--conns", str(args.tls_conns), "--workers", str(lay["workers"]),
            "--nginx-cpus", lay["nginx_cpus"], "--wrk-cpus", lay["wrk_cpus"],
            "--wrk-threads", str(lay["wrk_threads"]), "--build", str(args.build),
            "--workdir", workdir, "--openssl-bin", OPENSSL.bin]


def run_tls_script(cmd, timeout):
    """bench/tax_tls.sh: its key=value lines, status ('ok', 'exit-N', 'timeout'), all output.
    Its nginx, wrk, curl and openssl all run with --openssl's libraries."""
    env = OPENSSL.env({k: v for k, v in os.environ.items() if not k.startswith("GPUPROV_")})
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {}, "timeout", ""
    kv = dict(l.split("=", 1) for l in p.stdout.splitlines() if re.match(r"^\w+=", l))
    return kv, ("ok" if p.returncode == 0 else "exit-%d" % p.returncode), p.stdout + p.stderr


def nginx_openssl():
    """The OpenSSL nginx runs with in the runs' environment, from `nginx -V` ("built with
    OpenSSL A [(running with OpenSSL B)]"); "" when nginx does not say."""
    try:
        p = subprocess.run(["sh", "-c", "$(command -v nginx || echo /usr/sbin/nginx) -V"],
                           env=OPENSSL.env(os.environ), capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ""
    m = re.search(r"^built with (OpenSSL [^(\n]*?)\s*(?:\(running with (OpenSSL [^)]*)\))?$",
                  p.stderr, re.M)
    return (m.group(2) or m.group(1)) if m else ""


def verify_tls(args, lay, workdir):
    """Per suite and configuration: the suite negotiated, the body intact; gpuprov counted."""
    size = min(args.tls_sizes)
    for suite in args.tls_suites:
        for config in CONFIGS:
            kv, status, text = run_tls_script(
                tls_cmd("verify", args, lay, config, suite, size, workdir), 120)
            st = parse_stats(text)
            problem = None
            if status != "ok":
                problem = "bench/tax_tls.sh verify: " + status
            elif kv.get("cipher") != suite:
                problem = "negotiated %r, not %s" % (kv.get("cipher"), suite)
            elif kv.get("http") != "200" or kv.get("body_matches") != "1":
                problem = "curl got HTTP %s, %s bytes, body %s" % (
                    kv.get("http"), kv.get("body_bytes"),
                    "intact" if kv.get("body_matches") == "1" else "differs")
            elif config == "default" and st is not None:
                problem = "gpuprov loaded in the default configuration"
            elif config == "gpuprov" and (st is None or (not st.get("passthrough") and (
                    st.get("ops", 0) == 0 or st.get("bytes", 0) < size))):
                problem = "gpuprov did not serve nginx (stats: %s)" % (st,)
            if problem:
                say("tax: ERROR: TLS check failed for %s, %s: %s\n%s" % (
                    suite, config, problem, text[-1500:]))
                sys.exit(2)
            say("tax: check: nginx/%s %s: %s negotiated, HTTP 200, body intact%s" % (
                config, suite, suite, (", gpuprov passthrough" if st.get("passthrough") else
                                       ", gpuprov %d ops, %d bytes" % (st["ops"], st["bytes"]))
                if st else ""))


def run_tls(args, lay, config, suite, size, workdir):
    kv, status, text = run_tls_script(tls_cmd("run", args, lay, config, suite, size, workdir),
                                      args.tls_seconds * 3 + 120)
    res = {"status": status, "rate": 0.0, "count": 0, "wall": 0.0, "cpu": 0.0,
           "text": text, "note": ""}
    if status != "ok" or not kv or not kv.get("requests"):
        res["status"] = status if status != "ok" else "no-figures"
        return res
    m = re.match(r"([\d.]+)\s*(\w*)", kv.get("duration", ""))
    dur = float(m.group(1)) * {"s": 1, "ms": 0.001, "m": 60, "us": 1e-6}.get(m.group(2), 1) \
        if m else 0.0
    res.update(count=int(kv["requests"]), wall=dur, cpu=float(kv.get("server_cpu_s") or 0))
    res["rate"] = res["count"] / dur if dur > 0 else 0.0
    errs = []
    if kv.get("non2xx", "0") != "0":
        errs.append("non-2xx responses: %s" % kv["non2xx"])
    if kv.get("socket_errors"):
        errs.append("socket errors: %s" % kv["socket_errors"])
    if errs:
        res["status"], res["note"] = "wrk-errors", "; ".join(errs)
    return res


# ---------------------------------------------------------------------------------------------
# Plan, measure

def order(rep):
    """Configurations of one repeat: default first in odd repeats, gpuprov first in even ones."""
    return CONFIGS if rep % 2 else CONFIGS[::-1]


def speed_cells(args):
    cells, skipped = [], []
    for cipher in args.ciphers:
        for mode in args.modes:
            if mode == "aead" and cipher not in AEAD_CIPHERS:
                skipped.append(cipher)
                continue
            for direction in args.dirs:
                for a in args.asyncs:
                    for size in args.sizes:
                        cells.append((cipher, mode, direction, a, size))
    return cells, sorted(set(skipped))


def cell_label(cell):
    cipher, mode, direction, a, size = cell
    return "%s %s %s async %d %s" % (cipher, mode, direction, a, size_label(size))


def fmt_spread(xs, fmt, scale=1.0):
    """"median [min-max]" of xs / scale ("-" when empty, the value alone when one)."""
    if not xs:
        return "-"
    xs = [x / scale for x in xs]
    if len(xs) == 1:
        return fmt % xs[0]
    return (fmt + " [" + fmt + "\u2013" + fmt + "]") % (median(xs), min(xs), max(xs))


def repeat_ratio(runs, rep):
    """", ratio R" once both configurations of repeat `rep` have run and are ok, else ""."""
    d, g = runs.get(("default", rep)), runs.get(("gpuprov", rep))
    if d and g and d["rate"] > 0 and d["status"] == g["status"] == "ok":
        return ", ratio %.3f" % (g["rate"] / d["rate"])
    return ""


def summarize(runs):
    """runs: {(config, rep): res}. Returns {"rates": {config: [rate of each ok run]},
    "ratios": [gpuprov/default rate, per repeat], "cpu_ratios": [gpuprov/default work per CPU
    second (count / cpu), per repeat]}; a repeat counts where both of its runs are ok."""
    out = {"rates": {c: [runs[k]["rate"] for k in sorted(runs) if k[0] == c
                         and runs[k]["status"] == "ok"] for c in CONFIGS},
           "ratios": [], "cpu_ratios": []}
    for (c, r) in sorted(runs):
        if c != "gpuprov":
            continue
        d, g = runs.get(("default", r)), runs[(c, r)]
        if not (d and d["status"] == "ok" and g["status"] == "ok"):
            continue
        if d["rate"] > 0:
            out["ratios"].append(g["rate"] / d["rate"])
        if d["cpu"] > 0 and g["cpu"] > 0 and d["count"] > 0:
            out["cpu_ratios"].append((g["count"] / g["cpu"]) / (d["count"] / d["cpu"]))
    return out


class Recorder:
    """CSV rows, written and flushed one by one (an interrupted run keeps what it measured)."""

    def __init__(self, path):
        self.fh = open(path, "w", newline="")
        self.w = csv.DictWriter(self.fh, fieldnames=FIELDS)
        self.w.writeheader()
        self.today = datetime.date.today().isoformat()

    def add(self, **row):
        row["date"] = self.today
        self.w.writerow(row)
        self.fh.flush()


def measure_speed(args, cells, rec, progress):
    results = {}
    failures = 0
    for cell in cells:
        runs = {}
        for rep in range(1, args.repeat + 1):
            for config in order(rep):
                res = run_speed(cell, config, args.seconds, args.build)
                runs[(config, rep)] = res
                cipher, mode, direction, a, size = cell
                rec.add(part="speed", cipher=cipher, mode=mode, dir=direction, async_jobs=a,
                        size=size, config=config, rep=rep, seconds=args.seconds,
                        status=res["status"], rate="%.0f" % res["rate"], unit="bytes/s",
                        count=res["count"], wall_s="%.3f" % res["wall"],
                        cpu_s="%.4f" % res["cpu"])
                if res["status"] != "ok":
                    failures += 1
                    say("tax: ERROR: %s, %s #%d: %s\n  command: %s\n  stderr: %s" % (
                        cell_label(cell), config, rep, res["status"], " ".join(res["cmd"]),
                        "\n    ".join(res["stderr"].strip().splitlines()[-5:])))
                progress("%s, %s #%d: %.1f MB/s%s" % (
                    cell_label(cell), config, rep, res["rate"] / 1e6, repeat_ratio(runs, rep)
                    if config == order(rep)[-1] else ""))
        sm = results[cell] = summarize(runs)
        say("tax: cell %s: default %s MB/s, gpuprov %s MB/s, ratio %s, per CPU s %s" % (
            cell_label(cell), fmt_spread(sm["rates"]["default"], "%.1f", 1e6),
            fmt_spread(sm["rates"]["gpuprov"], "%.1f", 1e6), fmt_spread(sm["ratios"], "%.3f"),
            fmt_spread(sm["cpu_ratios"], "%.3f")))
    return results, failures


def measure_tls(args, lay, workdir, rec, progress):
    results = {}
    failures = 0
    for suite in args.tls_suites:
        for size in args.tls_sizes:
            runs = {}
            for rnd in range(1, args.tls_rounds + 1):
                for config in order(rnd):
                    res = run_tls(args, lay, config, suite, size, workdir)
                    runs[(config, rnd)] = res
                    rec.add(part="tls", cipher=suite, mode="tls1.3", dir="", async_jobs="",
                            size=size, config=config, rep=rnd, seconds=args.tls_seconds,
                            status=res["status"], rate="%.1f" % res["rate"], unit="req/s",
                            count=res["count"], wall_s="%.3f" % res["wall"],
                            connections=args.tls_conns, workers=lay["workers"],
                            wrk_threads=lay["wrk_threads"], nginx_cpus=lay["nginx_cpus"],
                            wrk_cpus=lay["wrk_cpus"], cpu_s="%.2f" % res["cpu"],
                            note=res["note"])
                    if res["status"] != "ok":
                        failures += 1
                        say("tax: ERROR: nginx %s %s %s #%d: %s %s\n%s" % (
                            suite, size_label(size), config, rnd, res["status"], res["note"],
                            res["text"][-1500:]))
                    progress("nginx %s %s, %s #%d: %.0f req/s (%.1f MB/s of body)%s" % (
                        suite, size_label(size), config, rnd, res["rate"],
                        res["rate"] * size / 1e6, repeat_ratio(runs, rnd)
                        if config == order(rnd)[-1] else ""))
            sm = results[(suite, size)] = summarize(runs)
            say("tax: cell nginx %s %s: default %s req/s, gpuprov %s req/s, ratio %s, per "
                "nginx CPU s %s" % (suite, size_label(size), fmt_spread(sm["rates"]["default"], "%.0f"),
                                   fmt_spread(sm["rates"]["gpuprov"], "%.0f"),
                                   fmt_spread(sm["ratios"], "%.3f"),
                                   fmt_spread(sm["cpu_ratios"], "%.3f")))
    return results, failures


def results_from_csv(path):
    """Per-cell results rebuilt from a tax.csv (--report-only): speed and tls results as
    measure_speed and measure_tls return them, the number of runs and of failed runs."""
    rows = list(csv.DictReader(open(path)))
    speed, tls = {}, {}
    for r in rows:
        res = {"status": r["status"], "rate": float(r["rate"] or 0),
               "count": int(r["count"] or 0), "cpu": float(r.get("cpu_s") or 0)}
        if r["part"] == "speed":
            key = (r["cipher"], r["mode"], r["dir"], int(r["async_jobs"]), int(r["size"]))
            speed.setdefault(key, {})[(r["config"], int(r["rep"]))] = res
        else:
            tls.setdefault((r["cipher"], int(r["size"])), {})[(r["config"], int(r["rep"]))] = res
    failures = sum(1 for r in rows if r["status"] != "ok")
    return ({k: summarize(v) for k, v in speed.items()}, {k: summarize(v) for k, v in tls.items()},
            len(rows), failures)


# ---------------------------------------------------------------------------------------------
# Tables

def speed_columns(results):
    return sorted({(c[1], c[2], c[3]) for c in results},
                  key=lambda k: (MODES.index(k[0]), DIRS.index(k[1]), k[2]))


def column_name(col):
    mode, direction, a = col
    return "%s %s, async %d" % (mode, direction, a)


def speed_table(results, what):
    """Markdown: a row per cipher x size, a column per (mode, dir, async). what: 'ratios' or
    'cpu_ratios' (median gpuprov/default [range]), 'default' (the default provider's MB/s)."""
    cols = speed_columns(results)
    head = ["cipher", "size"] + [column_name(c) for c in cols]
    lines = ["| " + " | ".join(head) + " |", "|---|---:|" + "---:|" * len(cols)]
    ciphers = [c for c in CIPHERS if any(k[0] == c for k in results)]
    for cipher in ciphers:
        for size in sorted({k[4] for k in results if k[0] == cipher}):
            cells = [PRETTY[cipher], size_label(size)]
            for mode, direction, a in cols:
                r = results.get((cipher, mode, direction, a, size))
                if r is None:
                    cells.append("n/a" if mode == "aead" and cipher not in AEAD_CIPHERS else "-")
                elif what == "default":
                    cells.append(fmt_spread(r["rates"]["default"], "%.0f", 1e6))
                else:
                    cells.append(fmt_spread(r[what], "%.2f"))
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def tls_table(results):
    head = ["suite", "body", "default req/s", "gpuprov req/s", "gpuprov / default",
            "requests per nginx CPU s, gpuprov / default"]
    lines = ["| " + " | ".join(head) + " |", "|---|---:|---:|---:|---:|---:|"]
    for (suite, size), sm in sorted(results.items(),
                                                  key=lambda kv: (SUITES.index(kv[0][0])
                                                                  if kv[0][0] in SUITES else 9,
                                                                  kv[0][1])):
        lines.append("| %s | %s | %s | %s | %s | %s |" % (
            suite, size_label(size), fmt_spread(sm["rates"]["default"], "%.0f"),
            fmt_spread(sm["rates"]["gpuprov"], "%.0f"), fmt_spread(sm["ratios"], "%.2f"),
            fmt_spread(sm["cpu_ratios"], "%.2f")))
    return "\n".join(lines)


def below_target(results):
    """Speed cells whose median ratio is under the CPU path's target for their size."""
    out = []
    for cell, sm in results.items():
        if not sm["ratios"]:
            continue
        need = TARGET_SMALL if cell[4] in SMALL_SIZES else TARGET
        if median(sm["ratios"]) < need:
            out.append((median(sm["ratios"]), cell, need))
    return sorted(out)


def target_text(results):
    n = sum(1 for sm in results.values() if sm["ratios"])
    low = below_target(results)
    head = ("Against the CPU path's target (gpuprov/default \u2265 %.2f\u00d7 at 16 and 64 B, "
            "\u2265 %.2f\u00d7 from 256 B up; median ratios): " % (TARGET_SMALL, TARGET))
    if not low:
        return head + "every one of the %d cells meets it." % n
    worst = ", ".join("%s %s %s a%d %s %.3f" % (PRETTY[c[0]], c[1], c[2], c[3], size_label(c[4]),
                                                 r) for r, c, _ in low[:8])
    return head + "%d of %d cells below; lowest: %s%s." % (
        len(low), n, worst, ", ..." if len(low) > 8 else "")


def console_tables(speed_res, tls_res):
    if speed_res:
        say("\nopenssl speed, gpuprov / default (median [min\u2013max] of the per-repeat ratios):")
        say(speed_table(speed_res, "ratios"))
        say("\nopenssl speed, work per CPU second (user+sys of the speed process), gpuprov / "
            "default:")
        say(speed_table(speed_res, "cpu_ratios"))
        say("\nopenssl speed, the default provider, MB/s (median [min\u2013max]):")
        say(speed_table(speed_res, "default"))
        say("\n" + target_text(speed_res))
    if tls_res:
        say("\nnginx + wrk, requests/s and requests per nginx CPU second (median [min\u2013max] "
            "of the rounds):")
        say(tls_table(tls_res))


def results_section(meta, speed_res, tls_res, results_path, runs, failures):
    dev = meta["gpu"] if meta["gpu"] != "none" else "no GPU"
    rel = os.path.relpath(meta["csv"], results_path.parent)
    s = [BEGIN,
         # No date in the heading: dated headings belong to bench/history/ (the date is in the text).
         "### %s, %s, gpuprov %s" % (dev, short_version(meta["openssl"]), meta["gpuprov_commit"]), "",
         "Written by `bench/tax` from one run; do not edit between the markers (the next run "
         "replaces it). Device: **%s**; CPU: %s, %d cores; %s; %s; gpuprov %s." % (
             dev, meta["host_cpu"], meta["cores"], short_version(meta["openssl"]),
             meta["date"], meta["gpuprov_commit"]), "",
         "Command: `%s` (%s; %d runs, %s; load average %s)." % (
             meta["command"], meta["duration"], runs,
             "all ok" if not failures else "%d failed" % failures, meta["load"]), ""]
    if meta.get("note"):
        s += [meta["note"], ""]
    if meta.get("busy"):
        s += ["**The host was busy** (load average %s): other processes shared its cores, so "
              "single runs vary widely (the CPU-second ratios leave out time spent waiting for a "
              "core, not the slow-down that shared caches and cores cause); read the ranges, and "
              "measure again on an idle host before drawing conclusions from a ratio within "
              "them." % meta["load"], ""]
    s += ["default: `OPENSSL_CONF=/dev/null` (the default provider). gpuprov: "
          "`OPENSSL_CONF=config/gpuprov.cnf OPENSSL_MODULES=<build>/provider`, no GPUPROV_* "
          "variable (backend auto%s). Before the timed runs, short runs with GPUPROV_STATS=1 "
          "showed gpuprov processing every (cipher, mode, direction, async_jobs) and every TLS "
          "suite (s_client negotiated the suite asked for, curl got the body intact)." % (
              "" if meta["gpu"] != "none" else ": without a GPU, gpuprov's cpu executor"), ""]
    if speed_res:
        s += ["#### openssl speed: gpuprov / default", "",
              "One `openssl speed -mr -elapsed -seconds %d -bytes N [-aead] [-decrypt] "
              "[-async_jobs A] -evp CIPHER` process per run; stream = speed's update loop, "
              "aead = `-aead` (TLS-like records: IV, 13-byte AAD, payload, tag; n/a for AES-CTR, "
              "which speed refuses). %d runs per cell and configuration, the two alternating; "
              "median [min\u2013max] of the per-repeat ratios." % (meta["seconds"], meta["repeat"]), "",
              speed_table(speed_res, "ratios"), "", target_text(speed_res), "",
              "#### openssl speed: work per CPU second, gpuprov / default", "",
              "Operations per CPU second (user+sys of the speed process and its threads, "
              "start-up included) of gpuprov over the default provider's, per repeat; above 1: "
              "gpuprov costs less CPU per byte.", "",
              speed_table(speed_res, "cpu_ratios"), "",
              "#### openssl speed: the default provider, MB/s (10^6 bytes/s)", "",
              speed_table(speed_res, "default"), ""]
    if tls_res:
        s += ["#### nginx + wrk: requests/s", "",
              "nginx %s%s, TLS 1.3 with one suite (ssl_conf_command Ciphersuites), keep-alive; "
              "wrk (%d connections, %d s per run) with the default provider; %s. %d round(s), the "
              "configurations alternating; median [min\u2013max]; every run with no socket error "
              "and no non-2xx response. nginx CPU s: user+sys of its master and workers (/proc) "
              "during the run." % (meta.get("nginx", "?"),
                                   " running with " + short_version(meta["nginx_openssl"])
                                   if meta.get("nginx_openssl") else "", meta["tls_conns"],
                                   meta["tls_seconds"], meta["tls_layout"], meta["tls_rounds"]),
              "",
              tls_table(tls_res), ""]
    ignored = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", meta["csv"]],
                             capture_output=True).returncode == 0
    s += ["CSV: `%s` (one row per run%s)." % (rel, "; build output, not in git" if ignored
                                              else ""), END]
    return "\n".join(wrap_prose(x) for x in s) + "\n"


# ---------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(
        prog="bench/tax", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1] + EXAMPLES)
    ap.add_argument("--build", type=Path, default=ROOT / "build",
                    help="meson build dir holding provider/gpuprov.so (default: build)")
    ap.add_argument("--out", type=Path, help="where tax.csv and tax.json go (default: "
                    "<build>/tax)")
    ap.add_argument("--results", type=Path, help="the RESULTS.md whose tax section to replace "
                    "(default: bench/RESULTS.md)")
    ap.add_argument("--no-results", action="store_true", help="leave RESULTS.md alone")
    ap.add_argument("--parts", type=csv_list(str), default=PARTS,
                    help="speed, tls or both (default: speed,tls)")
    ap.add_argument("--seconds", type=int, default=1,
                    help="speed's -seconds (an integer; default 1)")
    ap.add_argument("--repeat", type=int, default=3,
                    help="speed runs per cell and configuration (default 3)")
    ap.add_argument("--ciphers", type=csv_list(str), default=CIPHERS,
                    help="default: " + ",".join(CIPHERS))
    ap.add_argument("--sizes", type=csv_list(int), default=SIZES,
                    help="-bytes values; default: " + ",".join(map(str, SIZES)))
    ap.add_argument("--modes", type=csv_list(str), default=MODES,
                    help="stream, aead (speed -aead; AEAD ciphers only); default: both")
    ap.add_argument("--dirs", type=csv_list(str), default=DIRS,
                    help="enc, dec (speed -decrypt); default: both")
    ap.add_argument("--async", dest="asyncs", type=csv_list(int), default=ASYNC,
                    help="-async_jobs values, 0 = synchronous; default: 0,32")
    ap.add_argument("--tls-suites", type=csv_list(str), default=SUITES,
                    help="TLS 1.3 suites; default: " + ",".join(SUITES))
    ap.add_argument("--tls-sizes", type=csv_list(int), default=TLS_SIZES,
                    help="body bytes; default: " + ",".join(map(str, TLS_SIZES)))
    ap.add_argument("--tls-seconds", type=int, default=5, help="wrk's -d (default 5)")
    ap.add_argument("--tls-rounds", type=int, default=2,
                    help="nginx runs per cell and configuration (default 2)")
    ap.add_argument("--tls-conns", type=int, default=0,
                    help="wrk connections (default: 16 per nginx worker)")
    ap.add_argument("--cpus", default="", help="pin each speed run to these cores (taskset -c "
                    "LIST), both configurations alike")
    ap.add_argument("--aa", action="store_true",
                    help="A/A: the second configuration is the default provider too, so the "
                    "ratios show this host's run-to-run spread, the floor under any measured "
                    "difference (implies --no-results; the tables' gpuprov column is the "
                    "default again)")
    ap.add_argument("--openssl", type=Path, metavar="PREFIX", help=OPENSSL_HELP + "; the tls "
                    "part's nginx, wrk and curl too (a distribution's nginx is linked against "
                    "libssl.so.3 and takes PREFIX's; the run warns when `nginx -V` names another)")
    ap.add_argument("--note", default="", help="a sentence for the RESULTS section")
    ap.add_argument("--report-only", type=Path, metavar="CSV",
                    help="print the tables and rewrite the RESULTS section from an earlier "
                    "tax.csv (and the tax.json beside it); measures nothing")
    args = ap.parse_args()

    if args.report_only:
        return report_only(args)
    global AA, CPUS, OPENSSL
    AA, CPUS = args.aa, args.cpus
    if AA:
        args.no_results = True
        if "tls" in args.parts:
            sys.exit("tax: --aa measures the speed part only (--parts speed)")

    bad = [c for c in args.ciphers if c not in CIPHERS] + \
          [m for m in args.modes if m not in MODES] + [d for d in args.dirs if d not in DIRS] + \
          [p for p in args.parts if p not in PARTS] + \
          [str(a) for a in args.asyncs if a < 0] + [str(s) for s in args.sizes if s <= 0] + \
          [str(s) for s in args.tls_sizes if s <= 0]
    if bad:
        sys.exit("tax: unknown or invalid: %s (see --help)" % ", ".join(bad))
    if args.seconds < 1 or args.repeat < 1 or args.tls_seconds < 1 or args.tls_rounds < 1:
        sys.exit("tax: --seconds, --repeat, --tls-seconds and --tls-rounds must be >= 1")
    args.build = args.build.resolve()
    if not (args.build / "provider" / "gpuprov.so").is_file():
        sys.exit("tax: %s not built (meson setup build && ninja -C build)"
                 % (args.build / "provider" / "gpuprov.so"))
    args.sizes, args.asyncs = sorted(set(args.sizes)), sorted(set(args.asyncs))
    args.tls_sizes = sorted(set(args.tls_sizes))
    outdir = (args.out or args.build / "tax").resolve()
    outdir.mkdir(parents=True, exist_ok=True)
    results = None if args.no_results else (args.results or ROOT / "bench" / "RESULTS.md").resolve()

    OPENSSL = OpenSSL(args.openssl)
    host = host_info(OPENSSL)
    dev = host["gpu"] if host["gpu"] != "none" else "no GPU"
    say("tax: %s | CPU: %s (%d cores) | device: %s | gpuprov %s" % (
        short_version(host["openssl"]), host["host_cpu"], host["cores"], dev,
        host["gpuprov_commit"]))
    if OPENSSL.prefix:
        say("tax: note: OpenSSL from %s (%s with LD_LIBRARY_PATH=%s)" % (
            OPENSSL.prefix, OPENSSL.bin, OPENSSL.libdir))
    warnings = OPENSSL.warnings(args.build)
    ngx_openssl = nginx_openssl() if "tls" in args.parts else ""
    if ngx_openssl and openssl_numbers(ngx_openssl)[1] != openssl_numbers(host["openssl"])[1]:
        warnings.append("nginx runs with %s, not %s: the tls part measures that library" % (
            ngx_openssl, short_version(host["openssl"])))
    for w in warnings:
        say("tax: WARNING: " + w)
    dropped = sorted(k for k in os.environ if k.startswith("GPUPROV_"))
    if dropped:
        say("tax: note: dropped from every run's environment: " + " ".join(dropped))

    cells, skipped = speed_cells(args) if "speed" in args.parts else ([], [])
    if skipped:
        say("tax: note: no aead mode for %s (speed -aead takes AEAD ciphers only)"
            % ", ".join(skipped))
    groups = list(dict.fromkeys(c[:4] for c in cells))
    do_tls = "tls" in args.parts
    lay = tls_layout(args) if do_tls else None
    if do_tls:
        if not args.tls_conns:
            args.tls_conns = 16 * lay["workers"]
        say("tax: nginx + wrk: " + lay["text"])
    n_speed = len(cells) * args.repeat * len(CONFIGS)
    n_tls = len(args.tls_suites) * len(args.tls_sizes) * args.tls_rounds * len(CONFIGS) \
        if do_tls else 0
    est = (n_speed * (args.seconds + SPEED_OVERHEAD_S) + len(groups) * (1 + SPEED_OVERHEAD_S)
           + n_tls * (args.tls_seconds + TLS_OVERHEAD_S)
           + (len(args.tls_suites) * len(CONFIGS) * 2 * TLS_OVERHEAD_S if do_tls else 0))
    plan = []
    if cells:
        plan.append("%d speed cells x %d repeats x %d configurations = %d runs of %d s" % (
            len(cells), args.repeat, len(CONFIGS), n_speed, args.seconds))
    if do_tls:
        plan.append("%d nginx cells x %d rounds x %d configurations = %d runs of %d s" % (
            len(args.tls_suites) * len(args.tls_sizes), args.tls_rounds, len(CONFIGS), n_tls,
            args.tls_seconds))
    n_checks = len(groups) + (len(args.tls_suites) * len(CONFIGS) if do_tls else 0)
    say("tax: %s; %d checks first; about %s" % ("; ".join(plan), n_checks, fmt_dur(est)))
    if AA:
        say("tax: A/A: both configurations run the default provider; the gpuprov column below "
            "is the default provider again")
    if CPUS:
        say("tax: speed runs pinned to cores %s (taskset)" % CPUS)
    if not cells and not do_tls:
        sys.exit("tax: nothing to run")

    t_start = t_all = time.monotonic()
    load0 = os.getloadavg()[0]
    if load0 > 0.5 * host["cores"]:
        say("tax: note: load average %.1f on %d cores: other processes will disturb the figures"
            % (load0, host["cores"]))
    total = n_speed + n_tls
    done = [0]

    def progress(msg):
        done[0] += 1
        el = time.monotonic() - t_start
        say("[%d/%d] %s  (ETA %s)" % (done[0], total, msg,
                                      fmt_dur(el / done[0] * (total - done[0]))))

    workdir = tempfile.mkdtemp(prefix="gpuprov-tax.")
    try:
        if cells:
            verify_speed(args, groups)
        if do_tls:
            verify_tls(args, lay, workdir)
        csv_path = outdir / "tax.csv"
        rec = Recorder(csv_path)
        t_start = time.monotonic()
        speed_res, f1 = measure_speed(args, cells, rec, progress) if cells else ({}, 0)
        tls_res, f2 = measure_tls(args, lay, workdir, rec, progress) if do_tls else ({}, 0)
    finally:
        subprocess.run(["rm", "-rf", workdir])

    nginx_v = sh(["sh", "-c", "$(command -v nginx || echo /usr/sbin/nginx) -v 2>&1"])
    meta = dict(host, date=datetime.date.today().isoformat(), csv=str(csv_path),
                command=" ".join(["bench/tax"] + [shlex.quote(a) for a in sys.argv[1:]]),
                duration=fmt_dur(time.monotonic() - t_all),
                load="%.1f at the start, %.1f at the end" % (load0, os.getloadavg()[0]),
                nginx=nginx_v.split("/")[-1] if nginx_v else "?", nginx_openssl=ngx_openssl,
                busy=max(load0, os.getloadavg()[0]) > 0.5 * host["cores"],
                tls_layout=lay["text"] if lay else "",
                note=" ".join(([args.note] if args.note else []) + (
                    ["Warnings: " + "; ".join(warnings) + "."] if warnings else [])),
                seconds=args.seconds,
                repeat=args.repeat, tls_conns=args.tls_conns, tls_seconds=args.tls_seconds,
                tls_rounds=args.tls_rounds, aa=AA, cpus=CPUS)
    json.dump(dict(meta, csv=os.path.relpath(csv_path, ROOT)),
              open(outdir / "tax.json", "w"), indent=1)
    console_tables(speed_res, tls_res)
    say("\ntax: CSV: %s" % csv_path)
    if results:
        write_section(results, BEGIN, END,
                      results_section(meta, speed_res, tls_res, results, total, f1 + f2),
                      heading=HEADING, after=COMPARE_END)
        say("tax: %s updated (between %s and %s)" % (results, BEGIN, END))
    if f1 + f2:
        say("tax: %d run(s) failed (ERROR lines above; the CSV's status column)" % (f1 + f2))
        return 1
    return 0


def report_only(args):
    csv_path = args.report_only.resolve()
    meta_path = csv_path.with_suffix(".json")
    if not meta_path.exists():
        sys.exit("tax: %s missing (written beside the CSV by the run)" % meta_path)
    meta = json.load(open(meta_path))
    meta["csv"] = str(csv_path)
    if args.note:
        meta["note"] = (args.note + " " + meta.get("note", "")).strip()
    speed_res, tls_res, runs, failures = results_from_csv(csv_path)
    console_tables(speed_res, tls_res)
    if not args.no_results:
        results = (args.results or ROOT / "bench" / "RESULTS.md").resolve()
        write_section(results, BEGIN, END,
                      results_section(meta, speed_res, tls_res, results, runs, failures),
                      heading=HEADING, after=COMPARE_END)
        say("tax: %s updated (between %s and %s)" % (results, BEGIN, END))
    return 0


if __name__ == "__main__":
    sys.exit(main())
