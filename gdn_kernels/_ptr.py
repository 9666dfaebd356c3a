"""Device pointers from raw integers, ``__cuda_array_interface__`` and DLPack.

The only module that knows about frameworks, and it imports none of them: an array of CuPy,
PyTorch, JAX or anything else that speaks one of the two protocols becomes a :class:`DevArray`
(pointer, shape, element strides, dtype name, owner kept alive).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

# dtype names the library speaks, and their sizes in bytes.
ITEMSIZE = {
    "bfloat16": 2,
    "float16": 2,
    "float32": 4,
    "int8": 1,
    "uint8": 1,
    "float8_e4m3fn": 1,
}

_TYPESTR = {"<f2": "float16", "<f4": "float32", "|i1": "int8", "|u1": "uint8", "<i1": "int8", "<u1": "uint8"}

# DLPack (code, bits) -> dtype name (dlpack.h: kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4,
# kDLFloat8_e4m3fn 10).
_DL_DTYPE = {
    (0, 8): "int8",
    (1, 8): "uint8",
    (2, 16): "float16",
    (2, 32): "float32",
    (4, 16): "bfloat16",
    (10, 8): "float8_e4m3fn",
}
_DL_CUDA, _DL_CUDA_MANAGED = 2, 13


@dataclass(frozen=True)
class DevArray:
    """A view of device memory: ``ptr`` (int), ``shape`` and ``strides`` in elements, ``dtype``."""

    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: str
    owner: object = None

    @property
    def nbytes(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n * ITEMSIZE[self.dtype]

    def row_major(self) -> bool:
        """True when the array is C-contiguous."""
        expect = 1
        for size, stride in zip(reversed(self.shape), reversed(self.strides)):
            if size != 1 and stride != expect:
                return False
            expect *= size
        return True


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= s
    return tuple(reversed(strides))


def _from_cai(obj, cai: dict) -> DevArray:
    typestr = cai["typestr"]
    dtype = _TYPESTR.get(typestr)
    if dtype is None:
        raise TypeError(f"unsupported __cuda_array_interface__ typestr {typestr!r}")
    shape = tuple(int(s) for s in cai["shape"])
    item = ITEMSIZE[dtype]
    if cai.get("strides") is None:
        strides = _contiguous_strides(shape)
    else:
        byte_strides = tuple(int(s) for s in cai["strides"])
        if any(b % item for b in byte_strides):
            raise ValueError("array strides are not whole elements")
        strides = tuple(b // item for b in byte_strides)
    ptr = int(cai["data"][0])
    return DevArray(ptr, shape, strides, dtype, obj)


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


_capsule_get = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_get.restype = ctypes.c_void_p
_capsule_get.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_valid.restype = ctypes.c_int
_capsule_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _from_dlpack(obj) -> DevArray:
    # The capsule is read, never consumed: it keeps its name, so its destructor releases the
    # managed tensor, while ``obj`` keeps the memory alive.
    capsule = obj.__dlpack__()
    if _capsule_valid(capsule, b"dltensor"):
        addr = _capsule_get(capsule, b"dltensor")
    elif _capsule_valid(capsule, b"dltensor_versioned"):
        # DLManagedTensorVersioned: {DLPackVersion (2 x u32), manager_ctx, deleter, flags u64,
        # DLTensor}: the tensor starts 32 bytes in.
        addr = _capsule_get(capsule, b"dltensor_versioned") + 32
    else:
        raise TypeError("__dlpack__ returned no DLPack capsule")
    t = _DLTensor.from_address(addr)
    if t.device.device_type not in (_DL_CUDA, _DL_CUDA_MANAGED):
        raise ValueError(f"array is not in CUDA device memory (DLPack device {t.device.device_type})")
    dtype = _DL_DTYPE.get((t.dtype.code, t.dtype.bits))
    if dtype is None or t.dtype.lanes != 1:
        raise TypeError(f"unsupported DLPack dtype (code {t.dtype.code}, bits {t.dtype.bits})")
    shape = tuple(t.shape[i] for i in range(t.ndim))
    strides = tuple(t.strides[i] for i in range(t.ndim)) if t.strides else _contiguous_strides(shape)
    ptr = (t.data or 0) + t.byte_offset
    return DevArray(ptr, shape, strides, dtype, obj)


def as_array(obj, dtype: str | None = None) -> DevArray:
    """View ``obj`` (a DevArray, or anything with ``__cuda_array_interface__`` or ``__dlpack__``).

    ``dtype`` reinterprets the elements when it names a type of the same size (an fp8 weight
    exported as uint8, for instance).
    """
    if isinstance(obj, DevArray):
        arr = obj
    else:
        cai = None
        try:
            cai = getattr(obj, "__cuda_array_interface__", None)
        except (TypeError, AttributeError, RuntimeError):
            # Some frameworks raise here for dtypes the interface cannot name (bfloat16).
            cai = None
        if cai is not None:
            arr = _from_cai(obj, cai)
        elif hasattr(obj, "__dlpack__"):
            arr = _from_dlpack(obj)
        else:
            raise TypeError(
                f"{type(obj).__name__} is not a device array: expected __cuda_array_interface__ "
                "or __dlpack__ (CuPy, PyTorch, JAX), or pass a raw pointer with its shape"
            )
    if dtype is not None and dtype != arr.dtype:
        if ITEMSIZE[dtype] != ITEMSIZE[arr.dtype]:
            raise TypeError(f"cannot view {arr.dtype} as {dtype}")
        arr = DevArray(arr.ptr, arr.shape, arr.strides, dtype, arr.owner)
    return arr


def check_pointer(ptr: int, what: str, align: int = 16) -> None:
    """Raise ValueError for a null or misaligned device pointer."""
    if not isinstance(ptr, int):
        raise TypeError(f"{what}: pointer must be an int, got {type(ptr).__name__}")
    if ptr == 0:
        raise ValueError(f"{what}: null pointer")
    if ptr % align:
        raise ValueError(f"{what}: pointer 0x{ptr:x} is not {align}-byte aligned")


def pointer_of(obj) -> tuple[int, str | None]:
    """(pointer, dtype or None) of a raw int pointer or an array."""
    if isinstance(obj, int):
        return obj, None
    arr = as_array(obj)
    return arr.ptr, arr.dtype


def resolve_io(x, out, dtype: str | None) -> tuple[int, int, str]:
    """(x pointer, out pointer, dtype) of a projection call's arrays or raw pointers.

    ``dtype`` defaults to the arrays' (bfloat16 when both are raw pointers); an array of another
    dtype raises TypeError.
    """
    x_ptr, x_dtype = pointer_of(x)
    out_ptr, out_dtype = pointer_of(out)
    dtype = dtype or x_dtype or out_dtype or "bfloat16"
    for got, what in ((x_dtype, "x"), (out_dtype, "out")):
        if got is not None and got != dtype:
            raise TypeError(f"{what} is {got}, expected {dtype}")
    return x_ptr, out_ptr, dtype
