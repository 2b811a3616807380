"""`pip install contextfold` as a host would do it: the library alone, without the extras.

The wheel is built from this tree and installed into a fresh virtual environment with no
extras; the library must import and run the getting-started page's library example there without
amplifier-core, rich, matplotlib or PyYAML, and the console script must name the extra it
needs. Integration tests: they build and install for real (about 5 s with a warm uv cache).
"""

from __future__ import annotations

import inspect
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from amplifier_core import llm_errors

from contextfold import ContextLengthError
from contextfold.errors import StandaloneContextLengthError, context_length_error

ROOT = Path(__file__).resolve().parents[1]
GETTING_STARTED = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")
EXTRAS_ONLY = ("amplifier_core", "rich", "matplotlib", "yaml")

pytestmark = pytest.mark.integration


def _uv() -> str:
    # `uv run` exports UV (the running binary); CI installs uv before the suite.
    uv = os.environ.get("UV") or shutil.which("uv")
    assert uv, "uv is needed to build and install the wheel (the README's one prerequisite)"
    return uv


def _run(args: list[str], **kwargs) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "PYTHONPATH"}}
    return subprocess.run(args, capture_output=True, text=True, timeout=120, env=env, **kwargs)


@pytest.fixture(scope="module")
def bare_venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh venv holding the wheel of this tree and nothing but its core dependencies."""
    work = tmp_path_factory.mktemp("packaging")
    uv = _uv()
    built = _run([uv, "build", "--wheel", "--out-dir", str(work / "dist"), str(ROOT)])
    assert built.returncode == 0, built.stderr
    [wheel] = (work / "dist").glob("contextfold-*.whl")
    venv = work / "venv"
    made = _run([uv, "venv", "--quiet", "--python", sys.executable, str(venv)])
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    install = [uv, "pip", "install", "--quiet", "--python", str(python), str(wheel)]
    # The dependencies are in uv's cache after `uv run`; go to the index only if they are not.
    installed = _run([*install, "--offline"])
    if installed.returncode != 0:
        installed = _run(install)
    assert installed.returncode == 0, installed.stderr
    yield venv


def _python(venv: Path, source: str) -> subprocess.CompletedProcess[str]:
    return _run([str(venv / "bin" / "python"), "-c", source], cwd=venv)


@pytest.mark.slow
def test_library_installs_without_the_extras(bare_venv: Path) -> None:
    probe = f"""
import importlib.util, json, sys
import contextfold
from contextfold.errors import context_length_error
error = context_length_error("too big", required_tokens=12, budget=10, model="m")
print(json.dumps({{
    "installed": [m for m in {EXTRAS_ONLY!r} if importlib.util.find_spec(m)],
    "loaded": sorted({{m.partition(".")[0] for m in sys.modules}} & set({EXTRAS_ONLY!r})),
    "error_class": contextfold.ContextLengthError.__module__ + "."
        + contextfold.ContextLengthError.__qualname__,
    "error": [error.provider, error.model, error.required_tokens, error.budget,
              error.retryable, error.status_code],
}}))
"""
    result = _python(bare_venv, probe)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["installed"] == []  # the extras' packages are not even installed
    assert report["loaded"] == []
    assert report["error_class"] == "contextfold.errors.StandaloneContextLengthError"
    assert report["error"] == ["context-fold", "m", 12, 10, False, None]


@pytest.mark.slow
def test_modules_mount_in_a_host_without_the_kernel_package(bare_venv: Path) -> None:
    # The wheel carries the amplifier_module_* doors and the entry points; the context
    # module mounts on a host's own coordinator with no amplifier-core installed.
    probe = """
import asyncio, json
from importlib.metadata import entry_points
import amplifier_module_context_fold

class Coordinator:
    hooks = None
    def __init__(self):
        self.mounted = {}
    async def mount(self, point, module):
        self.mounted[point] = module

