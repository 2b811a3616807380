"""Real multi-turn tool-calling conversations built from the Berkeley Function Calling Leaderboard.

``bfcl-eval`` ships the multi-turn test questions, the ground-truth call sequences and the Python
tool simulators (a file system, a trading bot, a travel agency, ...). Executing each ground-truth
call against a simulator loaded with the test's initial state yields the *real* tool output an
agent would have seen. This module turns that into OpenAI/Amplifier chat histories:

    [system]  short agent prompt naming the tools (optional)
    per turn: user message(s)                         metadata={"source": "user"}
              assistant with tool_calls  ->  one tool message per call (repeated)
              assistant text closing the turn ("Done: ...")

``chain_conversations`` joins consecutive conversations into one long session (one system
prompt, call ids kept unique), the shape of a long agent run.

Calls are parsed with ``ast`` (never ``eval``). Output is deterministic: the simulators seed their
own random generators from the scenario. Conversations whose simulator module cannot be imported
are skipped and counted, not fatal. ``bfcl-eval`` is not a dependency of contextfold: install it
with ``pip install --no-deps bfcl-eval mpmath`` (a source checkout's ``uv sync`` has it);
`bfcl_available` says whether it is there. ``bench/bfcl_corpus.py`` is the command line over
this module.
"""

from __future__ import annotations

import ast
import copy
import importlib
import importlib.util
import inspect
import json
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from .runner import EvalConversation

__all__ = [
    "Conversation",
    "Corpus",
    "bfcl_available",
    "bfcl_sessions",
    "build_conversations",
    "build_corpus",
    "categories",
    "chain_conversations",
]

_SIMULATOR_PACKAGE = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code"

# Simulator class -> (module under func_source_code, tool-schema file under multi_turn_func_doc).
# Mirrors bfcl_eval.constants.executable_backend_config, restricted to the multi-turn suite
# (the memory/web-search backends need numpy, faiss, serpapi... and no multi-turn test uses them).
_CLASSES: dict[str, tuple[str, str]] = {
    "GorillaFileSystem": ("gorilla_file_system", "gorilla_file_system.json"),
    "MathAPI": ("math_api", "math_api.json"),
    "MessageAPI": ("message_api", "message_api.json"),
    "TwitterAPI": ("posting_api", "posting_api.json"),
    "TicketAPI": ("ticket_api", "ticket_api.json"),
    "TradingBot": ("trading_bot", "trading_bot.json"),
    "TravelAPI": ("travel_booking", "travel_booking.json"),
    "VehicleControlAPI": ("vehicle_control", "vehicle_control.json"),
}
# Stateless simulators take no scenario (BFCL's STATELESS_CLASSES).
_STATELESS = frozenset({"MathAPI"})

# What BFCL's own harness says when a held-out function becomes available mid-conversation
# (bfcl_eval.constants.default_prompts.DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC).
_ADDITIONAL_FUNCTION_PROMPT = (
    "I have updated some more functions you can choose from. What about now?"
)
_NO_CALL_REPLY = (
    "I can't complete that with the information and tools I have; "
    "could you give me the missing details?"
)
_MAX_PARALLEL = 3

# BFCL schemas use Python type names; JSON Schema (OpenAI function shape) wants these.
_TYPE_MAP = {"dict": "object", "float": "number", "tuple": "array", "any": "string"}


@dataclass(frozen=True)
class Conversation:
    """One replayable conversation: chat messages plus the tool schemas offered to the model."""

    id: str
    category: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Corpus:
    """The conversations of a category and the ones that could not be built (id -> reason)."""

    category: str
    conversations: list[Conversation] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)


# --------------------------------------------------------------------------- data files


def bfcl_available() -> bool:
    """Whether the ``bfcl-eval`` package (data and simulators) is installed."""
    return importlib.util.find_spec("bfcl_eval") is not None


def _data_dir() -> Path:
    try:
        root = resources.files("bfcl_eval") / "data"
    except ModuleNotFoundError as exc:
        raise RuntimeError(
            "bfcl-eval is not installed: run `pip install --no-deps bfcl-eval mpmath` (in a "
            "source checkout, `uv sync` installs it with the dev dependencies)"
        ) from exc
    return Path(str(root))


def categories() -> list[str]:
    """Multi-turn categories that have both questions and ground truth in the installed data."""
    data = _data_dir()
    prefix = "BFCL_v4_multi_turn_"
    found = []
    for path in sorted(data.glob(f"{prefix}*.json")):
        name = path.stem.removeprefix(prefix)
        if (data / "possible_answer" / path.name).is_file():
            found.append(name)
    return found


def _read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)


@cache
def _tool_docs(class_name: str) -> tuple[dict[str, Any], ...]:
    doc_file = _CLASSES[class_name][1]
    return tuple(_read_jsonl(_data_dir() / "multi_turn_func_doc" / doc_file))


