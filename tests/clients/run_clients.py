"""scikit-learn and SciPy on eagerrt tensors against numpy: run in its own process.

scikit-learn's array API dispatch needs ``SCIPY_ARRAY_API=1`` before SciPy is
first imported, so ``tests/test_clients.py`` runs this file in a child process
with it set and reads one JSON line: for each case, "ok" or why not.

* every estimator scikit-learn tags as supporting the Array API
  (``__sklearn_tags__().array_api_support``), through scikit-learn's own
  ``check_array_api_input(..., check_values=True)``: fitted on eagerrt tensors,
  each method's result equal to numpy's; GaussianMixture (not tagged, and the
  case that needs writes through views) on rank-deficient data;
* every metric scikit-learn's own test suite checks under the Array API,
  through the checks that suite uses (``array_api_metric_checkers``);
* every function in SciPy's own capabilities table (the one its documentation
  prints) as supporting the Array API, called with the first of a list of
  generic inputs that numpy accepts, equal to numpy's result; those no generic
  input fits are named in the report; and SciPy by hand: functions with the
  options (``axis=``) a user passes, and ``Rotation``/``RigidTransform`` made
  from tensors (classes, which the table's generic inputs can't reach).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import json
import os
import signal
import sys
import traceback
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

assert os.environ.get("SCIPY_ARRAY_API") == "1", "run with SCIPY_ARRAY_API=1"

import scipy.special  # noqa: E402
import scipy.stats  # noqa: E402
import sklearn  # noqa: E402
from sklearn.utils import all_estimators  # noqa: E402
from sklearn.utils.estimator_checks import check_array_api_input  # noqa: E402

import eagerrt as ert  # noqa: E402

RNG = np.random.default_rng(0)


def _close(got: Any, expected: Any, tol: float = 1e-10) -> None:
    got = np.asarray(got.numpy() if isinstance(got, ert.Tensor) else got, dtype=np.float64)
    np.testing.assert_allclose(got, np.asarray(expected, dtype=np.float64), rtol=tol, atol=tol)


def estimator_cases() -> dict[str, Callable[[], None]]:
    cases: dict[str, Callable[[], None]] = {}
    for name, cls in all_estimators():
        try:
            estimator = cls()
            tagged = estimator.__sklearn_tags__().array_api_support
        except Exception:  # estimators that need arguments, or have no tags
            continue
        if not tagged:
            continue
        if name == "LabelEncoder":  # fits labels alone; the common check passes X and y
            cases[name] = _label_encoder
        elif name == "PCA":  # the common check's data makes score -inf on both sides
            cases[name] = _pca
        else:
            cases[name] = lambda name=name, estimator=estimator: check_array_api_input(
                name,
                estimator,
                "eagerrt",
                device_name=None,
                dtype_name="float64",
                check_values=True,
            )
    cases["GaussianMixture"] = _gaussian_mixture
    return cases


def _label_encoder() -> None:
    from sklearn.preprocessing import LabelEncoder

    y = RNG.integers(0, 5, 50).astype(np.float64)
    expected = LabelEncoder().fit_transform(y)
    with sklearn.config_context(array_api_dispatch=True):
        got = LabelEncoder().fit_transform(ert.asarray(y))
    _close(got, expected)


def _pca() -> None:
    from sklearn.decomposition import PCA

    X = RNG.standard_normal((60, 5)) @ RNG.standard_normal((5, 5))
    ref = PCA(n_components=3).fit(X)
    with sklearn.config_context(array_api_dispatch=True):
        est = PCA(n_components=3).fit(ert.asarray(X))
        transformed, score = est.transform(ert.asarray(X)), est.score(ert.asarray(X))
    _close(np.abs(transformed.numpy()), np.abs(ref.transform(X)), 1e-8)  # signs may flip
    _close(score, ref.score(X), 1e-8)


def _gaussian_mixture() -> None:
    from sklearn.mixture import GaussianMixture

    X = np.concatenate([RNG.normal(0, 1, (80, 3)), RNG.normal(4, 1, (80, 3))])
    X[:, 2] = 2 * X[:, 0]  # rank-deficient: reg_covar must reach each covariance's diagonal
    options = {"n_components": 2, "random_state": 0, "init_params": "random_from_data"}
    ref = GaussianMixture(**options).fit(X)
    with sklearn.config_context(array_api_dispatch=True):
        est = GaussianMixture(**options).fit(ert.asarray(X))
        proba = est.predict_proba(ert.asarray(X))
    _close(proba, ref.predict_proba(X), 1e-8)
    _close(est.means_, ref.means_, 1e-8)


def scipy_cases() -> dict[str, Callable[[], None]]:
    x = RNG.standard_normal((6, 40))
    y = RNG.standard_normal((6, 40))
    positive = np.abs(x) + 0.5
    unit = 1 / (1 + np.exp(-x))

    def case(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Callable[[], None]:
        def run() -> None:
            expected = fn(*args, **kwargs)
            got = fn(*(ert.asarray(a) if isinstance(a, np.ndarray) else a for a in args), **kwargs)
            if hasattr(expected, "_fields") or isinstance(expected, tuple):  # result tuples
                for g, e in zip(got, expected, strict=True):
                    _close(g, e)
            else:
                _close(got, expected)

        return run

    s, sp = scipy.stats, scipy.special
    return {
        "special.erf": case(sp.erf, x),
        "special.erfc": case(sp.erfc, x),
        "special.expit": case(sp.expit, x),
        "special.logit": case(sp.logit, unit),
        "special.gammaln": case(sp.gammaln, positive),
        "special.log_ndtr": case(sp.log_ndtr, x),
        "special.ndtr": case(sp.ndtr, x),
        "special.xlogy": case(sp.xlogy, positive, positive),
        "special.entr": case(sp.entr, positive),
        "special.logsumexp": case(sp.logsumexp, x, axis=1),
        "special.softmax": case(sp.softmax, x, axis=1),
        "stats.moment": case(s.moment, x, order=3, axis=1),
        "stats.skew": case(s.skew, x, axis=1),
        "stats.kurtosis": case(s.kurtosis, x, axis=1),
        "stats.zscore": case(s.zscore, x, axis=1),
        "stats.variation": case(s.variation, positive, axis=1),
        "stats.gmean": case(s.gmean, positive, axis=1),
        "stats.hmean": case(s.hmean, positive, axis=1),
        "stats.pmean": case(s.pmean, positive, 2.5, axis=1),
        "stats.sem": case(s.sem, x, axis=1),
        "stats.entropy": case(s.entropy, positive, axis=1),
        "stats.pearsonr": case(s.pearsonr, x[0], y[0]),
        "stats.ttest_1samp": case(s.ttest_1samp, x, 0.0, axis=1),
        "stats.ttest_ind": case(s.ttest_ind, x, y, axis=1),
        "integrate.qmc_quad": _qmc_quad,
        "stats.describe": lambda: _close(
            s.describe(ert.asarray(x), axis=1).mean, s.describe(x, axis=1).mean
        ),
    }


def _qmc_quad() -> None:
    from scipy.integrate import qmc_quad
    from scipy.stats import qmc

    a, b = RNG.uniform(0, 1, 3), RNG.uniform(1, 2, 3)

    def integrate(lower: Any, upper: Any) -> Any:
        return qmc_quad(lambda v: v[0] * v[1] + v[2], lower, upper, qrng=qmc.Halton(3, seed=1))

    got, expected = integrate(ert.asarray(a), ert.asarray(b)), integrate(a, b)
    _close(got.integral, expected.integral)
    _close(got.standard_error, expected.standard_error)


def rotation_cases() -> dict[str, Callable[[], None]]:
    """SciPy's Rotation and RigidTransform (classes, so no generic input fits
    their table entries): made from tensors, each result equal to numpy's."""
    from scipy.spatial.transform import RigidTransform, Rotation

    q, v = RNG.standard_normal((5, 4)), RNG.standard_normal((5, 3))

    def rotation(xp: Any) -> Any:
        return Rotation.from_quat(xp.asarray(q))

    def transform(xp: Any) -> Any:
        return RigidTransform.from_components(xp.asarray(v), rotation(xp))

    def canonical(r: Any) -> Any:
        return r.as_quat(canonical=True)

    made: dict[str, Callable[[Any], Any]] = {
        "as_matrix": lambda xp: rotation(xp).as_matrix(),
        "as_rotvec": lambda xp: rotation(xp).as_rotvec(),
        "as_euler": lambda xp: rotation(xp).as_euler("xyz"),
        "as_mrp": lambda xp: rotation(xp).as_mrp(),
        "apply": lambda xp: rotation(xp).apply(xp.asarray(v)),
        "inv": lambda xp: canonical(rotation(xp).inv()),
        "magnitude": lambda xp: rotation(xp).magnitude(),
        "__mul__": lambda xp: canonical(rotation(xp) * Rotation.from_quat(xp.asarray(q[::-1]))),
        "__pow__": lambda xp: canonical(rotation(xp) ** 0.5),
        "mean": lambda xp: canonical(rotation(xp).mean()),
        "from_rotvec": lambda xp: Rotation.from_rotvec(xp.asarray(v)).as_quat(),
        "from_euler": lambda xp: Rotation.from_euler("xyz", xp.asarray(v)).as_quat(),
        "from_mrp": lambda xp: Rotation.from_mrp(xp.asarray(v * 0.3)).as_quat(),
        "from_matrix": lambda xp: canonical(Rotation.from_matrix(rotation(xp).as_matrix())),
        "align_vectors": lambda xp: canonical(
            Rotation.align_vectors(xp.asarray(v), xp.asarray(v[::-1]))[0]
        ),
        "__getitem__": lambda xp: rotation(xp)[1:3].as_quat(),
        "approx_equal": lambda xp: rotation(xp).approx_equal(rotation(xp)),
        "concatenate": lambda xp: Rotation.concatenate([rotation(xp), rotation(xp)]).as_quat(),
        "RigidTransform.as_matrix": lambda xp: transform(xp).as_matrix(),
        "RigidTransform.apply": lambda xp: transform(xp).apply(xp.asarray(v)),
        "RigidTransform.inv": lambda xp: transform(xp).inv().as_matrix(),
        "RigidTransform.as_exp_coords": lambda xp: transform(xp).as_exp_coords(),
        "RigidTransform.as_dual_quat": lambda xp: transform(xp).as_dual_quat(),
    }
    return {
        f"transform.{name}": lambda make=make: _close(make(ert), make(np), 1e-9)
        for name, make in made.items()
    }


