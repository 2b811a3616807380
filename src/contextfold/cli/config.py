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

from contextfold.cli.readers import InputError


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a TOML or YAML file of module config, flat or under a ``config`` table."""
    path = Path(path)
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(source, "no such config file") from None
    except OSError as exc:
        raise InputError(source, f"cannot read the config file ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise InputError(source, "the config file is not UTF-8 text") from None

    if path.suffix.lower() in {".yaml", ".yml"}:
        document = _parse_yaml(text, source)
    elif path.suffix.lower() == ".toml":
        document = _parse_toml(text, source)
    else:  # no telling extension: TOML first, then YAML (a superset of JSON)
        try:
            document = tomllib.loads(text)
        except tomllib.TOMLDecodeError:
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
    return dict(document)


def _parse_toml(text: str, source: str) -> Any:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(source, f"not valid TOML: {exc}") from None


def _parse_yaml(text: str, source: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        place = f"line {mark.line + 1}" if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(source, f"not valid YAML: {problem}", place) from None


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
    return overrides


def parse_scalar(text: str) -> Any:
    """Parse one value the way a config file would, falling back to the bare string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    try:
        # TOML adds what JSON lacks for config values: 1_000, inf, single-quoted strings.
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text
