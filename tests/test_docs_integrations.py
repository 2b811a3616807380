"""Every python block of the integration pages runs as written, offline."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

PAGES = sorted((Path(__file__).resolve().parents[1] / "docs" / "integrations").glob("*.md"))
BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
# A page says what a print shows in a comment after it: `print(len(x))  # 82: why`.
PRINTED = re.compile(r"^\s*print\(.*\)\s+#\s*([^:\n]+)", re.MULTILINE)


def test_there_is_a_page_per_framework_and_one_for_plain_clients() -> None:
    names = {page.stem for page in PAGES}
    assert {"langchain", "openai-agents", "pydantic-ai", "plain-clients"} <= names


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=[page.stem for page in PAGES])
def test_the_page_runs(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    blocks = BLOCK.findall(page.read_text())
    assert blocks, f"{page.name} has no python block"
    monkeypatch.chdir(tmp_path)  # a page may create its store files
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem.replace('-', '_')}"}
    for number, block in enumerate(blocks, 1):
        exec(compile(block, f"{page.name} block {number}", "exec"), namespace)
    printed = capsys.readouterr().out.splitlines()
    said = [line.strip() for block in blocks for line in PRINTED.findall(block)]
    assert said, f"{page.name} shows no outcome"
    assert printed == said
