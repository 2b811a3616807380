"""Make files and folders truly read-only for a test, as a mounted backup is.

A plain user gets read-only permissions (``chmod``). The superuser ignores permissions, so
there the files are made immutable (``chattr +i``: even root cannot write, create or remove
beside them, the way a read-only mount behaves). Either way the context checks that a write
really fails, and skips the test when this machine cannot make it so.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def read_only(folder: Path) -> Iterator[None]:
    """``folder`` and every file in it cannot be written, created in or removed from."""
    paths = [folder, *sorted(folder.iterdir())]
    as_root = os.geteuid() == 0
    if as_root and shutil.which("chattr") is None:
        pytest.skip("running as root without chattr: cannot make a folder read-only")
    modes = {path: path.stat().st_mode for path in paths}
    try:
        if as_root:
            done = subprocess.run(
                ["chattr", "+i", *map(str, paths)], capture_output=True, text=True, check=False
            )
            if done.returncode != 0:
                pytest.skip(f"chattr +i is not supported here: {done.stderr.strip()}")
        else:
            for path in paths:
                path.chmod(stat.S_IMODE(modes[path]) & ~0o222)
        try:
            (folder / "probe").touch()
        except OSError:
            pass
        else:
            pytest.skip("this file system lets the folder be written whatever its mode")
        yield
    finally:
        if as_root:
            subprocess.run(["chattr", "-i", *map(str, paths)], capture_output=True, check=False)
        else:
            for path, mode in modes.items():
                path.chmod(stat.S_IMODE(mode))


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file in ``folder`` by name, with its bytes: nothing created, nothing changed."""
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir()) if path.is_file()}
