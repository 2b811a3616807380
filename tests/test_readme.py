"""Every Python example in the README runs as written; the documented tables match the code."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import pytest

from contextfold import ContextConfig
from contextfold.events import ALL_EVENTS

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
EXAMPLES = re.findall(r"```python\n(.*?)```", README, flags=re.S)


def test_readme_has_examples() -> None:
    assert len(EXAMPLES) >= 2


@pytest.mark.parametrize("source", EXAMPLES, ids=[f"example-{i}" for i in range(len(EXAMPLES))])
def test_example_runs(source: str, capsys: pytest.CaptureFixture[str]) -> None:
    exec(compile(source, "README.md", "exec"), {"__name__": "__readme__"})
    assert capsys.readouterr().out.strip()  # each example prints what it shows


def test_every_config_key_is_documented() -> None:
    for field in fields(ContextConfig):
        assert f"| `{field.name}` |" in README, field.name


def test_every_event_is_documented() -> None:
    for event in ALL_EVENTS:
        assert f"| `{event}` |" in README, event


def test_the_two_commands_are_shown() -> None:
    assert "uv run contextfold demo" in README and "uv run pytest" in README
