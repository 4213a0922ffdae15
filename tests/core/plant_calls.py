#!/usr/bin/env python3
"""The call check of tools/check-layers.py on a planted tree: a small copy of
the layout compiled with cc, once clean (must pass), once with an upward call
written through a hand-made declaration and once with a circle between two
files of one folder (each must fail, naming the call). Run by tests/core."""
import json
import os
import subprocess
import sys
import tempfile

CHECK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "check-layers.py")

CLEAN = {
    "core/a.c": "int core_b(void);\nint core_a(void);\nint core_a(void) { return core_b(); }\n",
    "core/b.c": "int core_b(void);\nint core_b(void) { return 1; }\n",
    "graph/g.c": "int core_a(void);\nint graph_g(void);\nint graph_g(void) { return core_a(); }\n",
}
UPWARD = dict(CLEAN, **{
    "core/b.c": "int graph_g(void);\nint core_b(void);\nint core_b(void) { return graph_g(); }\n",
})
CIRCLE = dict(CLEAN, **{
    "core/b.c": "int core_a(void);\nint core_b(void);\nint core_b(void) { return core_a(); }\n",
})


def run(files):
    with tempfile.TemporaryDirectory() as root:
        build = os.path.join(root, "build")
        os.makedirs(build)
        entries = []
        for rel, text in files.items():
            os.makedirs(os.path.join(root, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w", encoding="utf-8") as f:
                f.write(text)
            obj = rel.replace("/", "_") + ".o"
            subprocess.run(["cc", "-c", "-o", os.path.join(build, obj), os.path.join("..", rel)],
                           cwd=build, check=True)
            entries.append({"directory": build, "file": os.path.join("..", rel), "output": obj})
        with open(os.path.join(build, "compile_commands.json"), "w", encoding="utf-8") as f:
            json.dump(entries, f)
        r = subprocess.run([sys.executable, CHECK, root, "--build", build], capture_output=True, text=True)
        return r.returncode, r.stdout


def main():
    fails = []
    rc, out = run(CLEAN)
    if rc != 0:
        fails.append("the clean tree was refused:\n" + out)
    rc, out = run(UPWARD)
    if rc == 0 or "core/b.c: L0 core/ calls graph_g of graph/g.c, a higher layer" not in out:
        fails.append("the planted upward call was not refused:\n" + out)
    rc, out = run(CIRCLE)
    if rc == 0 or "core/: a circle of calls between core/a.c, core/b.c" not in out:
        fails.append("the planted circle was not refused:\n" + out)
    for f in fails:
        print(f)
    print("plant_calls: " + ("%d case(s) wrong" % len(fails) if fails else "clean passes, upward call and circle refused"))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
