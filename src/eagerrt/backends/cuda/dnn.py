"""Convolutions for the cuda device through cuDNN, called directly by ctypes.

CuPy 14 no longer binds cuDNN, yet cuDNN's convolutions are what a GPU user
compares against (PyTorch's): several times faster at batch 32 than products
over shifted windows. So the cuda device loads the cuDNN library that is
installed (``nvidia-cudnn-cu13``'s wheel, or the one PyTorch loaded) and calls
its forward convolution itself, on the current stream: ``cudnnConvolutionForward``,
or ``cudnnConvolutionBiasActivationForward`` for ``relu(conv(x) + bias [+ z])``
in one kernel (:func:`convolve`). Descriptors and the algorithm (cuDNN's own
heuristic, no trial runs: it never waits for the device, so compiled plans
capture it into CUDA graphs) are made once per geometry and kept.

On numpy arrays :func:`convolve` computes the same call from the same
descriptor values (:class:`Descriptors`), which is how CI, without a GPU,
checks what the device would ask cuDNN for.

>>> import numpy as np
>>> from eagerrt.ops.nn.conv import conv_geometry
>>> x, w = np.ones((1, 2, 4, 4), np.float32), np.ones((3, 2, 3, 3), np.float32)
>>> d = describe(x, w, conv_geometry(x, w, None, 1, 1, 1, 1))
>>> d.pad, d.stride, d.out
((1, 1), (1, 1), (1, 3, 4, 4))
>>> convolve(d, x, w, None, relu=True)[0, 0, 1, 1]
np.float32(18.0)
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import glob
import os
import sys
import threading
from typing import Any, NamedTuple

import numpy as np

from ..._core import config
from .gemm import loaded_library, tf32_for

__all__ = ["Descriptors", "available", "convolve", "describe"]

# cudnnDataType_t, by dtype: float32 (conv2d takes float32 and float64; float64
# stays on the cuBLAS products, cuDNN's float64 kernels being no faster).
_DATA = {np.dtype(np.float32): 0}
_NCHW, _CROSS_CORRELATION, _RELU, _PROPAGATE_NAN = 0, 1, 1, 1
_DEFAULT_MATH, _FMA_MATH = 0, 3
#: The most workspace an algorithm may ask for (cuDNN's heuristic ranks by speed).
_WORKSPACE_LIMIT = 1 << 30
_SUBLIBRARIES = (
    "libcudnn_graph",
    "libcudnn_engines_runtime_compiled",
    "libcudnn_engines_precompiled",
    "libcudnn_heuristic",
    "libcudnn_ops",
    "libcudnn_cnn",
)


class Descriptors(NamedTuple):
    """One convolution as cuDNN is asked for it: NCHW input ``x`` and output
    ``out``, (K, C/groups, kH, kW) filter, symmetric padding, stride, dilation,
    groups, and whether float32 products may round to TensorFloat-32."""

    x: tuple[int, int, int, int]
    filter: tuple[int, int, int, int]
    out: tuple[int, int, int, int]
    pad: tuple[int, int]
    stride: tuple[int, int]
    dilation: tuple[int, int]
    groups: int
    dtype: np.dtype[Any]
    tf32: bool


def describe(x4: Any, weight: Any, g: Any, bias: Any = None) -> Descriptors | None:
    """The descriptors of conv2d of geometry ``g`` (``ops.nn._Conv``) on the
    4-d ``x4``, or None where cuDNN can't take it (a dtype it isn't given, or
    padding it can't express: cuDNN pads both sides alike, so the bottom and
    right padding must give the same output size as the top and left)."""
    dtype = x4.dtype
    if dtype not in _DATA or weight.dtype != dtype or (bias is not None and bias.dtype != dtype):
        return None
    ho = (g.h + 2 * g.ph - g.dh * (g.kh - 1) - 1) // g.sh + 1
    wo = (g.w + 2 * g.pw - g.dw * (g.kw - 1) - 1) // g.sw + 1
    if (ho, wo) != (g.ho, g.wo):
        return None
    return Descriptors(
        (g.n, g.c, g.h, g.w),
        (g.o, g.c // g.groups, g.kh, g.kw),
        (g.n, g.o, g.ho, g.wo),
        (g.ph, g.pw),
        (g.sh, g.sw),
        (g.dh, g.dw),
        g.groups,
        np.dtype(dtype),
        tf32_for(dtype),
    )


def available(x: Any) -> bool:
    """Whether ``x`` (a CuPy array) can be convolved by cuDNN here: it is
    installed and ``config.cuda_cudnn`` is on."""
    return bool(config.cuda_cudnn) and type(x) is not np.ndarray and _library() is not None


def convolve(
    d: Descriptors, x: Any, weight: Any, bias: Any, *, residual: Any = None, relu: bool = False
) -> Any:
    """``conv(x, weight) + bias [+ residual]``, then ReLU if asked: a new
    (N, K, Ho, Wo) array; or None if cuDNN refuses these descriptors (then
    and from then on: the caller computes it another way). ``x`` and
    ``weight`` are C-contiguous."""
    if type(x) is np.ndarray:
        return _emulate(d, x, weight, bias, residual, relu)
    if d in _refused:
        return None
    try:
        return _library().forward(d, x, weight, bias, residual, relu)  # type: ignore[union-attr]
    except CudnnError as exc:  # before any work was enqueued
        _refused[d] = str(exc)
        return None


#: Descriptors cuDNN refused, with why (none of its algorithms ran them).
_refused: dict[Descriptors, str] = {}


def _emulate(
    d: Descriptors, x: np.ndarray, w: np.ndarray, bias: Any, residual: Any, relu: bool
) -> np.ndarray:
    """The convolution cuDNN would compute from ``d``, in numpy: a window per
    tap of the (symmetrically) padded input, read by the strides and dilation."""
    n, c, h, wd = d.x
    k, cg, kh, kw = d.filter
    ph, pw = d.pad
    (sh, sw), (dh, dw) = d.stride, d.dilation
    _, _, ho, wo = d.out
    padded = np.zeros((n, c, h + 2 * ph, wd + 2 * pw), np.float64)
    padded[:, :, ph : ph + h, pw : pw + wd] = x
    kg = k // d.groups
    out = np.zeros(d.out, np.float64)
    for group in range(d.groups):
        channels = slice(group * cg, (group + 1) * cg)
        filters = slice(group * kg, (group + 1) * kg)
        for i in range(kh):
            for j in range(kw):
                window = padded[
                    :,
                    channels,
                    i * dh : i * dh + sh * (ho - 1) + 1 : sh,
                    j * dw : j * dw + sw * (wo - 1) + 1 : sw,
                ]
                out[:, filters] += np.einsum("nchw,kc->nkhw", window, w[filters, :, i, j])
    if bias is not None:
        out += np.asarray(bias).reshape(1, k, 1, 1)
    if residual is not None:
        out += residual
    if relu:
        out = np.maximum(out, 0)
    return out.astype(d.dtype)


# -- the library ----------------------------------------------------------------------
class _Perf(ctypes.Structure):
    """cudnnConvolutionFwdAlgoPerf_t."""

    _fields_ = [
        ("algo", ctypes.c_int),
        ("status", ctypes.c_int),
        ("time", ctypes.c_float),
        ("memory", ctypes.c_size_t),
        ("determinism", ctypes.c_int),
        ("math_type", ctypes.c_int),
        ("reserved", ctypes.c_int * 3),
    ]


class _Prepared(NamedTuple):
    """Descriptors made for one geometry: the handles cuDNN takes, the algorithm
    its heuristic ranks first (within the workspace limit), and that workspace."""

    x: int
    filter: int
    out: int
    bias: int
    conv: int
    algo: int
    workspace: int


class CudnnError(RuntimeError):
    """A cuDNN call failed (its status and message)."""


class _Library:
    """The cuDNN functions the convolutions call, and what they keep: a handle
    per thread, descriptors per geometry, one ReLU activation descriptor."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.lib = lib
        lib.cudnnGetErrorString.restype = ctypes.c_char_p
        lib.cudnnGetVersion.restype = ctypes.c_size_t
        self.version = int(lib.cudnnGetVersion())
        self._handles = threading.local()
        self._prepared: dict[Descriptors, _Prepared] = {}
        self._lock = threading.Lock()
        self._relu = self._new("cudnnCreateActivationDescriptor")
        relu = (ctypes.c_void_p(self._relu), _RELU, _PROPAGATE_NAN, ctypes.c_double(0.0))
        self._call("cudnnSetActivationDescriptor", *relu)

    def _call(self, name: str, *args: Any) -> None:
        """Call cuDNN's ``name``; a CudnnError if it fails."""
        status = getattr(self.lib, name)(*args)
        if status != 0:
            message = self.lib.cudnnGetErrorString(status).decode()
            raise CudnnError(f"{name} failed: {message} (status {status})")

    def _new(self, create: str) -> int:
        out = ctypes.c_void_p()
        self._call(create, ctypes.byref(out))
        return int(out.value or 0)

    def _handle(self, device: int, stream: int) -> ctypes.c_void_p:
        # A handle belongs to the device current at its creation: one per thread and device.
        handles = getattr(self._handles, "by_device", None)
        if handles is None:
            handles = self._handles.by_device = {}
        handle = handles.get(device)
        if handle is None:
            handle = handles[device] = ctypes.c_void_p(self._new("cudnnCreate"))
        self._call("cudnnSetStream", handle, ctypes.c_void_p(stream))
        return handle

    def _tensor(self, shape: tuple[int, ...], data: int) -> int:
        desc = self._new("cudnnCreateTensorDescriptor")
        self._call("cudnnSetTensor4dDescriptor", ctypes.c_void_p(desc), _NCHW, data, *shape)
        return desc

    def _prepare(self, d: Descriptors, handle: ctypes.c_void_p) -> _Prepared:
        prepared = self._prepared.get(d)
        if prepared is not None:
            return prepared
        p = ctypes.c_void_p
        data = _DATA[d.dtype]
        x, out, bias = (self._tensor(shape, data) for shape in (d.x, d.out, (1, d.out[1], 1, 1)))
        filt = self._new("cudnnCreateFilterDescriptor")
        self._call("cudnnSetFilter4dDescriptor", p(filt), data, _NCHW, *d.filter)
        conv = self._new("cudnnCreateConvolutionDescriptor")
        geometry = (*d.pad, *d.stride, *d.dilation, _CROSS_CORRELATION, data)
        self._call("cudnnSetConvolution2dDescriptor", p(conv), *geometry)
        self._call("cudnnSetConvolutionGroupCount", p(conv), d.groups)
        # As PyTorch asks: tensor cores (TF32) only where allowed, else plain FMAs.
        math = _DEFAULT_MATH if d.tf32 else _FMA_MATH
        self._call("cudnnSetConvolutionMathType", p(conv), math)
        dims = (ctypes.c_int * 4)()
        each = (ctypes.byref(dims, 4 * i) for i in range(4))
        self._call("cudnnGetConvolution2dForwardOutputDim", p(conv), p(x), p(filt), *each)
        if tuple(dims) != d.out:
            raise CudnnError(f"cuDNN gives output {tuple(dims)} for {d}, expected {d.out}")
        perfs, count = (_Perf * 8)(), ctypes.c_int()
        descs = (p(x), p(filt), p(conv), p(out))
        self._call(
            "cudnnGetConvolutionForwardAlgorithm_v7", handle, *descs, 8, ctypes.byref(count), perfs
        )
        usable = [r for r in perfs[: count.value] if r.status == 0 and r.memory <= _WORKSPACE_LIMIT]
        if not usable:
            raise CudnnError(f"cuDNN offers no forward algorithm for {d}")
        algo = usable[0].algo
        size = ctypes.c_size_t()
        self._call(
            "cudnnGetConvolutionForwardWorkspaceSize", handle, *descs, algo, ctypes.byref(size)
        )
        prepared = _Prepared(x, filt, out, bias, conv, algo, int(size.value))
        with self._lock:
            self._prepared.setdefault(d, prepared)
        return self._prepared[d]

    def forward(
        self, d: Descriptors, x: Any, weight: Any, bias: Any, residual: Any, relu: bool
    ) -> Any:
        import cupy

        handle = self._handle(x.device.id, cupy.cuda.get_current_stream().ptr)
        prep = self._prepare(d, handle)
        out = cupy.empty(d.out, d.dtype)
        workspace = cupy.empty(prep.workspace, np.uint8) if prep.workspace else None
        ws_ptr = workspace.data.ptr if workspace is not None else None
        one, zero = ctypes.c_float(1.0), ctypes.c_float(0.0)
        p = ctypes.c_void_p
        common: tuple[Any, ...] = (handle, ctypes.byref(one), p(prep.x), p(x.data.ptr))
        common += (p(prep.filter), p(weight.data.ptr), p(prep.conv), prep.algo, p(ws_ptr))
        common += (ctypes.c_size_t(prep.workspace),)
        if relu:
            # One kernel: relu(conv + alpha2 * z + bias); z is the output itself
            # when there is no residual (alpha2 = 0), the bias zeros when none.
            if bias is None:
                bias = cupy.zeros(d.out[1], d.dtype)
            z = residual if residual is not None else out
            alpha2 = one if residual is not None else zero
            self._call(
                "cudnnConvolutionBiasActivationForward",
                *common, ctypes.byref(alpha2), p(prep.out), p(z.data.ptr), p(prep.bias),
                p(bias.data.ptr), p(self._relu), p(prep.out), p(out.data.ptr),
            )  # fmt: skip
            return out
        self._call(
            "cudnnConvolutionForward", *common, ctypes.byref(zero), p(prep.out), p(out.data.ptr)
        )
        if bias is not None:
            out += bias.reshape(-1, 1, 1)
        if residual is not None:
            out += residual
        return out


def _find_library() -> str | None:
    """The path of libcudnn.so: the one already loaded (by PyTorch), else the
    nvidia-cudnn wheel's, else the system's."""
    loaded = loaded_library("/libcudnn.so")
    if loaded is not None:
        return loaded
    for root in sys.path:
        found = sorted(glob.glob(os.path.join(root, "nvidia", "*", "lib", "libcudnn.so*")))
        if found:
            return found[0]
    return ctypes.util.find_library("cudnn")


@functools.cache
def _library() -> _Library | None:
    """cuDNN, loaded once; None where it isn't installed or is older than 8."""
    path = _find_library()
    if path is None:
        return None
    # The shim loads its sub-libraries by name: load them first, from its folder.
    folder = os.path.dirname(path)
    for name in _SUBLIBRARIES:
        for sub in sorted(glob.glob(os.path.join(folder, name + ".so*")))[:1]:
            with contextlib.suppress(OSError):  # the shim may find it itself
                ctypes.CDLL(sub, mode=ctypes.RTLD_GLOBAL)
    try:
        library = _Library(ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL))
    except (OSError, AttributeError, CudnnError):
        return None
    return library if library.version >= 8000 else None
