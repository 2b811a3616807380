"""Reading and writing files the CLI is pointed at, defensively.

A path on the command line can name anything: a FIFO that blocks forever, a symlink to
``/dev/zero`` that never ends, a file that grows while it is read, a folder where an attacker
planted a symlink named like an output file. This module is the one place the CLI touches the
file system, so each of those is refused with one :class:`InputError` line instead of a hang,
a memory blow-up, an overwritten file elsewhere or a traceback.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from contextfold.cli.errors import InputError

# A recorded conversation of a million short messages is about 100 MB of JSON; parsed, a file
# costs several times its size in memory, so the default cap leaves room and stops there.
DEFAULT_MAX_INPUT_BYTES = 256 * 1024 * 1024
# Module config is a handful of keys: anything near this size is not a config file.
MAX_CONFIG_BYTES = 1024 * 1024

_READ_CHUNK = 1024 * 1024


def display_path(path: str | os.PathLike[str]) -> str:
    """``path`` as printable text: bytes that are not UTF-8 (a file named with byte 0xFF,
    which Python carries as a lone surrogate) are shown escaped, ``\\xff``, so the name can
    be printed and written into a JSON file."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def read_regular_file(path: str | os.PathLike[str], max_bytes: int, *, what: str) -> bytes:
    """The bytes of a regular file of at most ``max_bytes``; anything else is an InputError.

    ``what`` names the file in messages ("file", "config file"). The type and size are
    checked with ``stat`` before opening (opening a FIFO would block), again on the open
    descriptor (the path may have been swapped in between), and the read itself stops one
    byte past the cap, so a file that grows while it is read cannot exceed it either.
    """
    source = display_path(path)
    try:
        _check_regular(os.stat(path), source, max_bytes, what)
        # O_NONBLOCK: if a FIFO is swapped in after the stat, open returns instead of waiting.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise InputError(source, "no such file") from None
    except OSError as exc:
        raise InputError(source, f"cannot read the {what} ({_reason(exc)})") from None
    try:
        _check_regular(os.fstat(fd), source, max_bytes, what)
        chunks: list[bytes] = []
        remaining = max_bytes + 1
        while remaining > 0:
            chunk = os.read(fd, min(_READ_CHUNK, remaining))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
    except OSError as exc:
        raise InputError(source, f"cannot read the {what} ({_reason(exc)})") from None
    finally:
        os.close(fd)
    if remaining <= 0:
        raise InputError(
            source, f"the {what} grew past {_size(max_bytes)} while it was read (--max-bytes)"
        )
    return b"".join(chunks)


def _check_regular(info: os.stat_result, source: str, max_bytes: int, what: str) -> None:
    kind = _file_kind(info.st_mode)
    if kind is not None:
        raise InputError(source, f"is {kind}, not a regular file; give the path of a {what}")
    if info.st_size > max_bytes:
        raise InputError(
            source,
            f"the {what} is {_size(info.st_size)}, over the {_size(max_bytes)} limit "
            "(raise it with --max-bytes)",
        )


def _file_kind(mode: int) -> str | None:
    """What a non-regular file is, in words; None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


# -- output ------------------------------------------------------------------------------------


def check_output_option(out: str | None) -> None:
    """Refuse an ``--out`` that can never be a safe output folder, before any work is done.

    An empty value would silently mean the current folder; a symlink could point the
    output anywhere (a planted link is how files outside the folder get overwritten).
    """
    if out is None:
        return
    if not out.strip():
        raise InputError("--out", "is empty; give a folder name (or leave --out out)")
    shown = display_path(out)
    try:
        # Without trailing slashes: lstat("link/") would look through the link.
        info = os.lstat(out.rstrip("/") or "/")
    except FileNotFoundError:
        return  # created later
    except OSError as exc:
        raise InputError("--out", f"cannot use {shown} ({_reason(exc)})") from None
    if stat.S_ISLNK(info.st_mode):
        raise InputError("--out", f"{shown} is a symlink; give the real folder")
    if not stat.S_ISDIR(info.st_mode):
        raise InputError("--out", f"{shown} exists and is not a folder")


def make_output_folder(folder: Path) -> Path:
    """Create ``folder`` (and its parents) if needed; the folder itself must not be a link."""
    check_output_option(str(folder))
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(
            "--out", f"cannot create the folder {display_path(folder)} ({_reason(exc)})"
        ) from None
    return folder


def write_output_file(path: Path, data: bytes) -> Path:
    """Write ``data`` to ``path``, never through a symlink: a link planted under the output
    name is refused rather than followed to overwrite its target."""
    return write_output_parts(path, (data,))


def write_output_parts(path: Path, parts: Iterable[bytes]) -> Path:
    """:func:`write_output_file` for a file given in parts, written one after the other
    (a large file need not be held whole in memory beside what it was made from)."""
    # O_NONBLOCK: a FIFO planted under the output name fails to open instead of blocking.
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    flags |= getattr(os, "O_NOFOLLOW", 0)
    shown = display_path(path)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP or path.is_symlink():
            raise InputError(
                "--out", f"{shown} is a symlink; refusing to write through it"
            ) from None
        raise InputError("--out", f"cannot write {shown} ({_reason(exc)})") from None
    try:
        # A FIFO or device planted under the output name: O_CREAT opened it, but it is not
        # ours to write into.
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InputError("--out", f"{shown} exists and is not a regular file")
        for data in parts:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
    except OSError as exc:
        raise InputError("--out", f"cannot write {shown} ({_reason(exc)})") from None
    finally:
        os.close(fd)
    return path


def _reason(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def _size(count: int) -> str:
    """Bytes in the unit a person would use for a file-size limit."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale:
            value = count / scale
            return f"{value:,.0f} {unit}" if value == int(value) else f"{value:,.1f} {unit}"
    return f"{count:,} bytes"
