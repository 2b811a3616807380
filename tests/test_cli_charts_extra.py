"""Without the [charts] extra (matplotlib), demo, replay and eval still run: no chart, and a
line saying why and what to install."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from contextfold.cli import EXIT_OK, main

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "agent-session.json"


def test_replay_without_matplotlib_runs_and_says_there_is_no_chart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    real = importlib.util.find_spec

    def without_matplotlib(name: str, *args: object):
        return None if name.partition(".")[0] == "matplotlib" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", without_matplotlib)
    status = main(["replay", str(EXAMPLE), "--window", "16000", "--out", str(tmp_path), "-q"])
    captured = capsys.readouterr()
    assert status == EXIT_OK, captured.err
    assert "no chart: matplotlib is not installed" in captured.err
    assert "pip install '.[charts]'" in captured.err
    assert (tmp_path / "replay.json").exists()
    assert not (tmp_path / "requests.png").exists()


def test_with_matplotlib_the_chart_is_drawn_and_nothing_is_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["replay", str(EXAMPLE), "--window", "16000", "--out", str(tmp_path), "-q"])
    captured = capsys.readouterr()
    assert status == EXIT_OK, captured.err
    assert "no chart" not in captured.err
    assert (tmp_path / "requests.png").exists()
