#!/usr/bin/env python3
"""Fails when a file of reel includes a header of a higher layer.

The layers (docs/architecture.md; weights/, the checkpoint loader, is L6
above runtime/): a file may include headers of its own
folder's layer and of lower layers, never of a higher one; folders of one
layer (memory/ and ops/) do not include each other. include/reel/ is the
public surface: any file may include it. tools/ and examples/ use only the
public surface (and their own headers); tests/ and bench/ may include
anything. Run by the test suite (tests/core); also by hand:
    tools/check-layers.py [repository root]
"""
import os
import re
import sys

LAYER = {"core": 0, "backend": 1, "memory": 2, "ops": 2, "graph": 3, "parallel": 4, "runtime": 5, "weights": 6}
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


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    bad = check(root)
    for b in bad:
        print(b)
    print(f"layers: {len(bad)} upward include(s)" if bad else "layers: every include points down or sideways")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