def metric_cases() -> dict[str, Callable[[], None]]:
    """Every metric scikit-learn's own tests check under the Array API, through
    the checks those tests use (binary, multiclass, multilabel, pairwise...)."""
    from sklearn.metrics.tests.test_common import array_api_metric_checkers

    cases: dict[str, Callable[[], None]] = {}
    for metric, checks in array_api_metric_checkers.items():
        for check in checks:
            if isinstance(metric, functools.partial):  # a metric with options fixed
                options = ",".join(f"{k}={v}" for k, v in metric.keywords.items())
                label = f"{metric.func.__name__}({options})"
            else:
                label = metric.__name__
            name = f"metrics.{label}.{check.__name__.removeprefix('check_array_api_')}"
            cases[name] = lambda check=check, metric=metric: check(
                metric, "eagerrt", None, "float64"
            )
    return cases


def _linkage_inputs() -> dict[str, Any]:
    from scipy.cluster.hierarchy import inconsistent, linkage
    from scipy.spatial.distance import pdist

    points = RNG.uniform(0, 1, (10, 3))
    Z = linkage(points)
    return {"Z": Z, "distances": pdist(points), "R": inconsistent(Z)}


def _scipy_table_inputs() -> list[tuple[str, tuple[Any, ...], dict[str, Any]]]:
    """Generic inputs, tried in order: a function gets the first numpy accepts."""
    from scipy import signal

    u, u2, u3 = (RNG.uniform(0.1, 0.9, 40) for _ in range(3))
    rows, rows2 = RNG.uniform(0.1, 0.9, (6, 40)), RNG.uniform(0.1, 0.9, (6, 40))
    spd = RNG.standard_normal((6, 6))
    spd = spd @ spd.T + 6 * np.eye(6)
    image = RNG.uniform(0.1, 0.9, (12, 12))
    b, a = signal.butter(3, 0.3)
    sos = signal.butter(4, 0.3, output="sos")
    linkage = _linkage_inputs()
    return [
        ("x", (u,), {}),
        ("x, y", (u, u2), {}),
        ("x, y, z", (u, u2, u3), {}),
        ("rows", (rows,), {}),
        ("rows, rows", (rows, rows2), {}),
        ("spd matrix", (spd,), {}),
        ("image", (image,), {}),
        ("x, 3", (u, 3), {}),
        ("image, 3", (image, 3), {}),
        ("x, 2.5", (u, 2.5), {}),
        ("x, 0.1", (u, 0.1), {}),
        ("0.5, x", (0.5, u), {}),
        ("columns", (rows.T[:10],), {}),
        ("Z", (linkage["Z"],), {}),
        ("Z, 2", (linkage["Z"], 2), {}),
        ("Z, distances", (linkage["Z"], linkage["distances"]), {}),
        ("Z, R", (linkage["Z"], linkage["R"]), {}),
        ("b, a, x", (b, a, u), {}),
        ("sos, x", (sos, u), {}),
        ("zeros, poles, 1.0", (u[:3] - 0.5, u2[:4] - 0.5, 1.0), {}),
        ("x, 5, 2", (u, 5, 2), {}),
        ("x, 2, 3", (u, 2, 3), {}),
        ("sorted x, y", (np.sort(u), u2), {}),
        ("image, 1, size=3", (image, 1), {"size": 3}),
        ("image, 0, 1, 10", (image, 0, 1, 10), {}),
        ("image, identity", (image, np.eye(2)), {}),
        ("image, coordinates", (image, 10 * RNG.uniform(0, 1, (2, 5))), {}),
        ("square, x", (lambda v: v * v, u), {}),
        ("square, x, y", (lambda v: v * v, u, u + 1), {}),
        ("8, xp=", (8,), {"xp": XP}),  # windows: made in the namespace asked for
        ("8, 0.5, xp=", (8, 0.5), {"xp": XP}),
        ("3, array 0.3", (3, np.array(0.3)), {}),  # filter designs
        ("3, 1.0, array 0.3", (3, 1.0, np.array(0.3)), {}),
        ("3, 1.0, 40.0, array 0.3", (3, 1.0, 40.0, np.array(0.3)), {}),
        ("array 0.3, 30.0", (np.array(0.3), 30.0), {}),
        ("15, array 0.3", (15, np.array(0.3)), {}),
    ]


