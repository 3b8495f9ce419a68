#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# The call graph between batching/'s units, read from the object files: fails on a cycle or an edge the layer table does not allow.
"""Which unit of batching/ uses which, and whether the uses go one way, down the declared layers.

An edge A -> B means: code of unit A calls a function or names a global that unit B defines, as a
reader counts it: an undefined symbol of one of A's objects that B's objects define, or a static
inline function or function-like macro that B's files define and A's files name (read from the
source, since inlined calls leave no symbol). Units: a .c file directly in --src is a unit with its
header (x.c and x.h are one unit; a header without a .c is a unit of its own); the files of a
subfolder (batching/core/, batching/policy/, ...) are one unit, the folder, which has a private
header.

With --table batching, each edge must also be one that the layer table below allows (the table
of docs/architecture.md, "Inside batching/", and its "calls" column), and every unit must be in it;
--allow UNIT:USED,USED... gives a table of its own instead (the check's self-tests), UNIT's layer
that of the order of the --allow options (the first lowest).

Usage: unit_graph.py --src BATCHING_DIR [--table batching | --allow UNIT:USED,...]... OBJ_OR_ARCHIVE...
  (nm from binutils)
Exit status 0: no cycle and no edge outside the table; 1: a cycle (each printed with the symbols of
each edge) or an edge or unit outside the table (printed with its symbols); 2: usage error.
"""
import argparse
import collections
import os
import re
import subprocess
import sys


# batching/'s units: layer, and the units each one may use (all of a lower layer). Keep it and the
# table of docs/architecture.md ("Inside batching/") the same. batch_kernel is the kernels' object
# (kernels/, built by nvcc), which names nothing of batching/. A unit that a build lacks (cuda and
# batch_kernel without nvcc, cuda_fault and fake_stream outside the test builds) is simply not seen.
Rule = collections.namedtuple('Rule', 'layer uses')
BATCHING = {
    'base': Rule(0, set()),
    'copy_crew': Rule(0, set()),
    'reg_cache': Rule(0, set()),
    'settings': Rule(0, set()),
    'chunk_plan': Rule(0, set()),
    'batch_kernel': Rule(0, set()),
    'stage': Rule(1, {'base'}),
    'key_table': Rule(1, {'base'}),
    'async_wait': Rule(1, {'base'}),
    'core': Rule(1, {'base'}),
    'exec_cpu': Rule(1, {'base'}),
    'cuda_fault': Rule(1, {'settings'}),
    'fake_stream': Rule(0, set()),
    # The policy reaches the executors, keys, messages and the queue only through the
    # gp_policy_ops the engine gives it (batching/policy/policy.h).
    'policy': Rule(1, {'settings', 'base'}),
    'kstate': Rule(2, {'core'}),
    'queue': Rule(2, {'stage', 'async_wait', 'base'}),
    'exec_host': Rule(3, {'kstate', 'core', 'stage', 'fake_stream', 'base'}),
    # cuda/: the cuda executor, its files calling one way inside (batching/cuda/internal.h).
    'cuda': Rule(3, {'kstate', 'core', 'key_table', 'stage', 'copy_crew', 'reg_cache', 'chunk_plan', 'async_wait',
                     'cuda_fault', 'base', 'batch_kernel'}),
    # exec_cpu and exec_host: their tables, and outside them the cpu lane's calls and the host
    # pool's stop (batching/executor.h); async_wait: the module pin it hands the policy; kstate:
    # what of a message's kernel state the cpu executor can take on after a GPU failure.
    # reg_cache: its memory hooks go in when the engine is made (batching/reg_cache.h).
    'engine': Rule(4, {'policy', 'queue', 'cuda', 'exec_host', 'exec_cpu', 'kstate', 'core', 'async_wait',
                       'settings', 'reg_cache', 'base'}),
}
# provider/'s files, the same way (docs/architecture.md, "Inside provider/"). Everything here may also
# call batching/ (the layer below the provider), which this table does not list.
_LANE_DOWN = {'cipher_ctx', 'params', 'errors'}
PROVIDER = {
    'errors': Rule(0, set()),
    'params': Rule(1, {'errors'}),
    'cipher_ctx': Rule(1, {'errors'}),
    'knobs': Rule(1, {'errors'}),
    'passthrough': Rule(1, {'errors'}),
    'cpu_lane': Rule(2, _LANE_DOWN),
    'cipher_common': Rule(3, {'cpu_lane'} | _LANE_DOWN),
    'stream_common': Rule(4, {'cipher_common', 'cpu_lane'} | _LANE_DOWN),
    'aead_gcm': Rule(4, {'cipher_common', 'cpu_lane'} | _LANE_DOWN),
    'aead_chachapoly': Rule(4, {'cipher_common', 'cpu_lane'} | _LANE_DOWN),
    'pipeline': Rule(4, {'cipher_common', 'cpu_lane'} | _LANE_DOWN),
    'aead_common': Rule(5, {'aead_gcm', 'aead_chachapoly', 'pipeline', 'cipher_common', 'cpu_lane'} | _LANE_DOWN),
    'dispatch': Rule(6, {'cipher_common', 'stream_common', 'aead_common', 'aead_gcm', 'aead_chachapoly',
                         'pipeline'}),
    'cipher_aes_ctr': Rule(7, {'dispatch', 'stream_common', 'pipeline', 'cipher_common'}),
    'cipher_chacha20': Rule(7, {'dispatch', 'stream_common', 'pipeline', 'cipher_common'}),
    'cipher_aes_gcm': Rule(7, {'dispatch', 'aead_common', 'aead_gcm', 'pipeline', 'cipher_common'}),
    'cipher_chacha20_poly1305': Rule(7, {'dispatch', 'aead_common', 'aead_chachapoly', 'pipeline',
                                         'cipher_common'}),
    'prov': Rule(8, {'cipher_aes_ctr', 'cipher_chacha20', 'cipher_aes_gcm', 'cipher_chacha20_poly1305',
                     'passthrough', 'knobs', 'errors'}),
}
TABLES = {'batching': BATCHING, 'provider': PROVIDER}


