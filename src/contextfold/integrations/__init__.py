"""contextfold under other agent frameworks, one module each (each needs its extra):

- `contextfold.integrations.langchain` (``contextfold[langchain]``): `ContextFoldMiddleware`
  for LangChain v1 ``create_agent`` / LangGraph;
- `contextfold.integrations.openai_agents` (``contextfold[openai-agents]``): a
  ``call_model_input_filter`` and run hooks for the OpenAI Agents SDK;
- `contextfold.integrations.pydantic_ai` (``contextfold[pydantic-ai]``): a capability for
  pydantic-ai agents.

This package imports none of them: ``import contextfold`` never loads a framework.
"""
