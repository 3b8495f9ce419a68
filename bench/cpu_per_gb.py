#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The GPU path's CPU cost per GB with the registration cache on and off (issue 52.3).

`openssl speed -bytes N` (one synchronous caller streaming one reused buffer, the case the
registration cache is for: batching/reg_cache.h), for AES-256-GCM, AES-128-CTR and
ChaCha20-Poly1305 at 1 MiB and 16 MiB, in five configurations run interleaved (every
configuration once per round, --repeat rounds; medians):

  default          the default provider (OPENSSL_CONF=/dev/null)
  cuda-reg         gpuprov, backend=cuda (forced GPU), registration cache on (GPUPROV_REG_CACHE=256; off by default)
  cuda-noreg       the same with GPUPROV_REG_CACHE=0: the copy crew copies in and out (before)
  cuda-reg-block   cuda-reg with GPUPROV_WAIT=block: the caller sleeps in the driver while the
                   GPU works instead of polling (a lone caller's other CPU cost)
  cuda-noreg-block cuda-noreg with GPUPROV_WAIT=block
  auto-reg         gpuprov's default configuration (backend=auto), cache on
  auto-noreg       the same, cache off

CPU s/GB is user+sys of the whole process (its helper threads included) from
getrusage(RUSAGE_CHILDREN) around it, over the bytes speed encrypted (bench/compare.py's
run_speed). Every gpuprov run prints its stats; the reg_cache line (hits, registered) proves the
cache served the run, and a cuda-reg run with no hit is reported as such (exit 1). --wait W sets
GPUPROV_WAIT=W for the gpuprov configurations that do not set it themselves.

A full run (3 ciphers x 2 sizes x 7 configurations x 3 rounds of 3 s, each process opening the
GPU) takes about 10 minutes; --repeat 1 --configs default,cuda-noreg,cuda-reg,cuda-noreg-block,
cuda-reg-block about 2.

usage: bench/cpu_per_gb.py [--build DIR] [--seconds S] [--repeat R] [--sizes 1048576,16777216]
                           [--ciphers ...] [--configs ...] [--wait adaptive|spin|block] [--csv FILE]
"""

import argparse
import csv
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import ROOT, OpenSSL, csv_list, median, say   # noqa: E402
from compare import run_speed                       # noqa: E402

CONFIGS = {
    "default": ("default", {}),
    "cuda-reg": ("gpuprov-cuda", {"GPUPROV_REG_CACHE": "256"}),
    "cuda-noreg": ("gpuprov-cuda", {"GPUPROV_REG_CACHE": "0"}),
    "cuda-reg-block": ("gpuprov-cuda", {"GPUPROV_REG_CACHE": "256", "GPUPROV_WAIT": "block"}),
    "cuda-noreg-block": ("gpuprov-cuda", {"GPUPROV_REG_CACHE": "0", "GPUPROV_WAIT": "block"}),
    "auto-reg": ("gpuprov", {"GPUPROV_REG_CACHE": "256"}),
    "auto-noreg": ("gpuprov", {"GPUPROV_REG_CACHE": "0"}),
}
REG_LINE = re.compile(r"^gpuprov cuda: reg_cache hits=(\d+) misses=(\d+) registered=(\d+) invalidated=(\d+) "
                      r"refused=(\d+)", re.M)


def one(cipher, size, name, args):
    config, extra = CONFIGS[name]
    saved = {k: os.environ.get(k) for k in list(extra) + ["GPUPROV_WAIT", "GPUPROV_REG_CACHE"]}
    os.environ.pop("GPUPROV_REG_CACHE", None)
    os.environ.pop("GPUPROV_WAIT", None)
    if config != "default" and args.wait:
        os.environ["GPUPROV_WAIT"] = args.wait
    os.environ.update(extra)
    try:
        res = run_speed(cipher, size, 0, 1, config, args.seconds, args.build, config != "default", OpenSSL())
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    hits = registered = 0
    for m in REG_LINE.finditer(res.get("stderr", "")):
        hits += int(m.group(1))
        registered += int(m.group(3))
    gb = res["bytes"] / 1e9
    return {"cipher": cipher, "size": size, "config": name, "status": res["status"],
            "gb_s": res["bytes_per_s"] / 1e9, "cpu_s": res["cpu_s"],
            "cpu_s_per_gb": res["cpu_s"] / gb if gb > 0 else float("nan"),
            "reg_hits": hits, "reg_registered": registered,
            "cuda_ops": (res.get("stats") or {}).get("cuda_ops", 0)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", type=Path, default=ROOT / "build")
    ap.add_argument("--seconds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sizes", type=csv_list(int), default=[1048576, 16777216])
    ap.add_argument("--ciphers", type=csv_list(str), default=["aes-256-gcm", "aes-128-ctr", "chacha20-poly1305"])
    ap.add_argument("--configs", type=csv_list(str), default=list(CONFIGS))
    ap.add_argument("--wait", choices=["adaptive", "spin", "block"], default=None)
    ap.add_argument("--csv", type=Path, default=None)
    args = ap.parse_args()
    for c in args.configs:
        if c not in CONFIGS:
            ap.error("unknown configuration %s (known: %s)" % (c, ", ".join(CONFIGS)))
    if not (args.build / "provider" / "gpuprov.so").exists():
        ap.error("%s/provider/gpuprov.so not built" % args.build)

    rows = []
    for rep in range(args.repeat):
        for cipher in args.ciphers:
            for size in args.sizes:
                for name in args.configs:   # interleaved: each configuration once per round
                    r = one(cipher, size, name, args)
                    r["rep"] = rep
                    rows.append(r)
                    say("%-18s %9d %-11s %-6s %6.2f GB/s %6.3f CPU s/GB  reg hits %d registered %d" % (
                        cipher, size, name, r["status"], r["gb_s"], r["cpu_s_per_gb"], r["reg_hits"],
                        r["reg_registered"]))
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)

    print("\n| cipher | size | " + " | ".join("%s CPU s/GB (GB/s)" % c for c in args.configs) + " |")
    print("|---|---|" + "---|" * len(args.configs))
    warn = []
    for cipher in args.ciphers:
        for size in args.sizes:
            cells = []
            for name in args.configs:
                mine = [r for r in rows if r["cipher"] == cipher and r["size"] == size and r["config"] == name
                        and r["status"] == "ok"]
                if not mine:
                    cells.append("-")
                    continue
                cells.append("%.3f (%.1f)" % (median([r["cpu_s_per_gb"] for r in mine]),
                                              median([r["gb_s"] for r in mine])))
                if name.startswith("cuda-reg") and sum(r["reg_hits"] for r in mine) == 0:
                    warn.append("%s %d cuda-reg: the registration cache never hit" % (cipher, size))
            print("| %s | %d | %s |" % (cipher, size, " | ".join(cells)))
    for w in warn:
        print("warning: " + w)
    return 1 if warn else 0


if __name__ == "__main__":
    sys.exit(main())
