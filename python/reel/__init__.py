"""reel from Python: a thin layer over libreel's C ABI (ctypes; no compiled
extension, so no Python ABI to match). Struct layouts and constants come from
reel/_abi.py, which the build generates by compiling a program against the
installed headers (python/gen_abi.py): they cannot drift from the library.

    import numpy as np, reel
    ctx = reel.Context("host")
    m = reel.Model.open(ctx, "/path/to/Llama-3.2-1B")
    plan = m.compile(buckets=[1, 8], max_context=2048, max_seqs=8, sample=True)
    plan.set_input("tokens", np.array([1, 2, 3], np.int32))
    plan.step(num_tokens=3, num_seqs=1, query_start=[0, 3], positions=[0, 1, 2], ...)
    next_ids = np.from_dlpack(plan.output("next_token"))

Every failed call raises reel.Error carrying the status and the context's
message (the op, tensor or limit at fault). Tensors come in through DLPack
(numpy arrays, torch tensors; CUDA tensors are copied to the host, where
reel_plan_set_input reads them) and outputs go out through DLPack without a
copy: a view of the plan's output buffer, valid until the plan's next step
(docs/python.md).
"""
import ctypes
import ctypes.util
import os

from . import _abi
from . import dlpack as _dl

STRUCTS = _abi.STRUCTS
C = _abi.CONSTANTS
globals().update({k[5:] if k.startswith("REEL_") else k: v for k, v in C.items()})

_STATUS = {v: k for k, v in C.items() if k.startswith("REEL_OK") or k.startswith("REEL_E_")}


def _load():
    names = [os.environ.get("REEL_LIBRARY"), os.path.join(os.path.dirname(__file__), "libreel.so"),
             ctypes.util.find_library("reel"), "libreel.so.0", "libreel.so"]
    errors = []
    for n in names:
        if not n:
            continue
        try:
            return ctypes.CDLL(n)
        except OSError as e:
            errors.append(str(e))
    raise ImportError("reel: libreel.so not found (set REEL_LIBRARY): " + "; ".join(errors))


lib = _load()
_vp, _i32, _i64, _cp = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_char_p
_SIGS = {
    "reel_version": (_i32, []),
    "reel_status_str": (_cp, [_i32]),
    "reel_ctx_create": (_i32, [_vp, ctypes.POINTER(_vp)]),
    "reel_ctx_destroy": (None, [_vp]),
    "reel_ctx_last_error": (_cp, [_vp]),
    "reel_ctx_backend": (_i32, [_vp]),
    "reel_backend_name": (_cp, [_i32]),
    "reel_backend_parse": (_i32, [_cp, ctypes.POINTER(_i32)]),
    "reel_fallback_str": (_cp, [_i32]),
    "reel_plan_destroy": (None, [_vp]),
    "reel_plan_set_input": (_i32, [_vp, _cp, _vp, _i64]),
    "reel_step": (_i32, [_vp, _vp]),
    "reel_step_n": (_i32, [_vp, _vp, _vp]),
    "reel_plan_output": (_i32, [_vp, _cp, ctypes.POINTER(_vp), ctypes.POINTER(_i64)]),
    "reel_plan_output_desc": (_i32, [_vp, _cp, ctypes.POINTER(_i32), ctypes.POINTER(_i64)]),
    "reel_plan_read_state": (_i32, [_vp, _cp, _vp, ctypes.c_size_t]),
    "reel_plan_write_state": (_i32, [_vp, _cp, _vp, ctypes.c_size_t]),
    "reel_plan_last_fallback": (_i32, [_vp]),
    "reel_plan_time_steps": (_i32, [_vp, _i32]),
    "reel_plan_last_step_device_us": (_i32, [_vp, ctypes.POINTER(ctypes.c_double)]),
    "reel_plan_stats_get": (_i32, [_vp, _vp]),
    "reel_plan_node_info": (_i32, [_vp, _i32, _vp]),
    "reel_plan_trace_ops": (_i32, [_vp, _i32]),
    "reel_plan_take_op_spans": (_i32, [_vp, _vp, _i32, ctypes.POINTER(_i32)]),
    "reel_model_open": (_i32, [_vp, _cp, ctypes.POINTER(_vp)]),
    "reel_model_close": (None, [_vp]),
    "reel_model_info_get": (_i32, [_vp, _vp]),
    "reel_model_compile": (_i32, [_vp, _vp, _vp, ctypes.POINTER(_vp)]),
}
for _n, (_r, _a) in _SIGS.items():
    _f = getattr(lib, _n)
    _f.restype, _f.argtypes = _r, _a

