"""The framework adapters add nothing to ``pip install contextfold`` without their extra."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FRAMEWORKS = ("langchain", "langchain_core", "langgraph", "agents", "pydantic_ai", "pydantic")
EXTRAS = {
    "langchain": ("langchain", "langgraph"),
    "openai-agents": ("openai-agents",),
    "pydantic-ai": ("pydantic-ai-slim",),
}
ADAPTERS = {
    "langchain": "langchain",
    "openai_agents": "agents",
    "pydantic_ai": "pydantic_ai",
}

# Runs in a fresh interpreter; the frameworks named in sys.argv cannot be imported there.
BLOCKED = """
import importlib.abc, json, sys
blocked = set(sys.argv[1].split(",")) if sys.argv[1] else set()
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Block())
outcome = {}
for module in sys.argv[2].split(","):
    try:
        __import__(module)
        outcome[module] = "ok"
    except ImportError as error:
        outcome[module] = str(error)
outcome["loaded"] = sorted({name.split(".")[0] for name in sys.modules})
print(json.dumps(outcome))
"""


def run_python(blocked: tuple[str, ...], modules: tuple[str, ...]) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", BLOCKED, ",".join(blocked), ",".join(modules)],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return json.loads(done.stdout)


def test_the_base_dependencies_name_no_framework_and_each_extra_names_its_own() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = " ".join(project["dependencies"]).lower()
    for packages in EXTRAS.values():
        assert not any(package in base for package in packages)
    for extra, packages in EXTRAS.items():
        named = " ".join(project["optional-dependencies"][extra]).lower()
        assert all(package in named for package in packages), extra


def test_the_library_and_its_formats_import_no_framework() -> None:
    modules = (
        "contextfold",
        "contextfold.mirror",
        "contextfold.formats.openai_chat",
        "contextfold.formats.openai_responses",
        "contextfold.formats.anthropic",
        "contextfold.integrations",
    )
    outcome = run_python(FRAMEWORKS, modules)
    assert all(outcome[module] == "ok" for module in modules), outcome
    assert not set(outcome["loaded"]) & set(FRAMEWORKS)


def test_an_adapter_without_its_extra_says_which_extra_to_install() -> None:
    modules = tuple(f"contextfold.integrations.{name}" for name in ADAPTERS)
    outcome = run_python(tuple(ADAPTERS.values()), modules)
    for name in ADAPTERS:
        message = outcome[f"contextfold.integrations.{name}"]
        extra = name.replace("_", "-")
        assert f"pip install 'contextfold[{extra}]'" in message, message
        assert "is missing" in message