def _convert_schema(node: Any) -> Any:
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key == "type" and isinstance(value, str):
                out[key] = _TYPE_MAP.get(value, value)
            else:
                out[key] = _convert_schema(value)
        return out
    if isinstance(node, list):
        return [_convert_schema(item) for item in node]
    return node


def _openai_tool(doc: dict[str, Any]) -> dict[str, Any]:
    # The BFCL "response" block documents the output; it is not part of a function declaration.
    return {
        "type": "function",
        "function": {
            "name": doc["name"],
            "description": doc.get("description", ""),
            "parameters": _convert_schema(doc.get("parameters", {"type": "dict"})),
        },
    }


# --------------------------------------------------------------------------- simulators


@cache
def _simulator_class(class_name: str) -> type:
    """Import a simulator class; ImportError (e.g. a missing optional dependency) propagates."""
    if class_name not in _CLASSES:
        raise ImportError(f"no multi-turn simulator is known for class {class_name!r}")
    module = importlib.import_module(f"{_SIMULATOR_PACKAGE}.{_CLASSES[class_name][0]}")
    return getattr(module, class_name)


def _load_instances(entry: dict[str, Any], long_context: bool) -> dict[str, Callable[..., Any]]:
    """Instantiate the entry's simulators and map each public method name to its bound method.

    Later classes win on a name clash, exactly as BFCL's executor maps them.
    """
    methods: dict[str, Callable[..., Any]] = {}
    for class_name in entry["involved_classes"]:
        instance = _simulator_class(class_name)()
        if class_name not in _STATELESS:
            scenario = copy.deepcopy(entry.get("initial_config", {}).get(class_name, {}))
            instance._load_scenario(scenario, long_context=long_context)
        for name, method in inspect.getmembers(instance, predicate=inspect.ismethod):
            if not name.startswith("_"):
                methods[name] = method
    return methods


def _parse_call(source: str, methods: dict[str, Callable[..., Any]]) -> tuple[str, dict[str, Any]]:
    """Parse ``name(a, b=1)`` into the method name and keyword arguments (positionals bound)."""
    node = ast.parse(source.strip(), mode="eval").body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"ground-truth entry is not a plain function call: {source!r}")
    name = node.func.id
    if name not in methods:
        raise ValueError(f"ground-truth call {source!r} names no method of the involved classes")
    args = [ast.literal_eval(arg) for arg in node.args]
    kwargs = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg is not None}
    bound = inspect.signature(methods[name]).bind_partial(*args, **kwargs)
    return name, dict(bound.arguments)


def _render_output(result: Any) -> str:
    if isinstance(result, str):
        return result
    try:
        return json.dumps(result, ensure_ascii=False)
    except (TypeError, ValueError):
        return json.dumps(str(result), ensure_ascii=False)


def _execute(method: Callable[..., Any], arguments: dict[str, Any]) -> str:
    try:
        result = method(**copy.deepcopy(arguments))
    except Exception as exc:  # a failing tool is still a tool result the agent sees
        return json.dumps({"error": f"{type(exc).__name__}: {exc}"}, ensure_ascii=False)
    return _render_output(result)


# --------------------------------------------------------------------------- conversations


def _system_prompt(tools: list[dict[str, Any]]) -> str:
    names = ", ".join(tool["function"]["name"] for tool in tools)
    return (
        "You are a careful agent. Complete the user's requests by calling the available tools, "
        "one step at a time, and report briefly when a request is done.\n"
        f"Available tools: {names}."
    )


def _chunks(calls: list[str], parallel: bool) -> list[list[str]]:
    size = _MAX_PARALLEL if parallel else 1
    return [calls[i : i + size] for i in range(0, len(calls), size)]


