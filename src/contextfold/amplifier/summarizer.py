"""The summarizer of a mounted context: a provider of the same session, found when needed.

In Amplifier the ``summarize`` rung's summaries come from a mounted provider, named in the
context's config::

    context:
      module: context-fold
      config:
        strategies: [strip_thinking, truncate_tool_results, summarize, drop_oldest]
        summarizer: {provider: anthropic, model: claude-haiku-4-5, prompt_file: prompts/sum.md}

Every key is optional: without ``provider`` the session's first mounted provider answers,
without ``model`` its default model, without ``prompt_file`` contextfold's summary prompt.
Providers are mounted after the context, so the provider is looked up at each call, through
the coordinator, never at mount.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from contextfold.errors import ConfigError
from contextfold.summaries import DEFAULT_SUMMARY_PROMPT, SummaryPrompt, amplifier_summarizer
from contextfold.summaries.summarizer import AmplifierSummarizer

SUMMARIZER_KEYS = ("provider", "model", "prompt_file")


class MountedProvider:
    """Stands for the provider named ``name`` (or the first mounted one) of a session."""

    def __init__(self, coordinator: Any, name: str | None) -> None:
        self._coordinator = coordinator
        self._name = name

    @property
    def name(self) -> str:
        return self._name or "first-mounted"

    def resolve(self) -> Any:
        providers = self._coordinator.get("providers") or {}
        if self._name is None:
            if not providers:
                raise RuntimeError("context-fold summarizer: no provider is mounted")
            return next(iter(providers.values()))
        if self._name not in providers:
            raise RuntimeError(
                f"context-fold summarizer: provider {self._name!r} is not mounted; mounted: "
                f"{sorted(providers)}"
            )
        return providers[self._name]

    async def complete(self, request: Any, **kwargs: Any) -> Any:
        return await self.resolve().complete(request, **kwargs)


def mounted_summarizer(coordinator: Any, spec: Any) -> AmplifierSummarizer:
    """The summarizer ``spec`` (the ``summarizer`` config mapping, or None) describes."""
    spec = {} if spec is None else spec
    if not isinstance(spec, Mapping):
        raise ConfigError(
            f"summarizer must be a mapping such as {{'provider': 'anthropic', 'model': ...}}, "
            f"got {type(spec).__name__}."
        )
    unknown = sorted(str(key) for key in spec if key not in SUMMARIZER_KEYS)
    if unknown:
        raise ConfigError(
            f"summarizer has unknown keys {unknown}; known: {', '.join(SUMMARIZER_KEYS)}."
        )
    for key in SUMMARIZER_KEYS:
        value = spec.get(key)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ConfigError(f"summarizer '{key}' must be a non-empty string, got {value!r}.")
    prompt: SummaryPrompt = DEFAULT_SUMMARY_PROMPT
    if spec.get("prompt_file"):
        path = Path(spec["prompt_file"])
        try:
            prompt = SummaryPrompt.custom(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as error:
            raise ConfigError(
                f"summarizer prompt_file {str(path)!r} cannot be used: {error}."
            ) from None
    provider = MountedProvider(coordinator, spec.get("provider"))

    def tool_specs() -> list[Any]:
        # The schemas loop-fold sends with every request, in its order: a cache-aligned
        # summary request sends them again (see `contextfold.summaries.aligned`).
        tools = list((coordinator.get("tools") or {}).values())
        if not tools:
            return []
        # Imported here: the context module mounts in a host without amplifier-core, and
        # the specs are the kernel's type (a host with tools to repeat has the kernel).
        from contextfold.amplifier.orchestrator import _tool_spec as tool_spec

        return [tool_spec(tool) for tool in tools]

    return amplifier_summarizer(provider, spec.get("model"), prompt, tools=tool_specs)
