"""Function calling: the tool schemas are valid JSON Schema (Draft 2020-12), agree with the parser, and
calls built from them in OpenAI, Anthropic and tagged-text form parse back to the same tool call."""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cudagym.instructions import render_instructions
from cudagym.tools import TOOLS, TOOLS_BY_NAME, ParseFailure, Tool, parse_action, tool_schemas

FORMATS = ("openai", "anthropic", "json")
NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")  # what the OpenAI and Anthropic APIs accept as a tool name
Validator = jsonschema.Draft202012Validator


def _parameters(entry: dict[str, Any], fmt: str) -> dict[str, Any]:
    if fmt == "openai":
        assert entry["type"] == "function" and set(entry) == {"type", "function"}
        return entry["function"]["parameters"]
    if fmt == "anthropic":
        assert set(entry) == {"name", "description", "input_schema"}
        return entry["input_schema"]
    return entry["parameters"]


def _name(entry: dict[str, Any]) -> str:
    return entry["function"]["name"] if "function" in entry else entry["name"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_schema_is_valid_draft_2020_12(fmt: str) -> None:
    entries = tool_schemas(fmt)
    assert [_name(e) for e in entries] == [t.tool_name() for t in TOOLS]
    for entry in entries:
        schema = _parameters(entry, fmt)
        Validator.check_schema(schema)  # raises jsonschema.SchemaError when the schema is not valid
        assert NAME_RE.match(_name(entry))
        assert schema["type"] == "object" and schema["additionalProperties"] is False
        assert set(schema.get("required", [])) <= set(schema["properties"])
        description = entry["function"]["description"] if fmt == "openai" else entry["description"]
        assert description == TOOLS_BY_NAME[_name(entry)].__doc__
        json.dumps(entry)  # plain JSON, ready for any API


def test_the_instructions_describe_the_same_tools() -> None:
    from cudagym.backends import resolve_backend
    from cudagym.tasks import load

    text = render_instructions(load("builtin").get("builtin/relu"), resolve_backend("cpu"), max_turns=7)
    for entry in tool_schemas("json"):
        assert f"- {entry['name']}: {entry['description']}" in text
        for field, prop in entry["parameters"]["properties"].items():
            assert f"- {field} ({prop['type']}" in text


def _value(prop: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values that satisfy one property's schema."""
    kind = prop["type"]
    if kind == "string":
        return st.text(min_size=prop.get("minLength", 0), max_size=40)
    if kind == "integer":
        return st.integers(min_value=prop.get("minimum", -(2**31)), max_value=prop.get("maximum", 2**31))
    if kind == "boolean":
        return st.booleans()
    raise AssertionError(f"no strategy for {prop}")


@st.composite
def _arguments(draw: st.DrawFn, tool: type[Tool]) -> dict[str, Any]:
    """Arguments valid under the tool's schema: every required property, a random subset of the others."""
    schema = _parameters(tool_schemas("json")[TOOLS.index(tool)], "json")
    required = set(schema.get("required", []))
    arguments = {}
    for field, prop in schema["properties"].items():
        if field in required or draw(st.booleans()):
            arguments[field] = draw(_value(prop))
    return arguments


def _forms(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The same call as an OpenAI tool_calls entry, an Anthropic tool_use block and tagged text."""
    tool_use = {"type": "tool_use", "id": "toolu_1", "name": tool, "input": arguments}
    return {
        "openai": {"id": "call_1", "type": "function", "function": {"name": tool, "arguments": json.dumps(arguments)}},
        "openai_list": {
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": tool, "arguments": arguments}}]
        },
        "anthropic": {"name": tool_use["name"], "arguments": tool_use["input"]},
        "tagged_text": f"Thinking first.\n<tool_call>{json.dumps({'name': tool, 'arguments': arguments})}</tool_call>",
    }


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.tool_name())
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_calls_built_from_the_schema_round_trip(tool: type[Tool], data: st.DataObject) -> None:
    arguments = data.draw(_arguments(tool))
    schema = _parameters(tool_schemas("openai")[TOOLS.index(tool)], "openai")
    Validator(schema).validate(arguments)
    expected = tool.model_validate(arguments)
    for form, action in _forms(tool.tool_name(), arguments).items():
        parsed = parse_action(action)
        assert not isinstance(parsed, ParseFailure), (form, parsed)
        assert type(parsed) is tool and parsed == expected, form
    defaults = {name: field.default for name, field in tool.model_fields.items() if not field.is_required()}
    assert expected.model_dump() == {**defaults, **arguments}


# Calls that both refuse. The parser is more lenient than the schema only where pydantic's lax mode coerces
# (e.g. "5" for an integer, "true" for a boolean); it never accepts what the schema's structure forbids.
INVALID = [
    ("read_file", {}),  # missing required
    ("read_file", {"path": "model.py", "offset": 0}),  # below minimum
    ("read_file", {"path": "model.py", "limit": 5001}),  # above maximum
    ("read_file", {"path": 3}),  # wrong type
    ("edit_file", {"path": "a", "old_string": "", "new_string": "b"}),  # minLength
    ("compile", {"flags": "-O3"}),  # additionalProperties: false
    ("profile", {"ncu": "maybe"}),  # not a boolean
]


@pytest.mark.parametrize(("tool", "arguments"), INVALID)
def test_schema_and_parser_refuse_the_same_calls(tool: str, arguments: dict[str, Any]) -> None:
    schema = _parameters(tool_schemas("anthropic")[list(TOOLS_BY_NAME).index(tool)], "anthropic")
    assert list(Validator(schema).iter_errors(arguments)), "the schema accepts it"
    parsed = parse_action({"name": tool, "arguments": arguments})
    assert isinstance(parsed, ParseFailure) and parsed.problem == "bad_arguments", parsed
