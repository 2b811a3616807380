"""Amplifier module ``context-fold``: contextfold's context manager.

Amplifier loads a module named by ``source:`` (a git URL) from the package
``amplifier_module_<id>`` at the root of the fetched tree. This package is that door: it
re-exports the ``mount`` that the ``amplifier.modules`` entry point names, from
``contextfold.amplifier``.
"""

from contextfold.amplifier import mount

__amplifier_module_type__ = "context"

__all__ = ["mount"]
