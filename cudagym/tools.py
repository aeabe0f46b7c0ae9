"""The tool protocol: one pydantic model per tool, and the parser that turns action text into one call.

Accepted forms of one call (design.md):

1. a JSON object ``{"name": "write_file", "arguments": {"path": "...", "content": "..."}}``;
2. the same object inside ``<tool_call>...</tool_call>`` tags, with any text around it (reasoning);
3. an OpenAI ``tool_calls`` entry ``{"type": "function", "function": {"name": ..., "arguments": "<json>"}}``
   (``arguments`` as a JSON string or an object), alone or as the only entry of a ``tool_calls`` list.

``parse_action`` never raises: it returns either a validated tool model or a :class:`ParseFailure` whose
``message`` says what was wrong and shows the right form. ``null`` for an optional argument means its default (what a
model under OpenAI's strict mode sends). ``tool_schemas`` exports the tools for function calling: OpenAI Chat
Completions and Responses API (either also in strict mode), Anthropic, and a plain form.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from cudagym.strict_schema import strict_schema


class Tool(BaseModel):
    """Base of every tool model: unknown arguments are refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @classmethod
    def tool_name(cls) -> str:
        return str(cls.model_config["title"])

    @classmethod
    def example(cls) -> str:
        """The canonical call for this tool, as the agent should write it."""
        return json.dumps({"name": cls.tool_name(), "arguments": EXAMPLE_ARGUMENTS[cls.tool_name()]})


class WriteFile(Tool):
    """Create or overwrite a file in the workspace. Writable: kernels/*.cu, *.cuh, *.cpp, *.h and model_new.py."""

    model_config = ConfigDict(title="write_file")
    path: str = Field(description="Workspace-relative path, e.g. kernels/relu.cu or model_new.py")
    content: str = Field(description="The complete new file content")


class EditFile(Tool):
    """Replace one exact occurrence of old_string by new_string in a workspace file (as read_file shows it)."""

    model_config = ConfigDict(title="edit_file")
    path: str = Field(description="Workspace-relative path of a writable file")
    old_string: str = Field(description="Text to find; must occur exactly once in the file", min_length=1)
    new_string: str = Field(description="Replacement text")


class ReadFile(Tool):
    """Read a workspace file (any file, including the fixed ones), with line numbers; non-ASCII shown as \\uXXXX."""

    model_config = ConfigDict(title="read_file")
    path: str = Field(description="Workspace-relative path")
    offset: int = Field(default=1, ge=1, description="First line to show (1-based)")
    limit: int = Field(default=400, ge=1, le=5000, description="Maximum number of lines to show")


class ListFiles(Tool):
    """List the workspace's files with their sizes and whether they are writable."""

    model_config = ConfigDict(title="list_files")


class Compile(Tool):
    """Build kernels/ and the bindings into the Python module cuda_extension; shows compiler diagnostics."""

    model_config = ConfigDict(title="compile")


class Verify(Tool):
    """Check model_new.ModelNew against the reference Model on several fresh random inputs."""

    model_config = ConfigDict(title="verify")


class Profile(Tool):
    """Time ModelNew against eager PyTorch and torch.compile; shows the speedups and per-kernel times."""

    model_config = ConfigDict(title="profile")
    ncu: bool = Field(default=False, description="Add Nsight Compute figures for your kernels (cuda only)")


class Submit(Tool):
    """Final evaluation: compile, verify and profile, then the episode ends with the milestone tier."""

    model_config = ConfigDict(title="submit")


TOOLS: tuple[type[Tool], ...] = (WriteFile, EditFile, ReadFile, ListFiles, Compile, Verify, Profile, Submit)
TOOLS_BY_NAME: dict[str, type[Tool]] = {t.tool_name(): t for t in TOOLS}
ToolCall = Union[WriteFile, EditFile, ReadFile, ListFiles, Compile, Verify, Profile, Submit]  # noqa: UP007

EXAMPLE_ARGUMENTS: dict[str, dict[str, Any]] = {
    "write_file": {"path": "kernels/relu.cu", "content": "..."},
    "edit_file": {"path": "kernels/relu.cu", "old_string": "blockDim.x * 2", "new_string": "blockDim.x * 4"},
    "read_file": {"path": "model.py"},
    "list_files": {},
    "compile": {},
    "verify": {},
    "profile": {},
    "submit": {},
}

ParseProblem = Literal["empty", "bad_json", "no_call", "several_calls", "unknown_tool", "bad_arguments", "bad_shape"]


