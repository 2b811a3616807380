"""The README and every page of the docs site say what the code does: every Python example
runs as written (client calls go to a local server that answers like the providers), every
`contextfold` command shown parses, every config key and event is documented, every link
between pages resolves, and the README stays a welcome, not a manual."""

from __future__ import annotations

import re
import shlex
from dataclasses import fields
from pathlib import Path

import pytest

from contextfold import ContextConfig
from contextfold.cli import build_parser
from contextfold.events import ALL_EVENTS
from docs_support import code_blocks, local_model_server
from test_layers import LAYERS

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.rglob("*.md"))]
CONFIGURATION = (DOCS / "configuration.md").read_text(encoding="utf-8")

# The framework pages' examples run in tests/test_docs_integrations.py, which also checks
# what each prints against the page.
EXAMPLES = [
    pytest.param(page, source, id=f"{page.relative_to(ROOT)}-{number}")
    for page in PAGES
    if page.parent.name != "integrations"
    for number, source in enumerate(code_blocks(page, "python"))
]


@pytest.fixture
def model_server(monkeypatch: pytest.MonkeyPatch):
    """The providers' endpoints on 127.0.0.1, named where the SDKs look for them."""
    with local_model_server() as (url, requests):
        monkeypatch.setenv("OPENAI_BASE_URL", f"{url}/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "local-test-key")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "local-test-key")
        yield requests


@pytest.mark.parametrize(("page", "source"), EXAMPLES)
def test_every_python_example_runs_as_written(
    page: Path, source: str, model_server: list, capsys: pytest.CaptureFixture[str]
) -> None:
    exec(compile(source, str(page), "exec"), {"__name__": "__main__"})
    assert capsys.readouterr().out.strip(), "each example prints what it shows"


def test_the_quickstarts_really_call_the_clients(model_server: list) -> None:
    for source in code_blocks(README, "python")[:2]:
        exec(compile(source, "README.md", "exec"), {"__name__": "__main__"})
    assert [path for path, _ in model_server] == ["/v1/chat/completions", "/v1/messages"]


def _commands() -> list[object]:
    found = []
    for page in PAGES:
        for block in code_blocks(page, "bash") + code_blocks(page, "sh"):
            for line in block.splitlines():
                line = line.split("  #")[0].strip()
                if line.startswith("uv run contextfold "):
                    found.append(pytest.param(line, id=f"{page.name}:{line[:50]}"))
    return found


@pytest.mark.parametrize("line", _commands())
def test_every_contextfold_command_shown_parses(line: str) -> None:
    argv = shlex.split(line)[3:]  # after "uv run contextfold"
    build_parser().parse_args(argv)  # an unknown option or command exits 2 here


def test_every_config_key_is_documented() -> None:
    for field in fields(ContextConfig):
        assert f"| `{field.name}` |" in CONFIGURATION, field.name


def test_every_event_is_documented() -> None:
    for event in ALL_EVENTS:
        assert f"| `{event}` |" in CONFIGURATION, event


def test_the_readme_welcomes() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    assert "uv run contextfold demo" in text and "uv run pytest" in text
    assert "pip install contextfold" not in text  # not on an index: nothing that cannot work


_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchors(page: Path) -> set[str]:
    """The heading anchors of a page, as the docs site makes them (Python-Markdown's toc)."""
    anchors = set()
    fence = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
        elif not fence and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            title = re.sub(r"[^\w\s-]", "", title)
            anchors.add(re.sub(r"[\s-]+", "-", title).strip("-"))
    return anchors


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_local_link_and_anchor_resolves(page: Path) -> None:
    for target in _LINK.findall(page.read_text(encoding="utf-8")):
        if target.startswith(("http://", "https://")):
            continue
        file, _, anchor = target.partition("#")
        path = (page.parent / file).resolve() if file else page
        assert path.exists(), f"{page.name} links to {target}, which does not exist"
        if anchor and path.suffix == ".md":
            assert anchor in _anchors(path), f"{page.name} links to {target}: no such heading"


def test_the_layers_picture_names_every_layer_of_the_import_test() -> None:
    picture = (DOCS / "layers.svg").read_text(encoding="utf-8")
    for name in LAYERS:
        if name != "__init__":
            assert name in picture, f"docs/layers.svg does not show {name}"
