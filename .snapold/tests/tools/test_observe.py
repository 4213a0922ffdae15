#!/usr/bin/env python3
"""reel's machine-readable output, checked from outside as a user's script
would read it: `reel demo --json --trace --steps-csv`, `reel check --json`,
`reel inspect --json --dot --svg`. The trace must meet the Trace Event Format
(Chrome, Perfetto): a "traceEvents" array of complete events ("ph": "X")
with name, pid, tid, ts and dur in microseconds, dur >= 0, ts not
decreasing on a track, and events on one track nested or disjoint. The
pictures are rendered with Graphviz when `dot` is installed; the files are
left in OUTDIR (docs/inspect.md shows them).

usage: test_observe.py REEL_BINARY OUTDIR"""
import csv
import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

REEL, OUT = sys.argv[1], sys.argv[2]
os.makedirs(OUT, exist_ok=True)
ENV = dict(os.environ, REEL_BACKEND="host")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def reel(*args, rc=0):
    p = subprocess.run([REEL, *args], capture_output=True, text=True, env=ENV, timeout=300)
    check(p.returncode == rc, f"reel {' '.join(args)}: exit {p.returncode}, expected {rc}: {p.stderr[-500:]}")
    return p


def path(name):
    return os.path.join(OUT, name)


def check_trace(t, steps):
    check(isinstance(t, dict) and isinstance(t.get("traceEvents"), list), "trace: a traceEvents array")
    ev = t["traceEvents"]
    tracks = {}
    names = {}
    for e in ev:
        check(e.get("ph") in ("X", "M"), f"trace: phase {e.get('ph')}")
        for k in ("name", "ph", "pid", "tid"):
            check(k in e, f"trace: event without {k}: {e}")
        check(isinstance(e.get("pid"), int) and isinstance(e.get("tid"), int), f"trace: pid/tid integers: {e}")
        if e["ph"] == "M":
            check(e["name"] in ("process_name", "thread_name") and "name" in e.get("args", {}), f"trace: metadata {e}")
            names[(e["pid"], e["tid"])] = e["args"]["name"]
            continue
        check(isinstance(e.get("ts"), (int, float)) and e["ts"] >= 0, f"trace: ts {e}")
        check(isinstance(e.get("dur"), (int, float)) and e["dur"] >= 0, f"trace: dur >= 0 {e}")
        check(isinstance(e["name"], str) and e["name"], f"trace: a name {e}")
        tracks.setdefault((e["pid"], e["tid"]), []).append(e)
    for key, es in tracks.items():
        check(key in names, f"trace: track {key} has a name")
        open_ends = []  # end times of the enclosing events
        for a, b in zip(es, es[1:]):
            check(b["ts"] >= a["ts"], f"trace: ts decreases on track {key}: {a['ts']} then {b['ts']}")
        for e in es:
            end = e["ts"] + e["dur"]
            while open_ends and open_ends[-1] <= e["ts"] + 1e-3:
                open_ends.pop()
            check(not open_ends or end <= open_ends[-1] + 1e-3, f"trace: {e['name']} overlaps its neighbour on {key}")
            open_ends.append(end)
    loop = [e for e in tracks.get((1, 0), []) if e["name"].startswith("step ")]
    check(len(loop) == steps, f"trace: {len(loop)} step events, {steps} steps")
    eager = [e for e in loop if e["args"]["path"] == "eager"]
    check(all(e["args"]["reason"] for e in eager), "trace: each eager step has its reason")
    ops = [e for (pid, tid), es in tracks.items() if tid >= 10 for e in es]
    check(len(ops) > steps, f"trace: op spans per stream on the host backend ({len(ops)})")
    check(any("capture" in e["name"] for e in tracks.get((1, 1), [])), "trace: captures among the library events")