def table_from_allow(specs):
    """--allow UNIT:USED,USED... (first lowest) -> {unit: Rule}."""
    table = {}
    for layer, spec in enumerate(specs):
        unit, sep, used = spec.partition(':')
        if not sep or not unit:
            raise ValueError('--allow %r: UNIT:USED,USED... expected' % spec)
        table[unit] = Rule(layer, {u for u in used.split(',') if u})
    return table


def table_errors(table):
    """A table's own faults: a unit that may use one it does not list, or one not below it."""
    errs = []
    for unit, rule in sorted(table.items()):
        for used in sorted(rule.uses):
            if used not in table:
                errs.append('%s may use %s, which the table does not list' % (unit, used))
            elif table[used].layer >= rule.layer:
                errs.append('%s (layer %d) may use %s (layer %d), not below it'
                            % (unit, rule.layer, used, table[used].layer))
    return errs


def source_units(src):
    """Meson's object name of each source ('core/key.c' -> 'core_key.c.o') -> its unit."""
    units = {}
    for root, _dirs, files in os.walk(src):
        for f in files:
            if not f.endswith('.c'):
                continue
            rel = os.path.relpath(os.path.join(root, f), src)
            parts = rel.split(os.sep)
            unit = parts[0] if len(parts) > 1 else f[:-2]
            units['_'.join(parts) + '.o'] = unit
    return units


def unit_of(member, units):
    name = os.path.basename(member)
    if name in units:
        return units[name]
    # Not built from a source under --src (an old tree's layout): one unit per source file.
    return re.sub(r'\.(c|cu)\.o$|\.o$', '', name)


def read_symbols(paths, units):
    """{unit: (defined set, undefined set)} from `nm -A` over objects and archives."""
    defs, uses = {}, {}
    for path in paths:
        out = subprocess.run(['nm', '-A', path], check=True, capture_output=True, text=True).stdout
        for line in out.splitlines():
            # archive.a:member.o:ADDR T sym | obj.o:ADDR T sym | ...:         U sym
            m = re.match(r'^(.*?):\s*(?:[0-9a-fA-F]+)?\s+([A-Za-z])\s+(\S+)$', line)
            if m is None:
                continue
            where, kind, sym = m.groups()
            member = where.split(':')[-1]
            if path.endswith('.a') and ':' not in where:
                continue   # the archive's index
            unit = unit_of(member, units)
            if kind == 'U':
                uses.setdefault(unit, set()).add(sym)
            elif kind in 'TDBRCGSVW':   # defined, global
                defs.setdefault(unit, set()).add(sym)
    return defs, uses


