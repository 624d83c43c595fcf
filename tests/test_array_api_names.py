"""eagerrt as an Array API 2024.12 namespace: every required name, with its signature.

The list of required names comes from ``array_api_strict`` (the standard's strict
reference implementation) set to ``api_version="2024.12"``: its ``__all__``, and
``__all__`` of its ``linalg`` and ``fft`` extensions, and the methods and
attributes of its array class. One parametrized test per name, so a missing or
misdeclared name is one clear failure.

Which reference names are left out, and why:

* array_api_strict's own machinery, not part of the standard:
  ``ArrayAPIStrictFlags``, ``set/get/reset_array_api_strict_flags``, ``Device``
  (the standard names no device class: a device is whatever ``x.device``
  returns) and ``__version__`` (the package version).
* names that array_api_strict exports under every version but only lets run at
  a later one (``isin``, ``broadcast_shapes``, ...): each is read off the
  ``requires_api_version`` guard strict wraps it in, and kept only if it
  requires 2024.12 or earlier.
* on the array class: private helpers (``_array``, ``_new``, ``_promote_scalar``
  ...: one leading underscore) and dunders the standard does not define:
  ``__array__`` and ``__buffer__`` (numpy and buffer-protocol interop, which the
  standard replaces with DLPack), ``__iter__`` (strict defines it only to raise:
  the standard leaves iteration undefined), ``__repr__``, ``__str__``,
  ``__hash__``, ``__reduce__``, ``__new__`` (Python object protocol, not array
  API) and the class's bookkeeping (``__doc__``, ``__module__``, ``__slots__``,
  ``__annotations__``, ``__weakref__``).

The signature rule, for a function (or method; ``self`` is not compared):

1. The reference's parameters come first, in order, each with the same kind
   (positional-only, positional-or-keyword, keyword-only, ``*args``,
   ``**kwargs``) and, where the standard gives the parameter a default, the same
   default. The name must match too, except for positional-only parameters,
   whose names no caller can use or observe.
2. eagerrt may add parameters of its own only after the reference's and only
   with defaults (or as a trailing ``**kwargs``), so that every call the
   standard allows binds the same way and means the same thing.

Where array_api_strict's declaration differs from the 2024.12 standard's stub
(``src/array_api_stubs/_2024_12`` in data-apis/array-api), the standard wins:
strict's private "not passed" sentinel defaults (``astype(device=)``,
``from_dlpack(device=, copy=)``, ``__dlpack__(max_version=, dl_device=, copy=)``)
are the standard's ``None``, and ``to_device``'s ``stream`` is keyword-only
(``def to_device(self, device, /, *, stream=None)`` in the stub, where strict
leaves it positional-or-keyword).
"""

from __future__ import annotations

import enum
import inspect
import math
from collections.abc import Callable
from typing import Any

import array_api_strict as xps
import numpy as np
import pytest

import eagerrt as ert

API_VERSION = "2024.12"
xps.set_array_api_strict_flags(api_version=API_VERSION)

#: array_api_strict's own names (see the module docstring).
STRICT_ONLY = frozenset(
    {
        "ArrayAPIStrictFlags",
        "Device",
        "__version__",
        "get_array_api_strict_flags",
        "reset_array_api_strict_flags",
        "set_array_api_strict_flags",
    }
)
EXTENSIONS = ("linalg", "fft")
CONSTANTS = {"e": math.e, "pi": math.pi, "inf": math.inf, "nan": math.nan, "newaxis": None}
DTYPE_NAMES = (
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float32",
    "float64",
    "complex64",
    "complex128",
)
#: Array-class dunders the standard does not define (see the module docstring).
ARRAY_SKIPPED = frozenset(
    {
        "__annotations__",
        "__array__",
        "__buffer__",
        "__doc__",
        "__hash__",
        "__iter__",
        "__module__",
        "__new__",
        "__reduce__",
        "__repr__",
        "__slots__",
        "__str__",
        "__weakref__",
    }
)
#: Array attributes that are properties in the standard (not methods).
ARRAY_PROPERTIES = frozenset({"T", "mT", "device", "dtype", "ndim", "shape", "size"})


def _required_version(func: Any) -> str | None:
    """The API version array_api_strict's ``requires_api_version`` guard on ``func`` names."""
    while inspect.isfunction(func):
        version = inspect.getclosurevars(func).nonlocals.get("version")
        if isinstance(version, str):
            return version
        func = getattr(func, "__wrapped__", None)
    return None


def _standard_names(module: Any) -> list[str]:
    names = []
    for name in module.__all__:
        if name in STRICT_ONLY or (module is xps and name in EXTENSIONS):
            continue
        required = _required_version(getattr(module, name))
        if required is not None and required > API_VERSION:
            continue
        names.append(name)
    return names