def demo():
    tr, cs = path("demo-trace.json"), path("demo-steps.csv")
    p = reel("demo", "--quiet", "--requests", "12", "--json", "--trace", tr, "--steps-csv", cs)
    s = json.loads(p.stdout)
    for k in ("steps", "replays", "eager_steps", "fallbacks", "latency_ms", "memory", "buckets", "hazards",
              "allocator", "checksum", "status"):
        check(k in s, f"summary: key {k}")
    check(s["status"] == "REEL_OK" and s["error"] is None, "summary: ok")
    check(s["steps"] == s["replays"] + s["eager_steps"] and s["steps"] > 0, "summary: steps = replays + eager")
    check(sum(s["fallbacks"].values()) == s["eager_steps"], "summary: fallbacks by reason add up")
    check(s["eager_steps"] > 0, "summary: the workload goes past the limits")
    check(0 < s["latency_ms"]["p50"] <= s["latency_ms"]["p99"], "summary: p50 <= p99")
    m = s["memory"]
    check(m["device_bytes"] == m["arena_bytes"] + m["static_bytes"] + m["graph_bytes"], "summary: device bytes")
    check(len(s["buckets"]) == 7 and all(b["arena_bytes"] <= m["arena_bytes"] for b in s["buckets"]),
          "summary: buckets")
    with open(cs) as f:
        rows = list(csv.DictReader(f))
    check(len(rows) == s["steps"], f"csv: {len(rows)} rows, {s['steps']} steps")
    check(all(r["path"] in ("replay", "eager") for r in rows), "csv: path")
    check(sum(r["path"] == "eager" for r in rows) == s["eager_steps"], "csv: eager rows")
    check(all((r["path"] == "eager") == bool(r["reason"]) for r in rows), "csv: a reason for each eager step")
    check(all(float(r["latency_ms"]) > 0 and int(r["tokens"]) > 0 for r in rows), "csv: latency and tokens")
    with open(tr) as f:
        check_trace(json.load(f), s["steps"])
    text = reel("demo", "--quiet", "--requests", "2", "--steps-csv", path("small.csv")).stdout
    check(not text.lstrip().startswith("{"), "demo without --json prints the text summary")
    reel("demo", "--trace", rc=2)
    reel("demo", "--trace", os.path.join(OUT, "no-such-dir", "t.json"), rc=2)  # refused before the run
    check("--steps-csv FILE" in reel("demo", "--help").stdout, "demo --help lists the observability options")
    check("--json" in reel("check", "--help").stdout, "check --help lists --json")
    check("--svg FILE" in reel("help", "inspect").stdout, "help inspect")


def check_cmd():
    s = json.loads(reel("check", "--quiet", "--requests", "4", "--json").stdout)
    check(s["command"] == "check" and s["hazards_checked"] and s["hazards"] == 0, "check --json: clean")


def inspect():
    s = json.loads(reel("inspect", "--json").stdout)
    check(s["command"] == "inspect" and s["num_nodes"] == len(s["nodes"]) > 0, "inspect --json: nodes")
    check(all(n["kernel"].startswith("host.") and n["why"] for n in s["nodes"]), "inspect --json: kernels")
    for b in s["buckets"]:
        check(len(b["placements"]) > 0, "inspect --json: placements")
        check(all(q["offset"] + q["bytes"] <= s["memory"]["arena_bytes"] for q in b["placements"]),
              "inspect --json: placements inside the arena")
    dot, svg = path("demo-plan.dot"), path("demo-memory.svg")
    text = reel("inspect", "--dot", dot, "--svg", svg).stdout
    check("why this kernel" in text and "lower bound" in text, "inspect: the tables")
    root = ET.parse(svg).getroot()
    titles = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text") if t.text and t.text.startswith("bucket ")]
    check(len(titles) == len(s["buckets"]), f"svg: one panel per bucket ({len(titles)})")
    with open(dot) as f:
        d = f.read()
    check(d.startswith("digraph") and d.count("{") == d.count("}"), "dot: a digraph")
    check(d.count(" -> n") >= s["num_nodes"] - 1, "dot: edges")
    if shutil.which("dot"):
        for fmt in ("svg", "png"):
            r = subprocess.run(["dot", "-T" + fmt, dot, "-o", path("demo-plan." + fmt)], capture_output=True, text=True)
            check(r.returncode == 0, f"dot -T{fmt}: {r.stderr}")
    else:
        print("note: Graphviz `dot` not installed: the DOT file is checked, not rendered")


demo()
check_cmd()
inspect()
print(f"{len(failures)} failure(s); files in {OUT}")
sys.exit(1 if failures else 0)
