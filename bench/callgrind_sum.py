#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Self instructions (Ir) of a callgrind.out file: the total, and those of the objects whose name matches a pattern.
# usage: callgrind_sum.py CALLGRIND_OUT PATTERN -> prints "TOTAL MATCHED" (the cost line after a calls= line is
# the call's inclusive cost and is left out, so every instruction counts once, in the object that ran it).
#        callgrind_sum.py --functions CALLGRIND_OUT -> one line per function, "SELF OBJECT FUNCTION", largest first.
import re
import sys

by_function = sys.argv[1] == '--functions'
path = sys.argv[2] if by_function else sys.argv[1]
pat = None if by_function else re.compile(sys.argv[2])
names = {}
def resolve(kind, val):
    m = re.match(r'\((\d+)\)(?: (.*))?', val)
    if not m:
        return val
    k = (kind, m.group(1))
    if m.group(2) is not None:
        names[k] = m.group(2)
    return names.get(k, '')
ob = ''; fn = ''; total = 0; own = 0; skip_next = False; per_fn = {}
with open(path) as f:
    for line in f:
        line = line.rstrip('\n')
        if not line:
            continue
        if line.startswith('ob='):
            ob = resolve('ob', line[3:]); continue
        if line.startswith('fn='):
            fn = resolve('fn', line[3:]); continue
        if line.startswith(('cob=', 'cfi=', 'cfl=', 'cfn=')):
            if line.startswith('cob='):
                resolve('ob', line[4:])
            elif line.startswith('cfn='):
                resolve('fn', line[4:])
            continue
        if line.startswith(('fl=', 'fi=', 'fe=')):
            continue
        if line.startswith('calls='):
            skip_next = True; continue
        if line[0].isdigit() or line[0] in '+-*':
            parts = line.split()
            if len(parts) >= 2:
                if skip_next:
                    skip_next = False; continue
                c = int(parts[1]); total += c
                if by_function:
                    k = (ob.rsplit('/', 1)[-1], fn)
                    per_fn[k] = per_fn.get(k, 0) + c
                elif pat.search(ob):
                    own += c
            continue
if by_function:
    for (o, f), c in sorted(per_fn.items(), key=lambda kv: -kv[1]):
        print(c, o, f)
else:
    print(total, own)
