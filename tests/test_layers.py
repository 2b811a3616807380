"""The package's layers (docs/design.md): a module imports only from its own layer or below,
and no import cycle exists. Every import counts: module level, inside a function (a "late"
import), and under ``TYPE_CHECKING``."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "contextfold"

# Bottom to top. A key names a module (``"budget"``) or a whole package (``"store"``);
# the most specific key wins. Keep in step with the picture in docs/design.md.
LAYERS: dict[str, int] = {
    "errors": 0,
    "shown": 0,
    "events": 0,
    "tokens": 1,
    "conventions": 1,
    "ingress": 1,
    "budget": 1,
    "meter": 1,
    "views": 1,
    "context_lock": 1,
    "prices": 1,
    "costing": 1,
    "context_editing": 1,
    "readable": 1,
    "identifiers": 1,
    "messages": 2,
    "common_shapes": 2,
    "cache_marks": 2,
    "admission": 3,
    "repair": 3,
    "request_forms": 3,
    "history": 4,
    "store": 4,
    "summaries": 4,
    "recall": 4,
    "ledger": 4,
    "search": 4,
    "compaction": 5,
    "config": 6,
    "report": 6,
    "manager": 7,
    "context_state": 7,
    "context_search": 7,
    "delivery": 7,
    "persistence": 7,
    "summary_pass": 7,
    "usage_feed": 7,
    "measured": 7,
    "request": 7,
    "oneshot": 7,
    "mirror": 7,
    "inspection": 7,
    "telemetry": 7,
    "amplifier": 8,
    "integrations": 8,
    "formats": 8,
    "evaluation": 8,
    "cli": 9,
    "__init__": 10,  # the package root re-exports the public API from every layer
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def layer_of(module: str) -> int:
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        key = ".".join(parts[:end])
        if key in LAYERS:
            return LAYERS[key]
    raise KeyError(f"{module}: no layer in tests/test_layers.py; add it to LAYERS")


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _resolve(module: str, path: Path, node: ast.ImportFrom) -> Iterator[str]:
    """The package modules an ``import from`` names (relative or ``contextfold.``)."""
    if node.level:
        package = module.split(".")
        if path.name != "__init__.py":
            package = package[:-1]
        package = package[: len(package) - (node.level - 1)] if node.level > 1 else package
        base = ".".join([*package, node.module] if node.module else package)
    elif node.module and (node.module == "contextfold" or node.module.startswith("contextfold.")):
        base = node.module.removeprefix("contextfold").lstrip(".")
    else:
        return
    for alias in node.names:
        candidate = f"{base}.{alias.name}" if base else alias.name
        if candidate in MODULES:
            yield candidate  # ``from . import settings``: the submodule itself
        elif base in MODULES or base == "":
            yield base or "__init__"


def imports_of(module: str) -> set[str]:
    path = MODULES[module]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            found.update(_resolve(module, path, node))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("contextfold."):
                    name = alias.name.removeprefix("contextfold.")
                    while name and name not in MODULES:
                        name = name.rpartition(".")[0]
                    if name:
                        found.add(name)
    found.discard(module)
    return found


GRAPH = {module: imports_of(module) for module in MODULES}


def test_every_module_has_a_layer() -> None:
    for module in MODULES:
        layer_of(module)


def test_no_module_imports_from_a_higher_layer() -> None:
    upward = [
        f"{module} (layer {layer_of(module)}) imports {target} (layer {layer_of(target)})"
        for module, targets in GRAPH.items()
        for target in sorted(targets)
        if layer_of(target) > layer_of(module)
    ]
    assert not upward, "\n".join(upward)


def _cycles() -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(GRAPH[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(GRAPH):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle() -> None:
    assert not _cycles(), _cycles()


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from .messages import Kind", {"messages"}),
        ("from . import conventions", {"conventions"}),
        ("from ..history import History", {"history"}),
        ("import contextfold.manager", {"manager"}),
        ("if TYPE_CHECKING:\n    from .manager import ContextFold", {"manager"}),
        ("def f():\n    from .manager import ContextFold", {"manager"}),
    ],
)
def test_the_checker_sees_every_kind_of_import(
    source: str, expected: set[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A module placed as ``compaction/probe.py`` or ``probe.py`` by how deep it imports.
    deep = "..history" in source
    path = PACKAGE / ("compaction" if deep else "") / "probe.py"
    module = "compaction.probe" if deep else "probe"
    monkeypatch.setitem(MODULES, module, path)
    monkeypatch.setattr(Path, "read_text", lambda self, encoding=None: source)
    assert imports_of(module) == expected


def test_the_manager_stays_wiring() -> None:
    # ContextFold keeps the protocol methods and hands each job to a named part (admission,
    # request planning, persistence, the usage feed, summaries, telemetry): logic that grows
    # it belongs in the part's own module.
    lines = (PACKAGE / "manager.py").read_text(encoding="utf-8").count("\n")
    assert lines < 500, f"manager.py has {lines} lines; move the logic to the part it wires"
