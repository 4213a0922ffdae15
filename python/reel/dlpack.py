"""DLPack for reel's Python package, with ctypes only (no compiled extension).

Export: a host buffer (an output of a plan, valid until its next step) as a
DLPack capsule, the versioned one ("dltensor_versioned", DLPack 1.x) when the
consumer asks for it with max_version >= (1, 0), else the legacy "dltensor".
The capsule keeps its owner alive until the consumer calls the deleter.

Import: any object with __dlpack__ (numpy arrays, torch tensors): its data
pointer, device, dtype and shape, checked C-contiguous. The capsule is marked
used and its deleter called once the caller is done (a context manager), as
the protocol asks of a consumer that does not keep the tensor.
"""
import ctypes

KDL_CPU, KDL_CUDA, KDL_CUDA_HOST = 1, 2, 3
KDL_INT, KDL_UINT, KDL_FLOAT, KDL_BFLOAT = 0, 1, 2, 4


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    pass


DLManagedTensorVersioned._fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p),
                                     ("deleter", DELETER), ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]
FLAG_READ_ONLY = 1

_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]

# reel dtypes (REEL_F32, F16, BF16, I32) as DLPack's
REEL_TO_DL = {0: (KDL_FLOAT, 32), 1: (KDL_FLOAT, 16), 2: (KDL_BFLOAT, 16), 3: (KDL_INT, 32)}
DL_TO_REEL = {v: k for k, v in REEL_TO_DL.items()}

# Exported tensors alive until their consumer's deleter runs: id -> (struct, shape, owner).
_live = {}


@DELETER
def _delete(ptr):
    _live.pop(ptr, None)


def _name_versioned(versioned):
    return b"dltensor_versioned" if versioned else b"dltensor"


def export(data, shape, reel_dtype, owner, versioned=False, read_only=True):
    """A capsule over `data` (a host address) of `shape` and reel dtype; owner
    is kept alive until the consumer deletes the tensor."""
    shape_arr = (ctypes.c_int64 * max(len(shape), 1))(*shape)
    code, bits = REEL_TO_DL[reel_dtype]
    t = DLTensor(data=data, device=DLDevice(KDL_CPU, 0), ndim=len(shape), dtype=DLDataType(code, bits, 1),
                 shape=shape_arr, strides=None, byte_offset=0)
    if versioned:
        m = DLManagedTensorVersioned(version=DLPackVersion(1, 0), manager_ctx=None, deleter=_delete,
                                     flags=FLAG_READ_ONLY if read_only else 0, dl_tensor=t)
    else:
        m = DLManagedTensor(dl_tensor=t, manager_ctx=None, deleter=_delete)
    addr = ctypes.addressof(m)
    _live[addr] = (m, shape_arr, owner)
    return _api.PyCapsule_New(addr, _name_versioned(versioned), None)


class Imported:
    """What a producer's __dlpack__ gave: data, device, reel dtype, shape.
    Use as a context manager: the producer's deleter runs at exit."""

    def __init__(self, obj, stream=None):
        if not hasattr(obj, "__dlpack__"):
            raise TypeError("reel: %s has no __dlpack__ (a numpy array, a torch tensor, ...)" % type(obj).__name__)
        dev = obj.__dlpack_device__() if hasattr(obj, "__dlpack_device__") else (KDL_CPU, 0)
        kw = {}
        if dev[0] == KDL_CUDA:
            kw["stream"] = stream if stream is not None else 1  # ordered before the legacy default stream
        try:
            cap = obj.__dlpack__(max_version=(1, 0), **kw)
        except TypeError:
            cap = obj.__dlpack__(**kw)
        self._cap = cap
        if _api.PyCapsule_IsValid(cap, b"dltensor_versioned"):
            self._versioned = True
            p = _api.PyCapsule_GetPointer(cap, b"dltensor_versioned")
            self._m = DLManagedTensorVersioned.from_address(p)
        elif _api.PyCapsule_IsValid(cap, b"dltensor"):
            self._versioned = False
            p = _api.PyCapsule_GetPointer(cap, b"dltensor")
            self._m = DLManagedTensor.from_address(p)
        else:
            raise TypeError("reel: __dlpack__ of %s gave no DLPack capsule" % type(obj).__name__)
        _api.PyCapsule_SetName(cap, b"used_dltensor_versioned" if self._versioned else b"used_dltensor")
        self._ptr = p
        t = self._m.dl_tensor
        self.device = (t.device.device_type, t.device.device_id)
        self.shape = tuple(t.shape[i] for i in range(t.ndim))
        key = (t.dtype.code, t.dtype.bits)
        if t.dtype.lanes != 1 or key not in DL_TO_REEL:
            self.close()
            raise TypeError("reel: DLPack dtype code %d, %d bits, %d lanes is none of f32, f16, bf16, int32"
                            % (t.dtype.code, t.dtype.bits, t.dtype.lanes))
        self.dtype = DL_TO_REEL[key]
        if t.strides:
            want = 1
            for i in reversed(range(t.ndim)):
                if self.shape[i] != 1 and t.strides[i] != want:
                    self.close()
                    raise ValueError("reel: a DLPack tensor of shape %s is not C-contiguous" % (self.shape,))
                want *= self.shape[i]
        self.data = (t.data or 0) + t.byte_offset
        self.nbytes = (bits_of(self.dtype) // 8) * prod(self.shape)

    def close(self):
        if self._ptr is not None:
            d = self._m.deleter
            if d:
                d(self._ptr)
            self._ptr = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def bits_of(reel_dtype):
    return REEL_TO_DL[reel_dtype][1]


def prod(shape):
    n = 1
    for d in shape:
        n *= d
    return n
