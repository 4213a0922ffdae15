#!/usr/bin/env python3
"""The Python package (python/reel) on the host backend, with numpy.

  test_reel.py REEL_BINARY [--backend host|cuda] [--torch]

Writes the demo's seeded model as a checkpoint (reel demo --save-model),
opens it from Python, and checks: the generated ABI against the structs'
heads; greedy tokens from Python equal the C program's (reel demo --model
--prompt --generate); reel_step_n's tokens equal single steps'; outputs come
out through DLPack without a copy and refuse once the plan stepped on;
inputs go in from numpy and DLPack producers; refused calls raise
reel.Error with the library's message and leave the plan usable; thousands
of steps do not grow the process. With --torch (the GPU machine): the same
through torch tensors, CUDA ones included. Exits 77 (skip) without numpy.
"""
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    print("test_reel.py: numpy is not installed: skipped")
    sys.exit(77)

import reel

SMALL = ["--layers", "2", "--hidden", "64", "--heads", "2", "--vocab", "256", "--block-size", "8"]
PROMPT = [5, 17, 42, 7, 99, 3]
GEN = 12
BS = 8


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def c_tokens(binary, backend, model_dir):
    """The C program's greedy tokens for PROMPT."""
    out = subprocess.run([binary, "demo", "--backend", backend, "--model", model_dir, "--prompt",
                          ",".join(map(str, PROMPT)), "--generate", str(GEN)],
                         check=True, capture_output=True, text=True).stdout
    m = re.search(r"generated\s+\d+ tokens:([\d ]+)", out)
    check(m, "no generated tokens in the demo's output:\n" + out)
    return [int(x) for x in m.group(1).split()]


def test_abi():
    for name, spec in reel.STRUCTS.items():
        s = reel.Struct(name)
        fields = {f[0] for f in spec["fields"]}
        if "magic" in fields:
            check(s.size == spec["size"], "%s: size %d in its _INIT, %d by sizeof" % (name, s.size, spec["size"]))
            check(s.version == reel.VERSION_NUMBER, "%s: version" % name)
            check(s.magic != 0, "%s: no magic in its _INIT" % name)
        offs = sorted(f[1] for f in spec["fields"])
        check(all(0 <= o < spec["size"] for o in offs), "%s: an offset outside the struct" % name)
    o = reel.Struct("reel_compile_opts")
    check(o.max_context == reel.UNDEF_INT, "an undefined option reads REEL_UNDEF_INT")
    o.buckets = [1, 2, 4]
    check(o.buckets[:3] == [1, 2, 4], "an array field round-trips")
    try:
        o.nope = 1
        check(False, "an unknown field was accepted")
    except AttributeError:
        pass


def decode_info(ctx_len, slot):
    return dict(num_tokens=1, num_seqs=1, query_start=[0, 1], positions=[ctx_len - 1], slot_mapping=[slot],
                context_lens=[ctx_len], block_tables=[list(range(16))])


def generate(plan, n_steps):
    """Prefill PROMPT, then greedy single steps: the tokens, one per step."""
    T = len(PROMPT)
    plan.set_input("tokens", np.array(PROMPT, np.int32))
    plan.step(num_tokens=T, num_seqs=1, query_start=[0, T], positions=np.arange(T, dtype=np.int32),
              slot_mapping=np.arange(T, dtype=np.int32), context_lens=[T], block_tables=[list(range(16))])
    out = [plan.output("next_token").tolist()[-1]]
    for i in range(n_steps - 1):
        ctx_len = T + 1 + i
        plan.set_input("tokens", np.array([out[-1]], np.int32))
        plan.step(**decode_info(ctx_len, ctx_len - 1))
        out.append(int(np.from_dlpack(plan.output("next_token"))[0]))
    return out