MAIN_NAMES = _standard_names(xps)
LINALG_NAMES = _standard_names(xps.linalg)
FFT_NAMES = _standard_names(xps.fft)
_StrictArray = type(xps.asarray(0))
ARRAY_NAMES = sorted(
    name
    for name in vars(_StrictArray)
    if name not in ARRAY_SKIPPED and not (name.startswith("_") and not name.startswith("__"))
)


# -- signatures ----------------------------------------------------------------------
def _standard_default(value: Any) -> Any:
    # strict marks "not passed" with a private enum where the standard says None.
    if isinstance(value, enum.Enum) and type(value).__name__ == "Undef":
        return None
    return value


def _reference_signature(func: Callable[..., Any], *, owner: str = "") -> inspect.Signature:
    sig = inspect.signature(func)
    params = [p.replace(default=_standard_default(p.default)) for p in sig.parameters.values()]
    if owner == "Array" and func.__name__ == "to_device":
        # Stub: ``def to_device(self, device, /, *, stream=None)``.
        params = [
            p.replace(kind=inspect.Parameter.KEYWORD_ONLY) if p.name == "stream" else p
            for p in params
        ]
    return sig.replace(parameters=params)


def _describe(p: inspect.Parameter) -> str:
    default = "" if p.default is inspect.Parameter.empty else f"={p.default!r}"
    return f"{p.name}{default} ({p.kind.description})"


def _same_default(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, bool) or isinstance(b, bool):  # True == 1, but not as a default
        return type(a) is type(b) and a == b
    try:  # 0 and 0.0 are the same default for ``correction``
        return bool(a == b)
    except Exception:
        return False


def signature_problems(
    reference: inspect.Signature, actual: inspect.Signature, *, method: bool = False
) -> list[str]:
    """Every way ``actual`` breaks the rule in the module docstring (empty: it conforms)."""
    ref = list(reference.parameters.values())
    act = list(actual.parameters.values())
    if method:  # ``self``: its kind and name are no caller's business
        ref, act = ref[1:], act[1:]
    problems = []
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    for r, a in zip(ref, act, strict=False):
        if a.kind in variadic and r.kind not in variadic:
            # One clear message instead of a cascade for every later parameter.
            return [f"takes {a} where the standard declares {_describe(r)}"]
    for i, r in enumerate(ref):
        if i >= len(act):
            problems.append(f"missing parameter {_describe(r)}")
            continue
        a = act[i]
        if r.kind is not inspect.Parameter.POSITIONAL_ONLY and a.name != r.name:
            problems.append(f"parameter {i} is {a.name!r}, the standard's is {r.name!r}")
        if a.kind is not r.kind:
            problems.append(
                f"parameter {r.name!r} is {a.kind.description}, "
                f"the standard's is {r.kind.description}"
            )
        if r.default is not inspect.Parameter.empty and not _same_default(a.default, r.default):
            shown = "none" if a.default is inspect.Parameter.empty else repr(a.default)
            problems.append(f"parameter {r.name!r} defaults to {shown}, not {r.default!r}")
    for a in act[len(ref) :]:
        if a.kind is inspect.Parameter.VAR_KEYWORD:
            continue
        if a.kind is inspect.Parameter.VAR_POSITIONAL or a.default is inspect.Parameter.empty:
            problems.append(f"extra parameter {_describe(a)} has no default")
    return problems


def _signature_of(obj: Any) -> inspect.Signature:
    try:
        return inspect.signature(obj)
    except (TypeError, ValueError) as exc:
        pytest.fail(f"{obj!r} has no introspectable signature: {exc}")


def check_callable(
    actual: Any, reference: Callable[..., Any], label: str, *, owner: str = ""
) -> None:
    assert callable(actual), f"{label} is not callable"
    problems = signature_problems(
        _reference_signature(reference, owner=owner), _signature_of(actual), method=bool(owner)
    )
    assert not problems, f"{label}{_signature_of(actual)}: " + "; ".join(problems)


# -- the namespace ---------------------------------------------------------------------
def _check_name(namespace: Any, reference: Any, name: str, label: str) -> None:
    assert hasattr(namespace, name), f"{label} is missing"
    ref = getattr(reference, name)
    if callable(ref) and not isinstance(ref, type):
        check_callable(getattr(namespace, name), ref, label)


@pytest.mark.parametrize("name", MAIN_NAMES)
def test_main_namespace_name(name: str) -> None:
    _check_name(ert, xps, name, f"eagerrt.{name}")


@pytest.mark.parametrize("name", LINALG_NAMES)
def test_linalg_extension_name(name: str) -> None:
    linalg = getattr(ert, "linalg", None)
    assert linalg is not None, "eagerrt.linalg (the linalg extension) is missing"
    _check_name(linalg, xps.linalg, name, f"eagerrt.linalg.{name}")