def strip_code(text):
    """C text without comments, string and character literals (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append('\n' * text.count('\n', i, j))
            i = j
        elif text.startswith('//', i):
            j = text.find('\n', i)
            i = n if j < 0 else j
        elif c in '"\'':
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == '\\' else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return ''.join(out)


INLINE_DEF = re.compile(r'\bstatic\s+(?:__attribute__\s*\(\(.*?\)\)\s*)?inline\b[^;{}()]*?\b([A-Za-z_]\w*)\s*\([^;{}]*\)\s*\{')
MACRO_DEF = re.compile(r'^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)\(', re.M)
IDENT = re.compile(r'[A-Za-z_]\w*')


def header_unit(rel):
    """The unit of a source or header path under --src: x.c and x.h are unit x, a subfolder's files
    are the subfolder."""
    parts = rel.split(os.sep)
    return parts[0] if len(parts) > 1 else re.sub(r'\.(c|h|cu)$', '', parts[0])


def header_bodies(code):
    """The parts of a header that run: inline functions' bodies and function-like macros' bodies
    (a prototype or a struct that mentions a name calls nothing)."""
    out, depth = [], 0
    for line in code.split('\n'):
        m = MACRO_DEF.match(line)
        if m is not None and depth == 0:
            out.append(line[m.end():])
            continue
        for c in line:
            if c == '{':
                depth += 1
            elif c == '}':
                depth = max(depth - 1, 0)
            elif depth > 0:
                out.append(c)
        out.append('\n')
    # macro continuation lines are kept whole (they follow a #define ending in a backslash)
    return ''.join(out)


def read_source(src):
    """What the object files cannot show, read from the source as a reader reads it: each unit's
    static inline functions and function-like macros ({unit: names}); the names each unit's .c
    files mention, and those its headers' inline functions and macros mention ({unit: names}, the
    second for names any unit defines). A call to an inline function or a macro is a call to the
    unit that defines it; a header's inline function calls what it names."""
    defs, uses, header_uses = {}, {}, {}
    for root, _dirs, files in os.walk(src):
        for f in files:
            if not f.endswith(('.c', '.h')):
                continue
            path = os.path.join(root, f)
            unit = header_unit(os.path.relpath(path, src))
            with open(path, encoding='utf-8', errors='replace') as fh:
                code = strip_code(fh.read())
            found = set(INLINE_DEF.findall(code)) | set(MACRO_DEF.findall(code))
            defs.setdefault(unit, set()).update(found)
            uses.setdefault(unit, set()).update(IDENT.findall(code))
            if f.endswith('.h'):
                header_uses.setdefault(unit, set()).update(IDENT.findall(header_bodies(code)))
    # A name two units define (a file-local namesake) is no unit's to claim.
    owners = collections.Counter(n for names in defs.values() for n in names)
    defs = {u: {n for n in names if owners[n] == 1} for u, names in defs.items()}
    return defs, uses, header_uses


def edges_of(defs, uses):
    owner = {}
    for unit, syms in defs.items():
        for s in syms:
            owner.setdefault(s, unit)
    edges = {}
    for unit, syms in uses.items():
        for s in syms:
            to = owner.get(s)
            if to is not None and to != unit:
                edges.setdefault(unit, {}).setdefault(to, set()).add(s)
    return edges


def strongly_connected(nodes, edges):
    """Tarjan's algorithm: the components with more than one unit are the cycles."""
    index, low, on, stack, comps, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, {})):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            comps.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return [c for c in comps if len(c) > 1]