def test_model(binary, backend, model_dir, use_torch):
    want = c_tokens(binary, backend, model_dir)
    ctx = reel.Context(backend)
    m = reel.Model.open(ctx, model_dir)
    info = m.info()
    check(info["layers"] == 2 and info["hidden"] == 64, "model info: %r" % info)
    # the demo's buckets and limits: the same kernels as the C program at every step
    plan = m.compile(buckets=[1, 2, 4, 8, 16, 32, 64], max_context=256, max_seqs=16, block_size=BS, num_blocks=64)
    m.close()
    got = generate(plan, GEN)
    check(got == want, "Python's tokens %s, the C program's %s" % (got, want))

    # outputs: a view, not a copy, until the next step
    out = plan.output("next_token")
    arr = np.from_dlpack(out)
    check(arr.ctypes.data == out._data, "np.from_dlpack copied the output")
    check(arr.dtype == np.int32 and arr.shape == (1,), "output dtype/shape %s %s" % (arr.dtype, arr.shape))
    plan.set_input("tokens", np.array([got[-1]], np.int32))
    plan.step(**decode_info(len(PROMPT) + GEN, len(PROMPT) + GEN - 1))
    try:
        np.from_dlpack(out)
        check(False, "an output of an earlier step was exported")
    except BufferError:
        pass

    # reel_step_n: the same tokens as single steps, in one call
    T = len(PROMPT)
    plan.set_input("tokens", np.array(PROMPT, np.int32))
    plan.step(num_tokens=T, num_seqs=1, query_start=[0, T], positions=list(range(T)), slot_mapping=list(range(T)),
              context_lens=[T], block_tables=[list(range(16))])
    first = plan.output("next_token").tolist()[-1]
    plan.set_input("tokens", [first])
    rows, steps = plan.step_n(GEN - 1, "tokens", "next_token", **decode_info(T + 1, T))
    check(steps == [GEN - 1], "step_n ran %s steps" % steps)
    check([first] + [r[0] for r in rows] == want, "step_n's tokens %s, single steps' %s" % (rows, want))
    st = plan.stats()
    check(st["loop_calls"] == 1 and st["loop_steps"] == GEN - 1, "loop stats %r" % st)
    check(len(plan.nodes()) == st["num_nodes"], "node infos")

    # refusals raise reel.Error with the library's message; the plan goes on
    for call, status, text in (
            (lambda: plan.set_input("nope", np.zeros(1, np.int32)), "REEL_E_NOT_FOUND", "nope"),
            (lambda: plan.step(num_tokens=0), "REEL_E_INVALID_ARG", "num_tokens"),
            (lambda: plan.output("nope"), "REEL_E_NOT_FOUND", "nope"),
            (lambda: plan.step_n(0, "tokens", "next_token", **decode_info(T + 1, T)), "REEL_E_INVALID_ARG",
             "max_steps")):
        try:
            plan.set_input("tokens", [first])
            call()
            check(False, "no error for a refused call (%s)" % status)
        except reel.Error as e:
            check(e.name == status and text in e.message, "raised %s '%s', want %s naming '%s'" %
                  (e.name, e.message, status, text))
    check(generate(plan, 4) == want[:4], "the plan after refusals")

    if use_torch:
        import torch
        dev = "cuda" if backend == "cuda" else "cpu"
        plan.set_input("tokens", torch.tensor(PROMPT, dtype=torch.int32, device=dev))
        plan.step(num_tokens=T, num_seqs=1, query_start=[0, T], positions=list(range(T)),
                  slot_mapping=list(range(T)), context_lens=[T], block_tables=[list(range(16))])
        t = torch.from_dlpack(plan.output("next_token"))
        check(int(t[-1]) == want[0], "torch: %d, want %d" % (int(t[-1]), want[0]))

    # no growth over many steps (host memory: ru_maxrss after a warm-up)
    for _ in range(200):
        plan.set_input("tokens", [first])
        plan.step(**decode_info(T + 1, T))
        plan.output("next_token").tolist()
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for _ in range(3000):
        plan.set_input("tokens", np.array([first], np.int32))
        plan.step(**decode_info(T + 1, T))
        np.from_dlpack(plan.output("next_token"))
    grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0
    check(grew < 4096, "3000 steps grew the process by %d KiB" % grew)
    plan.close()
    ctx.close()


def test_example(model_dir, backend):
    """examples/serve.py: the tokens of its bursts (reel_step_n) equal its single steps'."""
    ex = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "serve.py")
    outs = []
    for burst in ("8", "1"):
        r = subprocess.run([sys.executable, ex, model_dir, "--backend", backend, "--requests", "5", "--generate",
                            "12", "--burst", burst], check=True, capture_output=True, text=True)
        outs.append([l for l in r.stdout.splitlines() if l.startswith("request")])
        if burst == "8":
            check("in reel_step_n bursts 0)" not in r.stdout, "serve.py ran no burst:\n" + r.stdout)
    check(len(outs[0]) == 5 and outs[0] == outs[1], "serve.py: bursts %s, single steps %s" % (outs[0], outs[1]))


def main():
    binary = sys.argv[1]
    backend = "cuda" if "--backend" in sys.argv and sys.argv[sys.argv.index("--backend") + 1] == "cuda" else "host"
    if backend == "cuda":  # the GPU suite's rule: no GPU (or no torch), a skip
        try:
            reel.Context("cuda").close()
        except reel.Error as e:
            print("test_reel.py: no CUDA device (%s): skipped" % e.message)
            sys.exit(77)
        if "--torch" in sys.argv:
            try:
                import torch  # noqa: F401
            except ImportError:
                print("test_reel.py: torch is not installed: skipped")
                sys.exit(77)
    d = tempfile.mkdtemp(prefix="reel-py-")
    try:
        model_dir = os.path.join(d, "model")
        subprocess.run([binary, "demo", "--backend", backend] + SMALL + ["--save-model", model_dir, "--steps", "1",
                                                                          "--quiet"], check=True, capture_output=True)
        test_abi()
        test_model(binary, backend, model_dir, "--torch" in sys.argv)
        test_example(model_dir, backend)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print("test_reel.py: ok")


if __name__ == "__main__":
    main()
