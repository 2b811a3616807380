"""Amplifier module ``tool-doc-lookup``: the offline document tool.

Amplifier loads a module named by ``source:`` (a git URL) from the package
``amplifier_module_<id>`` at the root of the fetched tree. This package is that door: it
re-exports the ``mount`` that the ``amplifier.modules`` entry point names, from
``contextfold.amplifier.doc_tool``.
"""

from contextfold.amplifier.doc_tool import mount

__amplifier_module_type__ = "tool"

__all__ = ["mount"]