def _build_one(
    entry: dict[str, Any], ground_truth: list[list[str]], category: str, system_prompt: bool
) -> Conversation:
    excluded = set(entry.get("excluded_function", []))
    tools = [
        _openai_tool(doc)
        for class_name in entry["involved_classes"]
        for doc in _tool_docs(class_name)
        if doc["name"] not in excluded
    ]
    methods = _load_instances(entry, long_context=(category == "long_context"))
    held_out = entry.get("missed_function", {})

    messages: list[dict[str, Any]] = []
    if system_prompt:
        messages.append({"role": "system", "content": _system_prompt(tools)})

    questions = entry["question"]
    if len(questions) != len(ground_truth):
        raise ValueError(
            f"{entry['id']}: {len(questions)} question turns but {len(ground_truth)} answer turns"
        )
    call_number = 0
    for turn_index, (user_messages, calls) in enumerate(zip(questions, ground_truth, strict=True)):
        turn_users = list(user_messages)
        if not turn_users and str(turn_index) in held_out:
            turn_users = [{"role": "user", "content": _ADDITIONAL_FUNCTION_PROMPT}]
        for user in turn_users:
            messages.append(
                {"role": "user", "content": user["content"], "metadata": {"source": "user"}}
            )
        # Odd turns batch their calls (up to three per assistant message) so the corpus holds
        # parallel-call groups as well as single calls.
        for group in _chunks(list(calls), parallel=turn_index % 2 == 1):
            tool_calls = []
            results = []
            for source in group:
                call_number += 1
                call_id = f"call_{call_number}"
                name, arguments = _parse_call(source, methods)
                tool_calls.append(
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {
                            "name": name,
                            "arguments": json.dumps(arguments, ensure_ascii=False),
                        },
                    }
                )
                results.append(
                    {
                        "role": "tool",
                        "tool_call_id": call_id,
                        "content": _execute(methods[name], arguments),
                    }
                )
            messages.append({"role": "assistant", "content": "", "tool_calls": tool_calls})
            messages.extend(results)
        closing = f"Done: {'; '.join(calls)}." if calls else _NO_CALL_REPLY
        messages.append({"role": "assistant", "content": closing})
    return Conversation(id=entry["id"], category=category, messages=messages, tools=tools)


def build_corpus(
    category: str = "long_context", limit: int | None = None, *, system_prompt: bool = True
) -> Corpus:
    """Build the conversations of one multi-turn category (see :func:`categories`)."""
    available = categories()
    if category not in available:
        raise ValueError(
            f"unknown BFCL multi-turn category {category!r}; choose one of {', '.join(available)}"
        )
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}")
    data = _data_dir()
    file_name = f"BFCL_v4_multi_turn_{category}.json"
    answers = {
        row["id"]: row["ground_truth"] for row in _read_jsonl(data / "possible_answer" / file_name)
    }
    corpus = Corpus(category=category)
    for entry in _read_jsonl(data / file_name):
        if limit is not None and len(corpus.conversations) >= limit:
            break
        entry_id = entry["id"]
        if entry_id not in answers:
            corpus.skipped[entry_id] = "no ground truth"
            continue
        try:
            for class_name in entry["involved_classes"]:
                _simulator_class(class_name)
        except ImportError as exc:
            corpus.skipped[entry_id] = f"simulator unavailable: {exc}"
            continue
        corpus.conversations.append(_build_one(entry, answers[entry_id], category, system_prompt))
    return corpus


def build_conversations(
    category: str = "long_context", limit: int | None = None, *, system_prompt: bool = True
) -> list[Conversation]:
    """Conversations of one category; those whose simulator cannot be imported are left out."""
    return build_corpus(category, limit, system_prompt=system_prompt).conversations


def chain_conversations(conversations: list[Conversation], size: int) -> list[Conversation]:
    """Every ``size`` consecutive conversations joined into one long session.

    A session has one system prompt (the first conversation's is kept, the others' dropped)
    and a provider's call ids are unique within it, so ids are prefixed with the part's
    number. A short last chunk is chained too.
    """
    if size < 1:
        raise ValueError(f"size must be >= 1, got {size}")
    chained = []
    for start in range(0, len(conversations), size):
        parts = conversations[start : start + size]
        messages: list[dict[str, Any]] = []
        for number, conv in enumerate(parts):
            for message in conv.messages:
                if number and message["role"] == "system":
                    continue
                messages.append(_renumbered(message, f"p{number}_"))
        chained.append(
            Conversation(
                id="+".join(conv.id for conv in parts),
                category=parts[0].category,
                messages=messages,
                tools=[tool for conv in parts for tool in conv.tools],
            )
        )
    return chained


def _renumbered(message: dict[str, Any], prefix: str) -> dict[str, Any]:
    renamed = dict(message)
    if "tool_call_id" in renamed:
        renamed["tool_call_id"] = prefix + renamed["tool_call_id"]
    if renamed.get("tool_calls"):
        renamed["tool_calls"] = [dict(c, id=prefix + c["id"]) for c in renamed["tool_calls"]]
    return renamed


DEFAULT_CATEGORY = "long_context"
DEFAULT_CHAIN = 5  # conversations per session: the shape of a long agent run


def bfcl_sessions(
    category: str = DEFAULT_CATEGORY, *, chain: int = DEFAULT_CHAIN, limit: int | None = None
) -> list[EvalConversation]:
    """The eval's BFCL corpus: a category's conversations (the first ``limit``), every
    ``chain`` of them joined into one session. RuntimeError when bfcl-eval is missing."""
    if not bfcl_available():
        _data_dir()  # raises the RuntimeError that says how to install it
    conversations = build_conversations(category, limit)
    return [
        EvalConversation(
            id=conv.id, corpus=f"bfcl-{category.replace('_', '-')}", messages=conv.messages
        )
        for conv in chain_conversations(conversations, chain)
    ]
