#!/usr/bin/env python3
"""Every public struct of include/reel/*.h starts with the head (size_t size;
int version; uint32_t magic;) and has a _MAGIC and an _INIT, except the few
whose layout is fixed for good (named below, with why). Run by tests/core."""
import glob
import os
import re
import sys

FIXED = {
    "reel_tensor": "a handle: one id",
    "reel_comm_id": "opaque bytes of a fixed size",
    "reel_hazard_side": "only inside reel_hazard, which has the head",
}
HEAD = re.compile(r"\{\s*size_t size;[^\n]*\n\s*int version;[^\n]*\n\s*uint32_t magic;")


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    bad = []
    text = ""
    for path in sorted(glob.glob(os.path.join(root, "include", "reel", "*.h"))):
        with open(path, encoding="utf-8") as f:
            text += f.read()
    for m in re.finditer(r"typedef struct (reel_\w+) \{", text):
        name = m.group(1)
        if name in FIXED:
            continue
        up = name.upper()
        if not HEAD.match(text, m.end() - 1):
            bad.append(f"{name}: does not start with the head (size, version, magic)")
        if f"#define {up}_MAGIC " not in text:
            bad.append(f"{name}: no {up}_MAGIC")
        if f"#define {up}_INIT" not in text:
            bad.append(f"{name}: no {up}_INIT")
    for b in bad:
        print(b)
    print(f"heads: {len(bad)} struct(s) without the head" if bad else "heads: every public struct has the head")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
