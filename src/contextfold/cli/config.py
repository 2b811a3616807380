"""Module config for the CLI: a TOML/YAML file plus ``--set key=value`` overrides.

Both produce the plain dict an Amplifier mount plan would carry under ``config``. Whether the
keys and values are acceptable is decided by ``ContextConfig`` (one source of truth); this
module only turns text into values and says where a value came from when it cannot.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from contextfold.cli.errors import InputError
from contextfold.cli.files import MAX_CONFIG_BYTES, display_path, read_regular_file


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a TOML or YAML file of module config, flat or under a ``config`` table."""
    path = Path(path)
    source = display_path(path)
    raw = read_regular_file(path, MAX_CONFIG_BYTES, what="config file")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InputError(source, "the config file is not UTF-8 text") from None

    if path.suffix.lower() in {".yaml", ".yml"}:
        document = _parse_yaml(text, source)
    elif path.suffix.lower() == ".toml":
        document = _parse_toml(text, source)
    else:  # no telling extension: TOML first, then YAML (a superset of JSON)
        try:
            document = tomllib.loads(text)
        except (ValueError, RecursionError):  # TOMLDecodeError is a ValueError
            document = _parse_yaml(text, source)

    if document is None:
        return {}
    if not isinstance(document, dict):
        raise InputError(source, "expected a table of config keys (key = value)")
    if "config" in document:
        nested = document["config"]
        if not isinstance(nested, dict):
            raise InputError(source, "'config' must be a table of config keys")
        others = sorted(set(document) - {"config"})
        if others:
            raise InputError(
                source, f"keys outside the [config] table: {', '.join(others)}; move them inside"
            )
        document = nested
    config = dict(document)
    _require_text(config, source)
    return config


def _parse_toml(text: str, source: str) -> Any:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(source, f"not valid TOML: {exc}") from None
    except (ValueError, RecursionError) as exc:
        raise InputError(source, f"cannot read the TOML: {_unreadable(exc)}") from None


def _parse_yaml(text: str, source: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        place = f"line {mark.line + 1}" if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(source, f"not valid YAML: {problem}", place) from None
    except (ValueError, RecursionError) as exc:
        raise InputError(source, f"cannot read the YAML: {_unreadable(exc)}") from None


def _unreadable(error: ValueError | RecursionError) -> str:
    """Why a parser gave up on a value: nesting too deep, or a number too long to convert."""
    if isinstance(error, RecursionError):
        return "nested too deeply"
    if "integer string conversion" in str(error):
        return "a number too long to read (Python refuses integers of more than 4,300 digits)"
    lines = str(error).strip().splitlines()
    return lines[0][:200] if lines else type(error).__name__


def parse_overrides(pairs: Iterable[str]) -> dict[str, Any]:
    """Turn ``key=value`` strings into a dict; values are JSON or TOML scalars, else strings.

    ``0.8`` is a float, ``true`` a bool, ``null`` None, ``"estimate"`` or bare ``estimate``
    a string, so a shell user rarely needs to quote anything.
    """
    overrides: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise InputError("--set", f"expected key=value, got {pair!r}")
        overrides[key] = parse_scalar(text.strip())
    _require_text(overrides, "--set")
    return overrides


def _require_text(config: dict[str, Any], source: str) -> None:
    """Refuse keys and string values that are not valid Unicode text.

    A JSON escape such as ``"\\ud800"`` (a lone UTF-16 surrogate) parses to a Python string
    that cannot be encoded as UTF-8: it would fail much later, when the value is written out
    or handed to a tokenizer. Only top-level values are looked at: config values are scalars.
    """
    problem = "holds a lone surrogate (an unpaired \\ud800-\\udfff escape), which is not text"
    for key, value in config.items():
        if not _is_text(key):
            raise InputError(source, f"the key {_escaped(key)} {problem}")
        if isinstance(value, str) and not _is_text(value):
            raise InputError(source, f"{key}={_escaped(value)} {problem}")


def _is_text(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _escaped(text: str, limit: int = 80) -> str:
    shown = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return f"'{shown if len(shown) <= limit else shown[:limit] + '...'}'"


def parse_scalar(text: str) -> Any:
    """Parse one value the way a config file would, falling back to the bare string."""
    # ValueError covers a malformed value and a number too long to convert (Python refuses
    # integers of more than 4,300 digits); RecursionError, brackets nested thousands deep.
    # Either way the text stays a string, and the config check says what is wrong with it.
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        pass
    try:
        # TOML adds what JSON lacks for config values: 1_000, inf, single-quoted strings.
        return tomllib.loads(f"v = {text}")["v"]
    except (ValueError, RecursionError):
        return text