async def main():
    coordinator = Coordinator()
    cleanup = await amplifier_module_context_fold.mount(coordinator, {"max_tokens": 9000})
    context = coordinator.mounted["context"]
    await context.add_message({"role": "user", "content": "hello"})
    view = await context.get_messages_for_request()
    await cleanup()
    ids = sorted(ep.name for ep in entry_points(group="amplifier.modules"))
    print(json.dumps({"ids": ids, "view": len(view), "budget": context.last_report.budget}))

asyncio.run(main())
"""
    result = _python(bare_venv, probe)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "ids": [
            "context-fold",
            "hooks-context-inject",
            "loop-fold",
            "provider-scripted",
            "tool-context-recall",
            "tool-doc-lookup",
        ],
        "view": 1,
        "budget": 9000,
    }


@pytest.mark.slow
def test_readme_library_example_runs_without_the_extras(bare_venv: Path) -> None:
    [example] = [
        block
        for block in re.findall(r"```python\n(.*?)```", GETTING_STARTED, flags=re.S)
        if "from contextfold import ContextFold, strip_metadata" in block
    ]
    result = _python(bare_venv, example)
    assert result.returncode == 0, result.stderr
    assert re.search(r"history: 62 messages; sent: \d+ messages", result.stdout), result.stdout


@pytest.mark.slow
def test_console_script_names_the_missing_extra(bare_venv: Path) -> None:
    result = _run([str(bare_venv / "bin" / "contextfold"), "demo", "--steps", "2"])
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()  # one line, no traceback
    assert "[cli] extra" in line and "pip install '.[cli]'" in line and "is not installed" in line
    assert result.stdout == ""
    version = _run([str(bare_venv / "bin" / "contextfold"), "--version"])
    assert version.returncode == 0 and version.stdout.startswith("contextfold ")


def test_kernel_error_is_used_when_the_kernel_is_installed() -> None:
    # In this environment amplifier-core is present, so Amplifier loops catch our error.
    assert ContextLengthError is llm_errors.ContextLengthError
    error = context_length_error("too big", required_tokens=12, budget=10)
    assert isinstance(error, llm_errors.LLMError) and error.required_tokens == 12


def test_standalone_error_mirrors_the_kernel_class() -> None:
    kernel = inspect.signature(llm_errors.ContextLengthError.__init__)
    ours = inspect.signature(StandaloneContextLengthError.__init__)
    assert [(p.name, p.kind, p.default) for p in ours.parameters.values()] == [
        (p.name, p.kind, p.default) for p in kernel.parameters.values()
    ]
    arguments = {
        "provider": "p",
        "model": "m",
        "status_code": 413,
        "retryable": True,
        "retry_after": 2.5,
        "delay_multiplier": 3.0,
    }
    theirs = llm_errors.ContextLengthError("overflow", **arguments)
    mine = StandaloneContextLengthError("overflow", **arguments)
    for name in arguments:
        assert getattr(mine, name) == getattr(theirs, name), name
    assert str(mine) == str(theirs) == "overflow"
    assert repr(mine).removeprefix("Standalone") == repr(theirs)
    with pytest.raises(TypeError):
        StandaloneContextLengthError("overflow", "provider-as-positional")  # type: ignore[misc]


@pytest.mark.slow
def test_a_store_is_read_from_the_shell_with_the_library_alone(bare_venv: Path) -> None:
    """`contextfold sessions` needs no extra: no kernel, no console or plotting library."""
    store = bare_venv / "agent.db"
    writer = f"""
import asyncio
from contextfold import ContextFold

async def main():
    context = ContextFold(store="sqlite:///{store}", session_id="ticket-7")
    await context.add_message({{"role": "user", "content": "find the failing deploy"}})

asyncio.run(main())
"""
    assert _python(bare_venv, writer).returncode == 0
    script = str(bare_venv / "bin" / "contextfold")
    listed = _run([script, "sessions", "list", f"sqlite:///{store}"])
    assert listed.returncode == 0, listed.stderr
    assert "ticket-7" in listed.stdout
    exported = _run([script, "sessions", "export", f"sqlite:///{store}", "ticket-7"])
    assert exported.returncode == 0, exported.stderr
    assert json.loads(exported.stdout)["content"] == "find the failing deploy"
