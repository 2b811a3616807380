"""PostgreSQL connection strings in messages: where a store is, never its password.

A URL may carry a password in three places (``postgresql://user:secret@host/db``,
``...?password=secret``, or ``password=secret`` in a key/value string), and the driver's own
errors may quote a piece of the string (``invalid percent-encoded token: "se%zzcret"``).
:func:`display` shows a connection string with the password replaced by ``***``;
:func:`scrub` removes every password the string holds, in any of its spellings, from any
text, error messages included.
"""

from __future__ import annotations

import re
from urllib.parse import quote, unquote

__all__ = ["display", "parse", "scrub"]

_HIDDEN = "***"
_SHORTEST_SEARCHED = 4
# ://user:secret@ : the password runs to the last "@" before the path.
_URL_PASSWORD = re.compile(r"(://[^:/?#@]*:)([^/?#]*)@")
# password=secret in a URL query or a key/value string, quoted or not.
_PARAMETER_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^&\s]*)", re.IGNORECASE)


def parse(conninfo: str) -> dict[str, str]:
    """The connection parameters, or ValueError with a message holding no password (needs
    psycopg; the rest of this module does not)."""
    import psycopg.conninfo

    try:
        return {
            key: str(value) for key, value in psycopg.conninfo.conninfo_to_dict(conninfo).items()
        }
    except psycopg.Error as error:
        raise ValueError(scrub(str(error), conninfo)) from None


def display(conninfo: str) -> str:
    """Where ``conninfo`` points, for a message: scheme, user, host, port and database; a
    password, when there is one, shown as ``***``."""
    try:
        params = parse(conninfo)
    except ValueError:
        return scrub(conninfo, conninfo)
    user = params.get("user", "")
    if user and "password" in params:
        user += ":" + _HIDDEN
    host = params.get("host", "")
    socket = host.startswith("/")
    netloc = (f"{user}@" if user else "") + ("" if socket else host)
    if params.get("port"):
        netloc += f":{params['port']}"
    shown = f"postgresql://{netloc}/{params.get('dbname', '')}"
    return shown + (f"?host={host}" if socket else "")


def scrub(text: str, conninfo: str) -> str:
    """``text`` with every password ``conninfo`` holds replaced by ``***``."""
    secrets: set[str] = set()
    for pattern, group in ((_URL_PASSWORD, 2), (_PARAMETER_PASSWORD, 2)):
        for match in pattern.finditer(conninfo):
            secrets.add(match.group(group))
    secrets.add(_parsed_password(conninfo))
    # A password of a few characters is not searched for as text (it would blank out every
    # "a" of a message); the patterns below still hide it wherever the string's own syntax
    # puts it.
    spellings = {
        form
        for secret in secrets
        for form in (secret, secret.strip("'"), unquote(secret), quote(secret, safe=""))
        if len(form) >= _SHORTEST_SEARCHED
    }
    # Longest first, so a password is never left half shown behind a shorter spelling.
    for form in sorted(spellings, key=len, reverse=True):
        text = text.replace(form, _HIDDEN)
    text = _URL_PASSWORD.sub(lambda m: m.group(1) + _HIDDEN + "@", text)
    return _PARAMETER_PASSWORD.sub(lambda m: m.group(1) + _HIDDEN, text)


def _parsed_password(conninfo: str) -> str:
    """The password as the driver reads it; empty without the driver or when the string
    does not parse (the patterns then found what there is)."""
    try:
        import psycopg.conninfo

        return str(psycopg.conninfo.conninfo_to_dict(conninfo).get("password") or "")
    except Exception:  # ImportError, or the driver refusing the string
        return ""