@pytest.mark.parametrize("name", FFT_NAMES)
def test_fft_extension_name(name: str) -> None:
    fft = getattr(ert, "fft", None)
    assert fft is not None, "eagerrt.fft (the fft extension) is missing"
    _check_name(fft, xps.fft, name, f"eagerrt.fft.{name}")


def test_the_name_lists_are_the_2024_12_standard() -> None:
    # Guards the walk above: a change in array_api_strict that drops names (or the
    # version guard) would silently shrink what the other tests check.
    assert len(MAIN_NAMES) > 150
    assert {"nextafter", "reciprocal", "count_nonzero", "take_along_axis", "diff"} <= set(
        MAIN_NAMES
    )
    assert {"isin", "broadcast_shapes"}.isdisjoint(MAIN_NAMES)  # new in 2025.12
    assert {"eig", "eigvals"}.isdisjoint(LINALG_NAMES)  # new in 2025.12
    assert len(LINALG_NAMES) == 23
    assert len(FFT_NAMES) == 14
    assert set(DTYPE_NAMES) <= set(MAIN_NAMES)
    assert set(CONSTANTS) <= set(MAIN_NAMES)


def test_array_api_version() -> None:
    assert getattr(ert, "__array_api_version__", None) == "2024.12"


@pytest.mark.parametrize("name", sorted(CONSTANTS))
def test_constant_value(name: str) -> None:
    assert hasattr(ert, name), f"eagerrt.{name} is missing"
    value, expected = getattr(ert, name), CONSTANTS[name]
    if expected is None:
        assert value is None
    elif math.isnan(expected):
        assert isinstance(value, float) and math.isnan(value)
    else:
        assert isinstance(value, float) and value == expected


@pytest.mark.parametrize("name", DTYPE_NAMES)
def test_dtype_name_is_the_tensors_dtype(name: str) -> None:
    assert hasattr(ert, name), f"eagerrt.{name} is missing"
    dtype = getattr(ert, name)
    # Built from numpy data, so this holds even while ``dtype=`` is being reworked.
    t = ert.asarray(np.zeros(2, dtype=name))
    assert dtype == t.dtype
    assert t.dtype == dtype
    assert ert.zeros((2,), dtype=dtype).dtype == dtype
    others = [getattr(ert, other, None) for other in DTYPE_NAMES if other != name]
    assert all(dtype != other for other in others), f"eagerrt.{name} equals another dtype"


# -- __array_namespace_info__ ------------------------------------------------------------
def _info() -> Any:
    assert hasattr(ert, "__array_namespace_info__"), "eagerrt.__array_namespace_info__ is missing"
    return ert.__array_namespace_info__()


INFO_METHODS = ("capabilities", "default_device", "default_dtypes", "devices", "dtypes")
DTYPE_KINDS = (
    None,
    "bool",
    "signed integer",
    "unsigned integer",
    "integral",
    "real floating",
    "complex floating",
    "numeric",
)


@pytest.mark.parametrize("method", INFO_METHODS)
def test_namespace_info_method(method: str) -> None:
    info, reference = _info(), xps.__array_namespace_info__()
    assert hasattr(info, method), f"__array_namespace_info__().{method} is missing"
    # Bound methods on both sides: the signatures leave ``self`` out.
    check_callable(
        getattr(info, method), getattr(reference, method), f"__array_namespace_info__().{method}"
    )


def test_namespace_info_capabilities() -> None:
    capabilities = _info().capabilities()
    reference = xps.__array_namespace_info__().capabilities()
    # 2024.12: "boolean indexing", "data-dependent shapes" and "max dimensions".
    assert set(capabilities) == set(reference)
    assert isinstance(capabilities["boolean indexing"], bool)
    assert isinstance(capabilities["data-dependent shapes"], bool)
    max_dims = capabilities["max dimensions"]
    assert max_dims is None or (isinstance(max_dims, int) and max_dims >= 1)


def test_namespace_info_default_dtypes_are_the_namespace_dtypes() -> None:
    defaults = _info().default_dtypes()
    reference = xps.__array_namespace_info__().default_dtypes()
    assert set(defaults) == set(reference)
    allowed = {
        "real floating": ("float32", "float64"),
        "complex floating": ("complex64", "complex128"),
        "integral": ("int32", "int64"),
        "indexing": ("int32", "int64"),
    }
    for kind, names in allowed.items():
        assert any(defaults[kind] == getattr(ert, n, None) for n in names), (kind, defaults[kind])
    # The defaults are what dtype-less creation gives (asarray: "If all elements are
    # int, the output array must have the default integer data type", etc.).
    assert ert.asarray([1, 2]).dtype == defaults["integral"]
    assert ert.asarray([1.5]).dtype == defaults["real floating"]
    assert ert.asarray([1j]).dtype == defaults["complex floating"]
    assert ert.arange(3).dtype == defaults["integral"]
    assert ert.argmax(ert.asarray([1.0, 3.0])).dtype == defaults["indexing"]


