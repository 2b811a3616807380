"""Amplifier module ``tool-context-recall``: the model gets compacted messages back by id.

Amplifier loads a module named by ``source:`` (a git URL) from the package
``amplifier_module_<id>`` at the root of the fetched tree. This package is that door: it
re-exports the ``mount`` that the ``amplifier.modules`` entry point names, from
``contextfold.amplifier.recall_tool``.
"""

from contextfold.amplifier.recall_tool import mount

__amplifier_module_type__ = "tool"

__all__ = ["mount"]