def a_cycle(comp, edges):
    """One cycle through the component's first unit (breadth-first back to it)."""
    start, inside = comp[0], set(comp)
    prev, frontier = {start: None}, [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(edges.get(v, {})):
                if w not in inside:
                    continue
                if w == start:
                    path = [v]
                    while prev[path[-1]] is not None:
                        path.append(prev[path[-1]])
                    return [start] + list(reversed(path[:-1])) + [start] if len(path) > 1 else [start, v, start]
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return comp


def layers(nodes, edges):
    """Each unit's height: 0 for units that use none, else one more than the highest it uses."""
    height = {}

    def h(v, seen=()):
        if v in height:
            return height[v]
        if v in seen:
            return 0
        height[v] = 1 + max((h(w, seen + (v,)) for w in edges.get(v, {})), default=-1)
        return height[v]

    for v in nodes:
        h(v)
    return height


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--src', required=True, help='the source folder (batching/, provider/)')
    ap.add_argument('--table', choices=sorted(TABLES), help='check every edge against this layer table')
    ap.add_argument('--allow', action='append', default=[], metavar='UNIT:USED,...',
                    help='a layer table of its own, lowest unit first (instead of --table)')
    ap.add_argument('objects', nargs='+', help='object files or static libraries of batching/')
    args = ap.parse_args()
    table = None
    try:
        if args.table and args.allow:
            raise ValueError('--table and --allow: one or the other')
        table = TABLES[args.table] if args.table else table_from_allow(args.allow) if args.allow else None
    except ValueError as err:
        print('unit_graph: %s' % err)
        return 2
    if table is not None and table_errors(table):
        for err in table_errors(table):
            print('unit_graph: the layer table is wrong: %s' % err)
        return 2
    units = source_units(args.src)
    defs, uses = read_symbols(args.objects, units)
    # Inline functions and macros leave no symbol behind: their calls are read from the source.
    src_defs, src_uses, header_uses = read_source(args.src)
    symbols = {n for ns in defs.values() for n in ns}
    for unit, names in src_defs.items():
        if names:
            defs.setdefault(unit, set()).update(names)
    for unit in set(src_uses) | set(header_uses):
        inline_names = {n for u, ns in src_defs.items() if u != unit for n in ns}
        used = (src_uses.get(unit, set()) & inline_names) | (header_uses.get(unit, set()) & (inline_names | symbols))
        if used:
            uses.setdefault(unit, set()).update(used)
    nodes = set(defs) | set(uses)
    # Objects not built from a source under --src (the kernels' object) are listed, not checked:
    # they name nothing of batching/.
    outside = {n for n in nodes if n not in set(units.values()) | set(src_defs)}
    edges = edges_of(defs, uses)
    comps = strongly_connected(nodes, edges)
    height = layers(nodes, edges) if not comps else {}

    if not nodes & (set(units.values()) | set(src_defs)):
        print('unit_graph: no object built from a source under %s: nothing was checked' % args.src)
        return 2
    print('units of %s and the units each one uses (symbols named):' % args.src)
    for v in sorted(nodes, key=lambda n: (-height.get(n, 0), n)):
        outs = edges.get(v, {})
        tag = ' [layer %d]' % height[v] if v in height else ''
        if table is not None and v in table:
            tag += ' [table: layer %d]' % table[v].layer
        print('  %s%s -> %s' % (v, tag, ', '.join(sorted(outs)) if outs else '(nothing)'))
        for w in sorted(outs):
            print('      %s: %s' % (w, ' '.join(sorted(outs[w]))))
    if outside:
        print('(objects not built from --src: %s)' % ', '.join(sorted(outside)))
    bad = 0
    if table is not None:
        for v in sorted(nodes):
            if v not in table:
                print('unit_graph: UNIT NOT IN THE TABLE: %s (add it, with its layer and what it may use)' % v)
                bad += 1
                continue
            for w in sorted(edges.get(v, {})):
                if w not in table[v].uses:
                    print('unit_graph: EDGE NOT ALLOWED: %s (layer %d) -> %s (layer %s)  (%s)'
                          % (v, table[v].layer, w, table[w].layer if w in table else '?',
                             ' '.join(sorted(edges[v][w]))))
                    print('    %s may use: %s' % (v, ', '.join(sorted(table[v].uses)) or 'nothing'))
                    bad += 1
    if not comps:
        print('unit_graph: no cycle among %d units' % len(nodes))
        if table is not None and not bad:
            print('unit_graph: every edge is one the layer table allows')
        return 1 if bad else 0
    for comp in comps:
        cyc = a_cycle(comp, edges)
        print('unit_graph: CYCLE among %d units {%s}; one cycle:' % (len(comp), ', '.join(comp)))
        for a, b in zip(cyc, cyc[1:]):
            print('    %s -> %s  (%s)' % (a, b, ' '.join(sorted(edges[a][b]))))
        print('  every use inside it:')
        for a in comp:
            for b in sorted(edges.get(a, {})):
                if b in comp:
                    print('    %s -> %s  (%s)' % (a, b, ' '.join(sorted(edges[a][b]))))
    return 1


if __name__ == '__main__':
    sys.exit(main())