#: Stands for the namespace in a case's keywords: numpy for the expected
#: result, eagerrt for the one checked.
XP = object()

#: Where an interpolator (a result that is a callable object) is evaluated.
PROBE_POINTS = np.linspace(0.15, 0.85, 7)


def _in(namespace: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    return {k: namespace if v is XP else v for k, v in kwargs.items()}


def _probed(result: Any, asarray: Callable[[Any], Any]) -> Any:
    """An interpolator's values at PROBE_POINTS; any other result as it is."""
    if callable(result) and not isinstance(result, (np.ndarray, ert.Tensor)):
        return result(asarray(PROBE_POINTS))
    return result


def _flatten(result: Any, into: dict[str, Any], path: str = "result") -> None:
    """The arrays and numbers in a result: tuples, named tuples, result objects."""
    if isinstance(result, (np.ndarray, np.generic, ert.Tensor, int, float, complex)):
        into[path] = result
    elif isinstance(result, (tuple, list)):
        for i, item in enumerate(result):
            _flatten(item, into, f"{path}[{i}]")
    elif isinstance(result, dict):  # SciPy's result objects for its solvers
        for key, value in result.items():
            _flatten(value, into, f"{path}[{key!r}]")
    elif hasattr(result, "__dict__"):
        for key, value in vars(result).items():
            if not key.startswith("_"):
                _flatten(value, into, f"{path}.{key}")
    else:
        into[path] = result


def _numeric(values: dict[str, Any]) -> bool:
    return bool(values) and all(
        isinstance(v, (np.ndarray, np.generic, int, float, complex)) for v in values.values()
    )


def scipy_table_cases() -> tuple[dict[str, Callable[[], None]], list[str]]:
    """Every function SciPy's own table (what its docs print) lists as supporting
    the Array API, called with the first generic input numpy accepts; and the
    names for which none of those inputs fits (classes' methods, window
    functions taking only an int, functions taking callables of their own)."""
    import scipy._lib._array_api as scipy_array_api

    for module in SCIPY_MODULES:
        importlib.import_module(f"scipy.{module}")
    inputs = _scipy_table_inputs()
    cases: dict[str, Callable[[], None]] = {}
    no_generic_input: list[str] = []
    for fn, capabilities in scipy_array_api.xp_capabilities_table.items():
        if capabilities["np_only"] or capabilities["out_of_scope"]:
            continue
        name = f"{fn.__module__.removeprefix('scipy.')}.{fn.__name__}"
        if fn.__name__ in RANDOMIZED:
            continue
        for label, args, kwargs in inputs:
            try:
                with _time_limit(5):
                    expected = _probed(fn(*args, **_in(np, kwargs)), np.asarray)
            except Exception:
                continue
            flat: dict[str, Any] = {}
            _flatten(expected, flat)
            if _numeric(flat):
                cases[f"{name}({label})"] = lambda fn=fn, args=args, kwargs=kwargs, flat=flat: (
                    _same_as_numpy(fn, args, kwargs, flat)
                )
                break
        else:
            no_generic_input.append(name)
    return cases, no_generic_input


def _same_as_numpy(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], expected: dict[str, Any]
) -> None:
    with _time_limit(60):
        tensors = (ert.asarray(a) if isinstance(a, np.ndarray) else a for a in args)
        result = _probed(fn(*tensors, **_in(ert, kwargs)), ert.asarray)
    got: dict[str, Any] = {}
    _flatten(result, got)
    assert got.keys() == expected.keys(), f"result parts {sorted(got)} != {sorted(expected)}"
    for key, want in expected.items():
        value = got[key]
        value = np.asarray(value.numpy() if isinstance(value, ert.Tensor) else value)
        want = np.asarray(want)
        assert value.shape == want.shape, f"{key}: shape {value.shape} != {want.shape}"
        if "zpk" in fn.__name__ and want.dtype.kind == "c":  # roots: a set, in any order
            value, want = np.sort_complex(value.ravel()), np.sort_complex(want.ravel())
        np.testing.assert_allclose(value, want, rtol=1e-7, atol=1e-9, equal_nan=True)