@dataclasses.dataclass(frozen=True)
class ParseFailure:
    """Why an action did not parse; ``message`` is written for the agent."""

    problem: ParseProblem
    message: str
    tool: str = ""


FORMAT_HELP = (
    'Write exactly one tool call per turn, as a JSON object {"name": <tool>, "arguments": {...}}, '
    "optionally inside <tool_call></tool_call> tags. Example: "
    '<tool_call>{"name": "compile", "arguments": {}}</tool_call>'
)

_TAG_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_OPEN_TAG_RE = re.compile(r"<tool_call>", re.IGNORECASE)
_FENCE_RE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


def tool_names() -> list[str]:
    return list(TOOLS_BY_NAME)


def _fail(problem: ParseProblem, message: str, tool: str = "") -> ParseFailure:
    return ParseFailure(problem=problem, message=message, tool=tool)


def _format_validation(tool: str, error: ValidationError) -> str:
    parts = []
    for item in error.errors(include_url=False):
        where = ".".join(str(p) for p in item["loc"]) or "arguments"
        parts.append(f"{where}: {item['msg']}")
    fields = TOOLS_BY_NAME[tool].model_json_schema().get("properties", {})
    signature = ", ".join(fields) if fields else "no arguments"
    return (
        f"Invalid arguments for {tool}: {'; '.join(parts)}. "
        f"{tool} takes: {signature}. Example: {TOOLS_BY_NAME[tool].example()}"
    )


def _decode_json(text: str) -> tuple[Any, ParseFailure | None]:
    fenced = _FENCE_RE.match(text.strip())
    if fenced:
        text = fenced.group(1)
    try:
        return json.loads(text), None
    except json.JSONDecodeError as e:
        snippet = text.strip()[:80]
        return None, _fail(
            "bad_json",
            f"Could not parse the tool call as JSON ({e.msg} at line {e.lineno} column {e.colno}) "
            f"in: {snippet!r}. {FORMAT_HELP}",
        )


def _from_object(obj: Any) -> ToolCall | ParseFailure:
    """Validates one decoded call in any accepted shape."""
    if isinstance(obj, list):
        if len(obj) == 1:
            return _from_object(obj[0])
        return _fail("several_calls", f"Found {len(obj)} tool calls; one per turn is allowed. {FORMAT_HELP}")
    if not isinstance(obj, Mapping):
        return _fail("bad_shape", f"A tool call must be a JSON object, got {type(obj).__name__}. {FORMAT_HELP}")
    if "tool_calls" in obj and "name" not in obj:
        return _from_object(obj["tool_calls"])
    if "function" in obj and isinstance(obj["function"], Mapping):  # OpenAI tool_calls entry
        fn = obj["function"]
        obj = {"name": fn.get("name"), "arguments": fn.get("arguments", {})}
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return _fail("bad_shape", f'The tool call has no "name" field. {FORMAT_HELP}')
    unexpected = sorted(set(obj) - {"name", "arguments", "id", "type"})
    if unexpected:
        return _fail(
            "bad_shape",
            f'Unexpected top-level field(s) {unexpected}: put tool arguments inside "arguments". '
            f"Example: {TOOLS_BY_NAME[name].example() if name in TOOLS_BY_NAME else FORMAT_HELP}",
            tool=name,
        )
    if name not in TOOLS_BY_NAME:
        import difflib

        close = difflib.get_close_matches(name, TOOLS_BY_NAME, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        return _fail("unknown_tool", f"Unknown tool {name!r}.{hint} Tools: {', '.join(TOOLS_BY_NAME)}.", tool=name)
    arguments = obj.get("arguments", {})
    if isinstance(arguments, str):  # OpenAI sends arguments as a JSON string
        if arguments.strip() == "":
            arguments = {}
        else:
            arguments, failure = _decode_json(arguments)
            if failure is not None:
                return _fail("bad_json", f"The arguments of {name} are not valid JSON. {failure.message}", name)
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, Mapping):
        return _fail(
            "bad_arguments",
            f'"arguments" must be a JSON object, got {type(arguments).__name__}. '
            f"Example: {TOOLS_BY_NAME[name].example()}",
            tool=name,
        )
    tool = TOOLS_BY_NAME[name]
    # null for an optional argument is its default: what a strict-mode schema (``tool_schemas(strict=True)``) sends
    arguments = {
        key: value
        for key, value in arguments.items()
        if not (value is None and key in tool.model_fields and not tool.model_fields[key].is_required())
    }
    try:
        return tool.model_validate(arguments)
    except ValidationError as e:
        return _fail("bad_arguments", _format_validation(name, e), tool=name)