version = lib.reel_version()
if version // 100 != C["REEL_VERSION_NUMBER"] // 100:
    raise ImportError("reel: the package was built for reel %d, libreel is %d" % (C["REEL_VERSION_NUMBER"], version))


class Error(Exception):
    """A refused or failed call: .status (an int), .name ("REEL_E_LIMIT"), .message (the library's)."""

    def __init__(self, status, message):
        self.status = status
        self.name = _STATUS.get(status, "REEL_E_%d" % status)
        self.message = message
        super().__init__("%s: %s" % (self.name, message))


def _check(st, ctx):
    if st != 0:
        msg = lib.reel_ctx_last_error(ctx)
        raise Error(st, msg.decode("utf-8", "replace") if msg else "")


# ---- structs ----------------------------------------------------------------------------------

_FMT = {"bool": ctypes.c_bool, "char": ctypes.c_char, "i8": ctypes.c_int8, "u8": ctypes.c_uint8,
        "i16": ctypes.c_int16, "u16": ctypes.c_uint16, "i32": ctypes.c_int32, "u32": ctypes.c_uint32,
        "i64": ctypes.c_int64, "u64": ctypes.c_uint64, "f32": ctypes.c_float, "f64": ctypes.c_double,
        "ptr": ctypes.c_void_p, "str": ctypes.c_char_p}


class Struct:
    """One of reel's public structs, laid out as the C compiler lays it out,
    starting from its _INIT (so undefined options take the library's
    defaults). Fields read and write by name; pointer fields take an int
    address, None, bytes/str (kept alive here) or a numpy array (its data,
    kept alive)."""

    def __init__(self, name, **fields):
        spec = STRUCTS[name]
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_spec", {f[0]: f[1:] for f in spec["fields"]})
        object.__setattr__(self, "_buf", ctypes.create_string_buffer(bytes.fromhex(spec["init"]), spec["size"]))
        object.__setattr__(self, "_keep", {})
        for k, v in fields.items():
            setattr(self, k, v)

    @property
    def ref(self):
        return ctypes.byref(self._buf)

    @property
    def address(self):
        return ctypes.addressof(self._buf)

    def _field(self, k):
        try:
            return self._spec[k]
        except KeyError:
            raise AttributeError("reel: %s has no field %s" % (self._name, k)) from None

    def __getattr__(self, k):
        if k.startswith("_"):
            raise AttributeError(k)
        off, kind, count = self._field(k)
        if kind.startswith("struct:"):
            raise AttributeError("reel: %s.%s is a nested struct (read it with .nested)" % (self._name, k))
        t = _FMT[kind]
        if count:
            arr = (t * count).from_buffer(self._buf, off)
            return arr.raw.split(b"\0", 1)[0].decode() if kind == "char" else list(arr)
        v = t.from_buffer(self._buf, off).value
        return v.decode("utf-8", "replace") if kind == "str" and v is not None else v

    def __setattr__(self, k, v):
        off, kind, count = self._field(k)
        t = _FMT[kind]
        if count:
            arr = (t * count).from_buffer(self._buf, off)
            vals = list(v)
            if len(vals) > count:
                raise ValueError("reel: %s.%s holds %d values, %d given" % (self._name, k, count, len(vals)))
            for i, x in enumerate(vals):
                arr[i] = x
            return
        if kind in ("ptr", "str"):
            self._keep.pop(k, None)
            if v is None:
                v = 0
            elif isinstance(v, str):
                v = v.encode()
            if isinstance(v, bytes):
                b = ctypes.create_string_buffer(v)
                self._keep[k] = b
                v = ctypes.addressof(b)
            elif hasattr(v, "ctypes") and hasattr(v, "dtype"):  # a numpy array
                self._keep[k] = v
                v = v.ctypes.data
            ctypes.c_void_p.from_buffer(self._buf, off).value = v
            return
        t.from_buffer(self._buf, off).value = v

    def to_dict(self):
        out = {}
        for k, (off, kind, count) in self._spec.items():
            if k in ("size", "version", "magic") or kind.startswith("struct:") or kind in ("ptr",):
                continue
            out[k] = getattr(self, k)
        return out


# ---- arrays without numpy ------------------------------------------------------------------

