"""scikit-learn and SciPy on eagerrt tensors against numpy: run in its own process.

scikit-learn's array API dispatch needs ``SCIPY_ARRAY_API=1`` before SciPy is
first imported, so ``tests/test_clients.py`` runs this file in a child process
with it set and reads one JSON line: for each case, "ok" or why not.

* every estimator scikit-learn tags as supporting the Array API
  (``__sklearn_tags__().array_api_support``), through scikit-learn's own
  ``check_array_api_input(..., check_values=True)``: fitted on eagerrt tensors,
  each method's result equal to numpy's; GaussianMixture (not tagged, and the
  case that needs writes through views) on rank-deficient data;
* SciPy functions its documentation lists as supporting the Array API, each
  equal to numpy's result on the same data.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
import warnings
from collections.abc import Callable
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
        "stats.describe": lambda: _close(
            s.describe(ert.asarray(x), axis=1).mean, s.describe(x, axis=1).mean
        ),
    }


def main() -> None:
    results: dict[str, str] = {}
    for group, cases in (("sklearn", estimator_cases()), ("scipy", scipy_cases())):
        for name, run in cases.items():
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    run()
                results[f"{group}.{name}"] = "ok"
            except Exception as exc:
                detail = traceback.format_exception_only(type(exc), exc)[-1].strip()
                results[f"{group}.{name}"] = detail[:400]
    print(json.dumps(results))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
