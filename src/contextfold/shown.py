"""Values quoted in error messages: at most a line, whatever they hold.

A value echoed in an error often comes from a config file, where a YAML alias bomb expands
to billions of elements under ``repr()`` and a 5,000-digit integer cannot be ``repr()``'d
at all; errors show it through these bounds instead.
"""

from __future__ import annotations

import reprlib
from collections.abc import Mapping
from typing import Any


class _BoundedRepr(reprlib.Repr):
    def __init__(self) -> None:
        super().__init__()
        self.maxlevel = 2
        self.maxlist = self.maxtuple = self.maxset = self.maxfrozenset = 4
        self.maxdeque = self.maxarray = self.maxdict = 4
        self.maxstring = 80
        self.maxlong = 40
        self.maxother = 60

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 128:  # repr() itself refuses past 4,300 digits
            return f"<int of {x.bit_length()} bits>"
        return super().repr_int(x, level)

    def repr_instance(self, x: Any, level: int) -> str:
        # Subclasses (a YAML loader's ordered maps, str subclasses) would otherwise get the
        # builtin repr in full before it is cut.
        if isinstance(x, str):
            return self.repr_str(str(x), level)
        if isinstance(x, int) and not isinstance(x, bool):
            return self.repr_int(int(x), level)
        if isinstance(x, Mapping):
            return self.repr_dict(dict(list(_first(x.items(), self.maxdict + 1))), level)
        if isinstance(x, list | tuple | set | frozenset):
            return self.repr_list(list(_first(x, self.maxlist + 1)), level)
        if isinstance(x, float | complex | bool | type(None)):
            return repr(x)
        return f"<{type(x).__name__}>"


def _first(items: Any, n: int) -> list[Any]:
    out: list[Any] = []
    for item in items:
        if len(out) == n:
            break
        out.append(item)
    return out


_bounded = _BoundedRepr()
_SHOWN_MAX_CHARS = 120


def shown(value: Any) -> str:
    """A config value as an error message may quote it: at most a line, whatever it holds."""
    try:
        text = _bounded.repr(value)
    except Exception:  # a hostile __repr__ or __len__ must not replace the real error
        return f"<{type(value).__name__}>"
    if len(text) > _SHOWN_MAX_CHARS:
        text = text[: _SHOWN_MAX_CHARS - 3] + "..."
    return text