def _i32_array(v, what):
    """An int32 C array from a sequence, a numpy array or a DLPack tensor (copied)."""
    if v is None:
        return None
    if hasattr(v, "__dlpack__") and not isinstance(v, (list, tuple)):
        with _dl.Imported(v) as t:
            if t.dtype != C["REEL_I32"] or t.device[0] not in (_dl.KDL_CPU, _dl.KDL_CUDA_HOST):
                raise TypeError("reel: %s must be a host int32 tensor" % what)
            n = _dl.prod(t.shape)
            a = (ctypes.c_int32 * max(n, 1))()
            ctypes.memmove(a, t.data, 4 * n)
            return a
    vals = [int(x) for x in (v.flatten() if hasattr(v, "flatten") else _flatten(v))]
    return (ctypes.c_int32 * max(len(vals), 1))(*vals)


def _flatten(v):
    for x in v:
        if isinstance(x, (list, tuple)):
            yield from _flatten(x)
        else:
            yield x


# ---- context -----------------------------------------------------------------------------------

class Context:
    """A reel context on a backend: "host", "cuda" or "auto" (REEL_BACKEND, else CUDA
    where there is a device)."""

    def __init__(self, backend="auto", device=0, matmul_tuning=None):
        k = ctypes.c_int(0)
        _check(lib.reel_backend_parse(backend.encode(), ctypes.byref(k)), None)
        o = Struct("reel_ctx_opts", backend=k.value, device=device)
        if matmul_tuning is not None:
            o.matmul_tuning = int(matmul_tuning)
        h = ctypes.c_void_p()
        _check(lib.reel_ctx_create(o.ref, ctypes.byref(h)), None)
        self._h = h

    @property
    def handle(self):
        if not self._h:
            raise Error(C["REEL_E_INVALID_USAGE"], "the context was closed")
        return self._h

    @property
    def backend(self):
        return lib.reel_backend_name(lib.reel_ctx_backend(self.handle)).decode()

    def close(self):
        if getattr(self, "_h", None):
            lib.reel_ctx_destroy(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()


# ---- models ------------------------------------------------------------------------------------

class Model:
    """A Hugging Face checkpoint through reel's models layer (config.json and safetensors)."""

    def __init__(self, ctx, handle):
        self.ctx, self._h = ctx, handle

    @classmethod
    def open(cls, ctx, path):
        h = ctypes.c_void_p()
        _check(lib.reel_model_open(ctx.handle, os.fsencode(path), ctypes.byref(h)), ctx.handle)
        return cls(ctx, h)

    def info(self):
        i = Struct("reel_model_info")
        _check(lib.reel_model_info_get(self._h, i.ref), self.ctx.handle)
        return i.to_dict()

    def compile(self, buckets=None, max_context=None, max_seqs=None, block_size=None, num_blocks=None,
                logits=False, sample=False, **compile_opts):
        """A plan of the model, its weights written. compile_opts: reel_compile_opts fields
        (strict, no_capture, check_hazards, ...)."""
        o = Struct("reel_model_opts")
        if buckets:
            o.num_buckets = len(buckets)
            o.buckets = list(buckets)
        for k, v in (("max_context", max_context), ("max_seqs", max_seqs), ("block_size", block_size),
                     ("num_blocks", num_blocks)):
            if v is not None:
                setattr(o, k, v)
        o.logits = int(bool(logits))
        o.sample = int(bool(sample))
        co = Struct("reel_compile_opts", **{k: int(v) for k, v in compile_opts.items()})
        h = ctypes.c_void_p()
        _check(lib.reel_model_compile(self._h, o.ref, co.ref, ctypes.byref(h)), self.ctx.handle)
        return Plan(self.ctx, h)

    def close(self):
        if getattr(self, "_h", None):
            lib.reel_model_close(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()


# ---- plans -------------------------------------------------------------------------------------

class Output:
    """An output of a plan's last step, handed out through DLPack without a copy:
    a view of the plan's buffer, valid until the plan's next step (a later
    step makes this object refuse to export). np.from_dlpack(out) or
    torch.from_dlpack(out)."""

    def __init__(self, plan, name, data, shape, dtype, generation):
        self._plan, self.name, self._data, self.shape, self.dtype = plan, name, data, shape, dtype
        self._gen = generation

    def __dlpack_device__(self):
        return (_dl.KDL_CPU, 0)

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        if self._plan._gen != self._gen:
            raise BufferError("reel: output '%s' is of an earlier step (the plan has stepped since)" % self.name)
        if copy:
            raise BufferError("reel: outputs are handed out as views (copy=True: copy the consumer's array)")
        versioned = max_version is not None and tuple(max_version)[0] >= 1
        return _dl.export(self._data, self.shape, self.dtype, self._plan, versioned=versioned)

    def tolist(self):
        n = _dl.prod(self.shape)
        t = {0: ctypes.c_float, 3: ctypes.c_int32}.get(self.dtype)
        if t is None:
            raise TypeError("reel: tolist reads f32 and int32 outputs; use DLPack for the others")
        return list((t * n).from_address(self._data))


class Plan:
    """A compiled plan: inputs, steps, outputs, stats. One thread at a time."""

    def __init__(self, ctx, handle):
        self.ctx, self._h, self._gen = ctx, handle, 0

    def _c(self, st):
        _check(st, self.ctx.handle)

    def set_input(self, name, data):
        """Rows of input `name` for the next step, from a numpy array, a torch tensor
        (any DLPack producer; a CUDA tensor is copied to the host) or a list."""
        if isinstance(data, (list, tuple)):
            a = _i32_array(data, name)
            rows = len(data)
            self._c(lib.reel_plan_set_input(self._h, name.encode(), ctypes.addressof(a), rows))
            return
        with _dl.Imported(data) as t:
            rows = t.shape[0] if t.shape else 1
            if t.device[0] in (_dl.KDL_CPU, _dl.KDL_CUDA_HOST):
                self._c(lib.reel_plan_set_input(self._h, name.encode(), t.data, rows))
            elif t.device[0] == _dl.KDL_CUDA:
                host = ctypes.create_string_buffer(max(t.nbytes, 1))
                _cuda_to_host(host, t.data, t.nbytes)
                self._c(lib.reel_plan_set_input(self._h, name.encode(), ctypes.addressof(host), rows))
            else:
                raise TypeError("reel: input '%s' is on DLPack device %d" % (name, t.device[0]))

    def _step_info(self, num_tokens, num_seqs, query_start, positions, slot_mapping, context_lens,
                   block_tables, block_table_stride):
        keep = [_i32_array(query_start, "query_start"), _i32_array(positions, "positions"),
                _i32_array(slot_mapping, "slot_mapping"), _i32_array(context_lens, "context_lens"),
                _i32_array(block_tables, "block_tables")]
        if block_table_stride is None and block_tables is not None:
            rows = block_tables.shape[1] if hasattr(block_tables, "shape") and len(block_tables.shape) == 2 else (
                len(block_tables[0]) if isinstance(block_tables, (list, tuple)) and block_tables and
                isinstance(block_tables[0], (list, tuple)) else 0)
            block_table_stride = rows
        s = Struct("reel_step_info", num_tokens=num_tokens, num_seqs=num_seqs,
                   block_table_stride=block_table_stride or 0)
        for f, a in zip(("query_start", "positions", "slot_mapping", "context_lens", "block_tables"), keep):
            setattr(s, f, ctypes.addressof(a) if a is not None else 0)
        return s, keep

    def step(self, num_tokens, num_seqs=0, query_start=None, positions=None, slot_mapping=None,
             context_lens=None, block_tables=None, block_table_stride=None):
        """One serving step (reel_step); arrays as lists, numpy arrays or DLPack tensors."""
        s, keep = self._step_info(num_tokens, num_seqs, query_start, positions, slot_mapping, context_lens,
                                  block_tables, block_table_stride)
        st = lib.reel_step(self._h, s.ref)
        self._gen += 1
        self._c(st)
        del keep

    def step_n(self, max_steps, token_input, token_output, num_tokens, num_seqs, query_start, positions,
               slot_mapping, context_lens, block_tables, block_table_stride=None, rng_input=None, eos_ids=(),
               max_new_tokens=None):
        """Up to max_steps decode steps in one call (reel_step_n, docs/loop.md): returns
        (tokens as a list of max_steps rows of num_seqs, steps per sequence); a stopped
        sequence's later tokens are NO_TOKEN."""
        s, keep = self._step_info(num_tokens, num_seqs, query_start, positions, slot_mapping, context_lens,
                                  block_tables, block_table_stride)
        tokens = (ctypes.c_int32 * max(max_steps * num_seqs, 1))()
        steps = (ctypes.c_int32 * max(num_seqs, 1))()
        lim = _i32_array(max_new_tokens, "max_new_tokens")
        li = Struct("reel_loop_info", token_input=token_input, token_output=token_output, rng_input=rng_input,
                    max_steps=max_steps, num_eos=len(eos_ids), eos_ids=list(eos_ids),
                    max_new_tokens=ctypes.addressof(lim) if lim is not None else 0,
                    tokens=ctypes.addressof(tokens), steps=ctypes.addressof(steps))
        st = lib.reel_step_n(self._h, s.ref, li.ref)
        self._gen += 1
        self._c(st)
        del keep
        rows = [list(tokens[i * num_seqs:(i + 1) * num_seqs]) for i in range(max_steps)]
        return rows, list(steps[:num_seqs])

    def output(self, name):
        """The last step's output `name` (an Output: DLPack, tolist)."""
        data, rows = ctypes.c_void_p(), ctypes.c_int64()
        self._c(lib.reel_plan_output(self._h, name.encode(), ctypes.byref(data), ctypes.byref(rows)))
        dt, per = ctypes.c_int(), ctypes.c_int64()
        self._c(lib.reel_plan_output_desc(self._h, name.encode(), ctypes.byref(dt), ctypes.byref(per)))
        shape = (rows.value,) if per.value == 1 else (rows.value, per.value)
        return Output(self, name, data.value, shape, dt.value, self._gen)

    def read_state(self, name, nbytes):
        buf = ctypes.create_string_buffer(nbytes)
        self._c(lib.reel_plan_read_state(self._h, name.encode(), buf, nbytes))
        return buf.raw

    def write_state(self, name, data):
        data = bytes(data)
        self._c(lib.reel_plan_write_state(self._h, name.encode(), data, len(data)))

    @property
    def last_fallback(self):
        return lib.reel_fallback_str(lib.reel_plan_last_fallback(self._h)).decode()

    def time_steps(self, on=True):
        self._c(lib.reel_plan_time_steps(self._h, int(on)))

    def last_step_device_us(self):
        us = ctypes.c_double()
        self._c(lib.reel_plan_last_step_device_us(self._h, ctypes.byref(us)))
        return us.value

    def stats(self):
        s = Struct("reel_plan_stats")
        self._c(lib.reel_plan_stats_get(self._h, s.ref))
        d = s.to_dict()
        d["buckets"] = d["buckets"][:d["num_buckets"]]
        return d

    def nodes(self):
        """Every node of the plan (reel_plan_node_info), schedule order, as dicts."""
        out = []
        for i in range(self.stats()["num_nodes"]):
            n = Struct("reel_node_info")
            self._c(lib.reel_plan_node_info(self._h, i, n.ref))
            out.append({k: getattr(n, k) for k in ("op", "name", "stream", "kernel", "fused")})
        return out

    def trace_ops(self, on=True):
        self._c(lib.reel_plan_trace_ops(self._h, int(on)))

    def take_op_spans(self, cap=4096):
        """The recorded op spans (reel_plan_take_op_spans): (node, stream, start_us, end_us)."""
        spec = STRUCTS["reel_op_span"]
        size = spec["size"]
        buf = ctypes.create_string_buffer(size * cap)
        ctypes.memmove(buf, bytes.fromhex(spec["init"]), size)
        n = ctypes.c_int()
        self._c(lib.reel_plan_take_op_spans(self._h, buf, cap, ctypes.byref(n)))
        f = {x[0]: x[1] for x in spec["fields"]}
        out = []
        for i in range(n.value):
            base = ctypes.addressof(buf) + i * size
            out.append((ctypes.c_int.from_address(base + f["node"]).value,
                        ctypes.c_int.from_address(base + f["stream"]).value,
                        ctypes.c_double.from_address(base + f["start_us"]).value,
                        ctypes.c_double.from_address(base + f["end_us"]).value))
        return out

    def close(self):
        if getattr(self, "_h", None):
            lib.reel_plan_destroy(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()


_cudart = None


def _cuda_to_host(dst, src, nbytes):
    """A device-to-host copy through the CUDA runtime (the tensor's producer
    ordered its work before the legacy default stream, which cudaMemcpy uses)."""
    global _cudart
    if _cudart is None:
        for n in ("libcudart.so", "libcudart.so.13", "libcudart.so.12"):
            try:
                _cudart = ctypes.CDLL(n)
                break
            except OSError:
                continue
        else:
            raise Error(C["REEL_E_UNSUPPORTED"], "a CUDA tensor as input needs libcudart.so, which was not found")
        _cudart.cudaMemcpy.restype = ctypes.c_int
        _cudart.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    e = _cudart.cudaMemcpy(ctypes.addressof(dst), src, nbytes, 2)  # cudaMemcpyDeviceToHost
    if e != 0:
        raise Error(C["REEL_E_BACKEND"], "cudaMemcpy of a CUDA tensor to the host failed (cudaError %d)" % e)
