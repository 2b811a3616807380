"""The typed usage of the public API (``tests/typing_public_api.py``) runs as written, and
the strict type check CI gives it (``.ci/run``) fails when an exported signature loses its
types: a return type widened to Any, or a parameter that takes anything."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import typing_public_api

ROOT = Path(__file__).resolve().parents[1]
USAGE = ROOT / "tests" / "typing_public_api.py"


async def test_the_typed_usage_runs_as_written() -> None:
    await typing_public_api.main()


def test_the_one_shot_usage_runs_from_plain_code() -> None:
    view = typing_public_api.one_list()
    assert 1 < len(view) < 101


def _strict_check(tmp_path: Path, package_root: Path | None = None) -> tuple[int, str]:
    """``mypy --strict`` over the usage file, as .ci/run runs it; with ``package_root``,
    against the package found there instead of the installed one."""
    env = dict(os.environ)
    if package_root is not None:
        env["MYPYPATH"] = str(package_root)  # searched before the installed packages
    command = [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent"]
    done = subprocess.run(
        [*command, "--cache-dir", str(tmp_path / "mypy-cache"), str(USAGE)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


def _line_of(text: str) -> int:
    """The usage file's line holding ``text`` (1-based)."""
    lines = USAGE.read_text(encoding="utf-8").splitlines()
    return next(n for n, line in enumerate(lines, 1) if text in line)


def _replace_once(path: Path, old: str, new: str) -> None:
    source = path.read_text(encoding="utf-8")
    assert source.count(old) == 1, f"{path.name} no longer holds {old!r}: update this test"
    path.write_text(source.replace(old, new), encoding="utf-8")


@pytest.mark.slow
def test_the_strict_check_passes_and_fails_when_an_export_loses_its_types(
    tmp_path: Path,
) -> None:
    code, output = _strict_check(tmp_path / "as-is")
    assert code == 0, output

    # The same package with two exported signatures loosened, as an edit might.
    copy = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "contextfold", copy / "contextfold")
    _replace_once(
        copy / "contextfold" / "oneshot.py",
        'token_budget: int, **settings: Any\n) -> list[dict[str, Any]]:\n    """One-shot',
        'token_budget: int, **settings: Any\n) -> Any:\n    """One-shot',
    )
    _replace_once(
        copy / "contextfold" / "manager.py",
        "self, recall_id: str, *,",
        "self, recall_id: Any, *,",
    )
    code, output = _strict_check(tmp_path / "loosened", package_root=copy)
    assert code == 1, output
    errors = re.findall(r"typing_public_api\.py:(\d+): error: .*\[([a-z-]+)\]", output)
    fitted = _line_of("view = fit(messages, 3_000)")
    assert sorted((int(line), code) for line, code in errors) == [
        (fitted + 1, "assert-type"),  # fit's view is no longer a list of messages
        (fitted + 3, "no-any-return"),  # nor what the caller returns as one
        (_line_of("await context.recall(2)"), "unused-ignore"),  # recall takes a number
    ], output
