"""Amplifier module ``hooks-context-inject``: the context-injecting hook.

Amplifier loads a module named by ``source:`` (a git URL) from the package
``amplifier_module_<id>`` at the root of the fetched tree. This package is that door: it
re-exports the ``mount`` that the ``amplifier.modules`` entry point names, from
``contextfold.amplifier.inject_hook``.
"""

from contextfold.amplifier.inject_hook import mount

__amplifier_module_type__ = "hook"

__all__ = ["mount"]
