"""Loading by ``source:``: the kernel finds contextfold's modules in a fetched tree.

When a bundle names a module by git ``source:``, Amplifier's foundation clones the repository
and mounts a module-source resolver that answers with the clone's path; the kernel's loader
then looks for an ``amplifier_module_<id>`` package at the root of that tree, validates it and
imports its ``mount``. Here a copy of this repository's tree stands for the clone (the git
step is foundation's, not ours), and everything after it is the real kernel: the resolver
protocol, the layout check, the validators, the import and the mount.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from amplifier_core import AmplifierSession
from amplifier_core.loader import ModuleLoader
from amplifier_core.module_sources import ModuleSource
from amplifier_core.testing import MockCoordinator

from contextfold import ContextFold
from support import kernel_cli

ROOT = Path(__file__).resolve().parents[1]
SOURCE = "git+https://github.com/example/contextfold@main"
# module id -> (module type, package at the root of the tree)
MODULES = {
    "context-fold": ("context", "amplifier_module_context_fold"),
    "loop-fold": ("orchestrator", "amplifier_module_loop_fold"),
    "provider-scripted": ("provider", "amplifier_module_provider_scripted"),
    "tool-doc-lookup": ("tool", "amplifier_module_tool_doc_lookup"),
    "tool-context-recall": ("tool", "amplifier_module_tool_context_recall"),
    "hooks-context-inject": ("hook", "amplifier_module_hooks_context_inject"),
}

pytestmark = pytest.mark.integration


class FetchedTree(ModuleSource):
    def __init__(self, path: Path) -> None:
        self.path = path

    def resolve(self) -> Path:
        return self.path

    def __str__(self) -> str:
        return str(self.path)


class CloneResolver:
    """What foundation mounts at ``module-source-resolver`` after fetching a git source:
    every module id it was asked about answers with the clone's path."""

    def __init__(self, clone: Path) -> None:
        self.clone = clone
        self.asked: list[tuple[str, object]] = []

    def resolve(self, module_id: str, source_hint=None, profile_hint=None) -> FetchedTree:
        self.asked.append((module_id, source_hint))
        return FetchedTree(self.clone)


def _copy_tree(destination: Path, *, with_doors: bool = True) -> Path:
    """The files a clone of this repository holds, as far as module loading reads them."""
    ignore = shutil.ignore_patterns("__pycache__")
    destination.mkdir()
    shutil.copy2(ROOT / "pyproject.toml", destination / "pyproject.toml")
    shutil.copytree(ROOT / "src", destination / "src", ignore=ignore)
    if with_doors:
        for _kind, package in MODULES.values():
            shutil.copytree(ROOT / package, destination / package, ignore=ignore)
    return destination


@pytest.fixture
def isolated_imports(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel puts the clone on sys.path and imports its packages: undo both after."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    for _kind, package in MODULES.values():
        monkeypatch.delitem(sys.modules, package, raising=False)


async def test_session_loads_every_module_from_the_fetched_tree(
    tmp_path: Path, isolated_imports: None
) -> None:
    clone = _copy_tree(tmp_path / "clone")
    resolver = CloneResolver(clone)
    plan = {
        "session": {
            "orchestrator": {"module": "loop-fold", "source": SOURCE},
            "context": {
                "module": "context-fold",
                "source": SOURCE,
                "config": {"max_tokens": 12_000},
            },
        },
        "providers": [
            {
                "module": "provider-scripted",
                "source": SOURCE,
                "config": {
                    "script": {
                        "steps": 8,
                        "tool": "lookup",
                        "argument": "topic",
                        "final_text": "Done.",
                    }
                },
            }
        ],
        "tools": [
            {"module": "tool-doc-lookup", "source": SOURCE, "config": {}},
            {"module": "tool-context-recall", "source": SOURCE, "config": {}},
        ],
        "hooks": [{"module": "hooks-context-inject", "source": SOURCE, "config": {}}],
    }
    session = AmplifierSession(plan)
    await session.coordinator.mount("module-source-resolver", resolver)
    await session.initialize()
    try:
        answer = await session.execute("Look up eight topics.")
        context = session.coordinator.get("context")
        assert isinstance(context, ContextFold)
        assert "Done." in answer
        history = await context.get_messages()
        assert sum(1 for m in history if m["role"] == "tool") == 8
        assert context.last_report is not None and context.last_report.budget == 12_000
    finally:
        await session.cleanup()
    assert sorted(resolver.asked) == sorted((module_id, SOURCE) for module_id in MODULES)
    for _kind, package in MODULES.values():
        # each module was imported from the clone, not from the installed distribution
        assert Path(sys.modules[package].__file__).is_relative_to(clone), package


@pytest.mark.parametrize("module_id", sorted(MODULES))
async def test_kernel_loader_resolves_and_mounts_each_module(
    module_id: str, tmp_path: Path, isolated_imports: None
) -> None:
    clone = _copy_tree(tmp_path / "clone")
    coordinator = MockCoordinator()
    await coordinator.mount("module-source-resolver", CloneResolver(clone))
    loader = ModuleLoader(coordinator=coordinator)
    mount = await loader.load(module_id, {}, source_hint=SOURCE)
    await mount(coordinator)
    _kind, package = MODULES[module_id]
    assert Path(sys.modules[package].__file__).is_relative_to(clone)
    if module_id == "context-fold":
        assert isinstance(coordinator.get("context"), ContextFold)


async def test_a_tree_without_the_packages_fails_as_the_issue_reported(
    tmp_path: Path, isolated_imports: None
) -> None:
    clone = _copy_tree(tmp_path / "clone", with_doors=False)
    coordinator = MockCoordinator()
    await coordinator.mount("module-source-resolver", CloneResolver(clone))
    loader = ModuleLoader(coordinator=coordinator)
    with pytest.raises(Exception, match="has no valid Python package"):
        await loader.load("context-fold", {}, source_hint=SOURCE)


@pytest.mark.slow
@pytest.mark.parametrize("module_id", sorted(MODULES))
def test_kernel_validator_accepts_each_package(module_id: str) -> None:
    kind, package = MODULES[module_id]
    result = subprocess.run(
        kernel_cli("validate", kind, str(ROOT / package)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "PASSED" in out and "0 errors" in out, out


def test_wheel_entry_points_and_doors_name_the_same_mount() -> None:
    from importlib import import_module
    from importlib.metadata import entry_points

    by_name = {ep.name: ep for ep in entry_points(group="amplifier.modules")}
    for module_id, (_kind, package) in MODULES.items():
        assert module_id in by_name, module_id
        assert import_module(package).mount is by_name[module_id].load(), module_id
