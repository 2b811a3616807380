"""Amplifier module ``provider-scripted``: the offline scripted provider.

Amplifier loads a module named by ``source:`` (a git URL) from the package
``amplifier_module_<id>`` at the root of the fetched tree. This package is that door: it
re-exports the ``mount`` that the ``amplifier.modules`` entry point names, from
``contextfold.amplifier.scripted_provider``.
"""

from contextfold.amplifier.scripted_provider import mount

__amplifier_module_type__ = "provider"

__all__ = ["mount"]
