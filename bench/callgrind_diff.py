#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Per-unit instructions, the default provider against gpuprov, from four callgrind runs of N1 and N2 units.
# usage: callgrind_diff.py DIR N TOP TOOL LABEL UNIT [--own] [--min X]
#   DIR holds d1.fn, d2.fn (the default at N1 and N2 units) and g1.fn, g2.fn (gpuprov), each the output
#   of `callgrind_sum.py --functions`; N = N2 - N1, so what the runs share (start-up) cancels.
#   Prints "TOOL: LABEL: default X instructions UNIT, gpuprov Y (+Z%, +D), of them W in gpuprov.so", then,
#   with --own, gpuprov.so's own functions a unit, then the TOP functions whose cost differs most
#   (default gpuprov difference object function), those differing by at least X (default 1).
import argparse
import sys


def load(path):
    d = {}
    for line in open(path):
        c, o, f = line.rstrip("\n").split(" ", 2)
        d[(o, f)] = d.get((o, f), 0) + int(c)
    return d


def main(argv):
    ap = argparse.ArgumentParser(description="per-unit instructions, default against gpuprov")
    for name in ("dir", "n", "top", "tool", "label", "unit"):
        ap.add_argument(name)
    ap.add_argument("--own", action="store_true", help="list gpuprov.so's own functions first")
    ap.add_argument("--min", type=float, default=1.0, help="smallest difference (instructions a unit) shown")
    a = ap.parse_args(argv)
    n, top = float(a.n), int(a.top)
    d1, d2, g1, g2 = (load(f"{a.dir}/{x}.fn") for x in ("d1", "d2", "g1", "g2"))
    keys = set(d1) | set(d2) | set(g1) | set(g2)
    dd = {k: (d2.get(k, 0) - d1.get(k, 0)) / n for k in keys}
    gg = {k: (g2.get(k, 0) - g1.get(k, 0)) / n for k in keys}
    td, tg = sum(dd.values()), sum(gg.values())
    own = {k: v for k, v in gg.items() if k[0] == "gpuprov.so"}
    print(f"{a.tool}: {a.label}: default {td:.0f} instructions {a.unit}, gpuprov {tg:.0f} ({100 * (tg - td) / td:+.2f}%, {tg - td:+.0f}), "
          f"of them {sum(own.values()):.0f} in gpuprov.so")
    if a.own:
        print(f"gpuprov.so's own, {a.unit}:")
        for k in sorted(own, key=lambda k: -own[k])[:top]:
            if own[k] >= a.min:
                print(f"{own[k]:10.1f}  {k[1]}")
        print("differences (default gpuprov difference object function):")
    for k in sorted(keys, key=lambda k: -abs(gg[k] - dd[k]))[:top]:
        if abs(gg[k] - dd[k]) >= a.min:
            print(f"{dd[k]:10.1f} {gg[k]:10.1f} {gg[k] - dd[k]:+9.1f}  {k[0]} {k[1]}")


if __name__ == "__main__":
    main(sys.argv[1:])
