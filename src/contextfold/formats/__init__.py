"""The message shapes of plain SDK clients, fitted by a context in one call each.

- `contextfold.formats.openai_chat`: Chat Completions ``messages`` (the shape contextfold
  keeps natively);
- `contextfold.formats.openai_responses`: Responses API ``input`` items (messages, function
  calls and their outputs, reasoning items);
- `contextfold.formats.anthropic`: Messages API ``messages`` with the ``system`` prompt apart
  (``tool_use``/``tool_result`` blocks, thinking blocks with their signatures).

Each module has ``await view_for(context, ...)``, which keeps the context's history in step
with the caller's growing list (only new messages are admitted) and returns the fitted view in
the same shape, and ``await record_usage(context, response.usage)``. None of them imports an
SDK: they work on the plain dicts the SDKs take.
"""
