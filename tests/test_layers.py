"""Imports point downward only: _core knows nothing of ops or devices, devices
nothing of ops. A layering slip here is how a runtime turns into a knot."""

from __future__ import annotations

import ast
import pathlib

import pytest

SRC = pathlib.Path(__file__).resolve().parents[1] / "src" / "eagerrt"

# package -> the parts of eagerrt it must never import
FORBIDDEN = {
    "_core": {"ops", "devices", "tensor", "calibrate", "lowlevel"},
    "devices": {"ops", "tensor", "calibrate"},
}


def imported_parts(source: str, package: tuple[str, ...]) -> set[str]:
    """The first component under ``eagerrt`` of every import in ``source``.

    ``package`` is the module's package path below eagerrt, e.g. ``("_core",)``.
    """
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = list(package[: len(package) - node.level + 1])
            parts = base + (node.module.split(".") if node.module else [])
            if parts:
                found.add(parts[0])
            else:  # `from . import x` in eagerrt/__init__.py
                found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("eagerrt."):
            found.add(node.module.split(".")[1])  # type: ignore[union-attr]
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[1] for a in node.names if a.name.startswith("eagerrt."))
    return found


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_imports_point_downward(layer: str) -> None:
    offenders = {}
    for path in sorted((SRC / layer).rglob("*.py")):
        package = path.relative_to(SRC).parts[:-1]
        bad = imported_parts(path.read_text(), package) & FORBIDDEN[layer]
        if bad:
            offenders[str(path.relative_to(SRC))] = sorted(bad)
    assert not offenders, f"upward imports: {offenders}"


@pytest.mark.parametrize(
    "statement",
    ["from ..ops import registry", "from ..tensor import Tensor", "import eagerrt.ops.registry"],
)
def test_checker_sees_an_upward_import(statement: str) -> None:
    assert imported_parts(statement, ("_core",)) & FORBIDDEN["_core"]


def test_checker_allows_imports_within_core() -> None:
    assert imported_parts("from .errors import EagerError", ("_core",)) == {"_core"}


def test_every_op_module_is_re_exported_by_eagerrt() -> None:
    """eagerrt/__init__.py lists the op modules one by one (so type checkers see
    their names); a module added to eagerrt.ops but not there would be missed."""
    import eagerrt
    from eagerrt import ops

    missing = [name for name in ops.__all__ if not hasattr(eagerrt, name)]
    assert not missing, f"in eagerrt.ops but not in eagerrt: {missing}"
    assert set(ops.__all__) <= set(eagerrt.__all__)


def test_elementwise_all_lists_every_ufunc_op() -> None:
    from eagerrt.ops import elementwise

    assert set(elementwise.UFUNC_OPS) | {"neg", "pow"} <= set(elementwise.__all__)