# Each call draws its own random points: checked by hand in scipy_cases().
RANDOMIZED = {"qmc_quad"}

SCIPY_MODULES = [
    "cluster",
    "cluster.hierarchy",
    "constants",
    "differentiate",
    "fft",
    "integrate",
    "interpolate",
    "linalg",
    "ndimage",
    "optimize",
    "signal",
    "spatial",
    "spatial.distance",
    "special",
    "stats",
]


@contextlib.contextmanager
def _time_limit(seconds: int) -> Iterator[None]:
    """A generic input can send a solver looping: give up on it (main thread only)."""

    def give_up(*_: Any) -> None:
        raise TimeoutError(f"gave up after {seconds} s")

    previous = signal.signal(signal.SIGALRM, give_up)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def main() -> None:
    results: dict[str, str] = {}
    table_cases, no_generic_input = scipy_table_cases()
    for group, cases in (
        ("sklearn", estimator_cases()),
        ("sklearn", metric_cases()),
        ("scipy", scipy_cases()),
        ("scipy", rotation_cases()),
        ("scipy.table", table_cases),
    ):
        for name, run in cases.items():
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    run()
                results[f"{group}.{name}"] = "ok"
            except Exception as exc:
                detail = traceback.format_exception_only(type(exc), exc)[-1].strip()
                results[f"{group}.{name}"] = detail[:400]
    print(json.dumps({"results": results, "no_generic_input": no_generic_input}))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
