"""Sphinx configuration: concept pages and guides in Markdown (MyST), the API
reference from the docstrings (autodoc; they are written in reStructuredText).

Build with ``./dev docs`` (``sphinx-build -W --keep-going -n``: a warning or a
reference to nothing fails the build; tests/test_docs.py runs the same build).
"""

from __future__ import annotations

import importlib
import inspect
import pathlib
import sys
from typing import Any, ClassVar

from docutils import nodes
from docutils.parsers.rst import directives
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "src"))

import eagerrt

project = "eagerrt"
release = version = eagerrt.__version__
extensions = ["myst_parser", "sphinx.ext.autodoc"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build"]
myst_heading_anchors = 3
html_theme = "alabaster"
html_title = "eagerrt"

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented_params"
autodoc_default_options = {"members": True, "show-inheritance": True}

# Nitpicky mode reports every cross-reference to nothing. Types from outside
# eagerrt have no documentation here (no network for intersphinx), so they
# are let through; everything in eagerrt must resolve.
nitpicky = True
nitpick_ignore_regex = [
    (r"py:.*", r"(np|numpy|typing|collections|contextlib|asyncio|concurrent|threading|os)\..*"),
    (r"py:.*", r"(Any|Callable|Iterator|Generator|Sequence|Iterable|Mapping|T|Self)"),
    (r"py:.*", r"(trio|anyio|numba|cupy|torch|matplotlib|tqdm|aiohttp)(\..*)?"),
    # Type variables of generic classes (Stage[R]): not documented objects.
    (r"py:class", r"eagerrt\.[\w.]+\.[A-Z]"),
    # What Function.compiled_for returns: an internal plan, not part of the API.
    ("py:class", "eagerrt.graph.function.Compiled"),
    # What a backend's compiler is given: the traced graph, an internal structure.
    ("py:class", "eagerrt.graph.ir.Graph"),
]


def _plain_signature(obj: Any) -> str:
    """Parameter names and defaults, without annotations: the ops' type aliases
    (``Axis``, ``DeviceLike``) are not documented classes."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return "(...)"
    empty = inspect.Parameter.empty
    params = [p.replace(annotation=empty) for p in sig.parameters.values()]
    return str(sig.replace(parameters=params, return_annotation=empty))


class OpList(SphinxDirective):
    """``.. eagerrt-ops:: module``: every op a module exports, each with its
    signature and the first paragraph of its docstring, as ``py:function``
    entries under the namespace users call it from (``:namespace:``, by default
    ``eagerrt``), so ``:func:`` references to ops resolve.

    Ops made from tables (``exp``, ``sin``, ...) are :class:`eagerrt.Op`
    instances, not functions, which autodoc would not list.
    """

    required_arguments = 1
    option_spec: ClassVar[dict[str, Any]] = {"namespace": directives.unchanged}

    def run(self) -> list[nodes.Node]:
        module = importlib.import_module(self.arguments[0])
        namespace = self.options.get("namespace", "eagerrt")
        lines = [f".. py:currentmodule:: {namespace}", ""]
        for name in sorted(module.__all__):
            obj = getattr(module, name)
            signature = _plain_signature(obj)
            doc = inspect.getdoc(obj) or ""
            summary = doc.split("\n\n")[0].splitlines() or ["(no docstring)"]
            lines += [f".. py:function:: {name}{signature}", "   :no-index-entry:", ""]
            lines += [f"   {line}" for line in summary] + [""]
        container = nodes.container()
        self.state.nested_parse(StringList(lines, source=self.arguments[0]), 0, container)
        return list(container.children)


def setup(app: Any) -> None:
    app.add_directive("eagerrt-ops", OpList)
