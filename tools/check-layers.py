#!/usr/bin/env python3
"""Fails when a file of reel includes a header of a higher layer, and, given
a build folder, when a file calls into a higher layer or the files of one
folder call each other in a circle.

The layers (docs/architecture.md; weights/, the checkpoint loader, is L6
above runtime/, and models/, the model definitions, L7 above it): a file
may include headers of its own folder's layer and of lower layers, never
of a higher one; folders of one layer (memory/ and ops/) do not include
each other. include/reel/ is the
public surface: any file may include it. tools/ and examples/ use only the
public surface (and their own headers); tests/ and bench/ may include
anything.

With --build DIR, the calls are read from the library's objects (the
symbols each one defines and uses, through nm; the objects are those
DIR/compile_commands.json names for sources of the layers): a use of a
symbol defined in a higher layer or a sibling is an upward call, even
through a declaration written by hand; inside one folder (backend/host,
backend/cuda and backend/ count as one folder each), the files' calls must
form no circle: one file is each folder's floor and calls go one way.
(The build also links each layer against the layers below it only, with no
symbol left undefined: meson.build.)

Run by the test suite (tests/core); also by hand:
    tools/check-layers.py [repository root] [--build DIR]
"""
import collections
import json
import os
import re
import subprocess
import sys

LAYER = {"core": 0, "backend": 1, "memory": 2, "ops": 2, "graph": 3, "parallel": 4, "runtime": 5, "weights": 6,
         "models": 7}
PUBLIC_ONLY = {"tools", "examples"}
ANYTHING = {"tests", "bench", "include"}
SOURCES = (".c", ".h", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def top(path):
    return path.split("/", 1)[0]


def check(root):
    bad = []
    for folder in sorted(LAYER.keys() | PUBLIC_ONLY):
        for dirpath, _, files in os.walk(os.path.join(root, folder)):
            for name in sorted(files):
                if not name.endswith(SOURCES):
                    continue
                path = os.path.relpath(os.path.join(dirpath, name), root)
                with open(os.path.join(root, path), encoding="utf-8") as f:
                    for lineno, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        inc = m.group(1)
                        to = top(inc)
                        if "/" not in inc or to == "reel" or inc == "reel_config.h":
                            continue  # own folder (relative), public header, build config
                        if folder in PUBLIC_ONLY:
                            if to != folder:
                                bad.append(f"{path}:{lineno}: {folder}/ uses the public API only, includes \"{inc}\"")
                            continue
                        if to not in LAYER:
                            bad.append(f"{path}:{lineno}: includes \"{inc}\", outside the layers")
                        elif to != folder and LAYER[to] >= LAYER[folder]:
                            how = "a higher layer" if LAYER[to] > LAYER[folder] else "a sibling of its layer"
                            bad.append(f"{path}:{lineno}: L{LAYER[folder]} {folder}/ includes \"{inc}\", {how} "
                                       f"(L{LAYER[to]} {to}/)")
    return bad


def objects(root, build):
    """{source path relative to root: object path} for the layers' sources."""
    with open(os.path.join(build, "compile_commands.json"), encoding="utf-8") as f:
        entries = json.load(f)
    root = os.path.realpath(root)
    out = {}
    for e in entries:
        src = os.path.realpath(os.path.join(e["directory"], e["file"]))
        rel = os.path.relpath(src, root)
        if top(rel) not in LAYER or rel in out:
            continue   # tools, tests, bench; a source built twice counts once
        obj = os.path.join(e["directory"], e["output"])
        if os.path.exists(obj):
            out[rel] = obj
    return out


def symbols(obj):
    """(defined, used) global symbol names of one object file."""
    r = subprocess.run(["nm", "-P", obj], capture_output=True, text=True, check=True)
    defined, used = set(), set()
    for line in r.stdout.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        if parts[1] == "U":
            used.add(parts[0])
        elif parts[1] in "TDBRVWG":   # global text, data, bss, read-only, weak
            defined.add(parts[0])
    return defined, used


def circles(nodes, edges):
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index, low, on, stack, out, n = {}, {}, set(), [], [], 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = n
        n += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = n
                    n += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def check_calls(root, build):
    objs = objects(root, build)
    if not objs:
        return [f"{build}: no object of the layers found (is it a built meson folder?)"]
    defs, uses = {}, {}
    for src, obj in sorted(objs.items()):
        d, u = symbols(obj)
        uses[src] = u
        for name in d:
            defs.setdefault(name, src)
    bad = []
    calls = collections.defaultdict(set)   # (caller, callee) -> symbols
    for src in sorted(uses):
        for name in sorted(uses[src]):
            to = defs.get(name)
            if not to or to == src:
                continue
            a, b = top(src), top(to)
            if a != b and LAYER[b] >= LAYER[a]:
                how = "a higher layer" if LAYER[b] > LAYER[a] else "a sibling of its layer"
                bad.append(f"{src}: L{LAYER[a]} {a}/ calls {name} of {to}, {how} (L{LAYER[b]} {b}/)")
            calls[(src, to)].add(name)
    edges = collections.defaultdict(set)
    for (a, b) in calls:
        if os.path.dirname(a) == os.path.dirname(b):
            edges[a].add(b)
    for comp in circles(sorted(uses), edges):
        inside = set(comp)
        bad.append(f"{os.path.dirname(comp[0])}/: a circle of calls between " + ", ".join(comp) + ":")
        for a in comp:
            for b in sorted(edges[a] & inside):
                bad.append(f"    {a} -> {b} ({', '.join(sorted(calls[(a, b)])[:3])})")
    return bad


def main():
    args = sys.argv[1:]
    build = None
    if "--build" in args:
        i = args.index("--build")
        if i + 1 >= len(args):
            print("usage: tools/check-layers.py [root] [--build DIR]", file=sys.stderr)
            return 2
        build = args[i + 1]
        del args[i:i + 2]
    root = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    bad = check(root)
    for b in bad:
        print(b)
    print(f"layers: {len(bad)} upward include(s)" if bad else "layers: every include points down or sideways")
    if build is None:
        return 1 if bad else 0
    cbad = check_calls(root, build)
    for b in cbad:
        print(b)
    print(f"calls: {sum(1 for b in cbad if not b.startswith(' '))} upward call(s) or circle(s)" if cbad
          else "calls: every call points down or sideways, no circle inside a folder")
    return 1 if bad or cbad else 0


if __name__ == "__main__":
    sys.exit(main())