def parse_action(action: Any) -> ToolCall | ParseFailure:
    """Turns one action (text, or an already-decoded call object) into a validated tool call.

    Text may hold reasoning around a ``<tool_call>`` block; without tags the whole text must be one JSON
    object (a fenced ```json block is accepted). Two or more calls in one action are refused.
    """
    if isinstance(action, (Mapping, list)):
        return _from_object(action)
    if isinstance(action, bytes):
        action = action.decode("utf-8", errors="replace")
    if not isinstance(action, str):
        return _fail("bad_shape", f"An action must be text, got {type(action).__name__}. {FORMAT_HELP}")
    if not action.strip():
        return _fail("empty", f"The action was empty. {FORMAT_HELP}")
    blocks = _TAG_RE.findall(action)
    if len(blocks) > 1:
        return _fail("several_calls", f"Found {len(blocks)} <tool_call> blocks; one per turn is allowed.")
    if len(blocks) == 1:
        text = blocks[0]
    elif _OPEN_TAG_RE.search(action):
        return _fail("bad_shape", f"A <tool_call> tag is not closed with </tool_call>. {FORMAT_HELP}")
    else:
        text = action.strip()
        if not text.startswith(("{", "[", "```")):
            return _fail("no_call", f"No tool call found in the action. {FORMAT_HELP}")
    obj, failure = _decode_json(text)
    if failure is not None:
        return failure
    return _from_object(obj)


SchemaFormat = Literal["openai", "openai-responses", "anthropic", "json"]
SCHEMA_FORMATS: tuple[str, ...] = ("openai", "openai-responses", "anthropic", "json")


def tool_schemas(format: SchemaFormat = "openai", *, strict: bool = False) -> list[dict[str, Any]]:
    """Function-calling schemas generated from the tool models, one per tool, in the order of ``TOOLS``.

    Args:
        format: ``"openai"``: Chat Completions ``tools`` entries, ``{"type": "function", "function": {"name",
            "description", "parameters"}}`` (with ``"strict": true`` in ``function`` when ``strict``);
            ``"openai-responses"``: Responses API entries, ``{"type": "function", "name", "description",
            "parameters", "strict"}``; ``"anthropic"``: ``{"name", "description", "input_schema"}``; ``"json"``:
            ``{"name", "description", "parameters"}``, the plain form other frameworks wrap themselves.
        strict: the parameters in OpenAI's strict-mode form (``cudagym.strict_schema``: every property required,
            optional ones nullable, ``additionalProperties: false`` everywhere), so that a model served with
            Structured Outputs always sends arguments the parser takes; ``null`` for an optional argument means its
            default. Not for ``"anthropic"`` (ValueError).
    """
    if format not in SCHEMA_FORMATS:
        raise ValueError(f"unknown schema format {format!r}; use {', '.join(repr(f) for f in SCHEMA_FORMATS)}")
    if strict and format == "anthropic":
        raise ValueError("strict=True is OpenAI's strict mode: use format 'openai', 'openai-responses' or 'json'")
    schemas = []
    for tool in TOOLS:
        schema = tool.model_json_schema()
        schema.pop("title", None)
        description = schema.pop("description", "")
        for prop in schema.get("properties", {}).values():
            prop.pop("title", None)
        schema.setdefault("properties", {})
        if strict:
            schema = strict_schema(schema)
        name = tool.tool_name()
        if format == "openai":
            function = {"name": name, "description": description, "parameters": schema}
            schemas.append({"type": "function", "function": {**function, "strict": True} if strict else function})
        elif format == "openai-responses":
            schemas.append(
                {"type": "function", "name": name, "description": description, "parameters": schema, "strict": strict}
            )
        elif format == "anthropic":
            schemas.append({"name": name, "description": description, "input_schema": schema})
        else:
            schemas.append({"name": name, "description": description, "parameters": schema})
    return schemas


def describe_tools() -> str:
    """A plain-text reference of every tool, its arguments and an example call (for the instructions)."""
    lines = []
    for tool in TOOLS:
        schema = tool.model_json_schema()
        required = set(schema.get("required", []))
        args = []
        for field, prop in schema.get("properties", {}).items():
            kind = prop.get("type", "any")
            opt = "" if field in required else f", optional, default {prop.get('default')!r}"
            args.append(f"    - {field} ({kind}{opt}): {prop.get('description', '')}")
        lines.append(f"- {tool.tool_name()}: {tool.__doc__}")
        lines.extend(args)
        lines.append(f"    example: {tool.example()}")
    return "\n".join(lines)