def test_namespace_info_default_device_and_devices() -> None:
    info = _info()
    device = info.default_device()
    assert device in list(info.devices())
    assert ert.asarray([1.0]).device == device


@pytest.mark.parametrize("kind", DTYPE_KINDS, ids=str)
def test_namespace_info_dtypes(kind: str | None) -> None:
    dtypes = _info().dtypes(kind=kind)
    reference = xps.__array_namespace_info__().dtypes(kind=kind)
    assert set(dtypes) == set(reference)
    for name, dtype in dtypes.items():
        assert dtype == getattr(ert, name, None), name


# -- the array object ---------------------------------------------------------------------
def _tensor_attribute(name: str) -> Any:
    attr = inspect.getattr_static(ert.Tensor, name, None)
    # ``object`` gives every class __eq__, __lt__, __ne__, ...: those are not Tensor's.
    assert attr is not None and attr is not inspect.getattr_static(object, name, None), (
        f"Tensor.{name} is missing"
    )
    return attr


@pytest.mark.parametrize("name", ARRAY_NAMES)
def test_array_attribute(name: str) -> None:
    attr = _tensor_attribute(name)
    if name in ARRAY_PROPERTIES:
        t = ert.asarray(np.ones((2, 3), dtype=np.float32))
        value = getattr(t, name)
        assert not callable(value) or isinstance(value, ert.Tensor), (
            f"Tensor.{name} is a method; the standard's is an attribute"
        )
        return
    check_callable(
        getattr(ert.Tensor, name), getattr(_StrictArray, name), f"Tensor.{name}", owner="Array"
    )
    assert not isinstance(attr, (staticmethod, classmethod)), f"Tensor.{name} is not a method"


def test_array_attribute_values() -> None:
    x = ert.asarray(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    assert x.shape == (2, 3, 4) and isinstance(x.shape, tuple)
    assert x.ndim == 3
    assert x.size == 24
    assert x.mT.shape == (2, 4, 3)
    np.testing.assert_array_equal(x.mT.numpy(), np.swapaxes(x.numpy(), -1, -2))
    m = ert.asarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    assert m.T.shape == (3, 2)
    np.testing.assert_array_equal(m.T.numpy(), m.numpy().T)
    assert ert.asarray(np.zeros((2, 0))).size == 0
    assert ert.asarray(np.float64(1.0)).shape == ()


def test_array_namespace_is_eagerrt() -> None:
    t = ert.asarray(np.ones(2))
    assert t.__array_namespace__() is ert
    assert t.__array_namespace__(api_version="2024.12") is ert


def test_to_device_on_own_device() -> None:
    t = ert.asarray(np.arange(3.0))
    moved = t.to_device(t.device)
    assert moved.device == t.device
    np.testing.assert_array_equal(moved.numpy(), t.numpy())


def test_dlpack_round_trip() -> None:
    data = np.arange(6, dtype=np.int32).reshape(2, 3)
    t = ert.asarray(data)
    device_type, _ = t.__dlpack_device__()
    assert int(device_type) == 1  # kDLCPU: eagerrt's default device is the host
    np.testing.assert_array_equal(np.from_dlpack(t), data)
    back = ert.from_dlpack(data)
    assert back.shape == (2, 3) and back.dtype == ert.int32
    np.testing.assert_array_equal(back.numpy(), data)


def test_signature_rule_itself() -> None:
    # The checker must flag every kind of mismatch, and accept conforming extras.
    def ref(x: Any, /, *, axis: Any = None, keepdims: bool = False) -> None: ...

    def good(a: Any, /, *, axis: Any = None, keepdims: bool = False, out: Any = None) -> None: ...

    def bad_kind(x: Any, axis: Any = None, keepdims: bool = False) -> None: ...

    def bad_default(x: Any, /, *, axis: Any = 0, keepdims: bool = False) -> None: ...

    def bad_extra(x: Any, /, *, axis: Any = None, keepdims: bool = False, extra: Any) -> None: ...

    def bad_name(x: Any, /, *, dim: Any = None, keepdims: bool = False) -> None: ...

    def missing(x: Any, /, *, axis: Any = None) -> None: ...

    def var_args(*args: Any, **kwargs: Any) -> None: ...

    reference = inspect.signature(ref)
    assert signature_problems(reference, inspect.signature(good)) == []
    for wrong in (bad_kind, bad_default, bad_extra, bad_name, missing, var_args):
        assert signature_problems(reference, inspect.signature(wrong)), wrong.__name__
