"""OpenAI strict-mode and Responses-API tool schemas: strict-mode rules on every object, valid JSON Schema, accepted by
the OpenAI SDK's types, and calls made under them (null for every optional argument) parse to the tool they mean."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from pydantic import TypeAdapter

from cudagym.strict_schema import STRICT_KEYWORDS, strict_schema
from cudagym.tools import TOOLS, ParseFailure, parse_action, tool_schemas

Validator = jsonschema.Draft202012Validator


def objects(schema: dict[str, Any]) -> list[dict[str, Any]]:
    """Every object schema in ``schema`` (itself, its properties', items', alternatives' and definitions')."""
    found = [schema] if schema.get("type") == "object" or "properties" in schema else []
    children = [*schema.get("properties", {}).values(), *schema.get("anyOf", ()), *schema.get("$defs", {}).values()]
    if isinstance(schema.get("items"), dict):
        children.append(schema["items"])
    for child in children:
        found += objects(child)
    return found


def keywords(schema: dict[str, Any]) -> set[str]:
    """Every keyword used anywhere in ``schema`` (property names excluded)."""
    used = set(schema)
    for child in [*schema.get("properties", {}).values(), *schema.get("anyOf", ()), *schema.get("$defs", {}).values()]:
        used |= keywords(child)
    if isinstance(schema.get("items"), dict):
        used |= keywords(schema["items"])
    return used


@pytest.mark.parametrize("fmt", ["openai", "openai-responses", "json"])
def test_strict_schemas_follow_strict_mode_rules(fmt: str) -> None:
    for entry, tool in zip(tool_schemas(fmt, strict=True), TOOLS, strict=True):
        parameters = entry["function"]["parameters"] if fmt == "openai" else entry["parameters"]
        Validator.check_schema(parameters)
        for obj in objects(parameters):
            assert obj["additionalProperties"] is False
            assert obj["required"] == list(obj["properties"])
        assert keywords(parameters) <= STRICT_KEYWORDS, keywords(parameters) - STRICT_KEYWORDS
        plain = tool.model_json_schema()
        for name, prop in parameters["properties"].items():
            optional = name not in plain.get("required", [])
            assert ("null" in prop["type"]) is optional, (tool.tool_name(), name)
            if "default" in plain["properties"][name]:
                assert "null for the default" in prop["description"]


def test_the_strict_form_nests_and_keeps_its_input() -> None:
    nested = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 8},
            "tags": {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "string"}}}},
            "mode": {"anyOf": [{"type": "integer"}, {"type": "string"}], "default": 3},
        },
        "required": ["name"],
    }
    before = repr(nested)
    strict = strict_schema(nested)
    assert repr(nested) == before
    assert strict["required"] == ["name", "tags", "mode"]
    assert strict["properties"]["name"] == {"type": "string", "description": "not empty; at most 8 characters"}
    item = strict["properties"]["tags"]["items"]
    assert item["additionalProperties"] is False and item["required"] == ["k"]
    assert strict["properties"]["tags"]["type"] == ["array", "null"]
    assert strict["properties"]["mode"]["anyOf"][-1] == {"type": "null"}
    Validator.check_schema(strict)
    Validator(strict).validate({"name": "a", "tags": None, "mode": None})
    assert list(Validator(strict).iter_errors({"name": "a", "tags": None}))  # every property is required


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.tool_name())
def test_a_strict_call_with_null_optionals_parses_to_the_defaults(tool: type) -> None:
    schema = tool_schemas("openai", strict=True)[TOOLS.index(tool)]["function"]["parameters"]
    plain = tool.model_json_schema()
    required = set(plain.get("required", []))
    examples = {"string": "kernels/a.cpp", "integer": 2, "boolean": True}
    arguments = {
        name: examples[prop["type"]] if name in required else None for name, prop in schema["properties"].items()
    }
    Validator(schema).validate(arguments)
    parsed = parse_action({"name": tool.tool_name(), "arguments": arguments})
    assert not isinstance(parsed, ParseFailure), parsed
    assert parsed == tool.model_validate({k: v for k, v in arguments.items() if v is not None})
    if required:  # null for a required argument stays an error
        broken = parse_action({"name": tool.tool_name(), "arguments": {**arguments, sorted(required)[0]: None}})
        assert isinstance(broken, ParseFailure) and broken.problem == "bad_arguments"


@pytest.mark.parametrize("strict", [False, True])
def test_the_openai_sdk_types_accept_both_forms(strict: bool) -> None:
    from openai.types.chat import ChatCompletionToolParam
    from openai.types.responses import FunctionToolParam

    responses = tool_schemas("openai-responses", strict=strict)
    for entry in responses:
        assert set(entry) == {"type", "name", "description", "parameters", "strict"} and entry["strict"] is strict
    assert TypeAdapter(list[FunctionToolParam]).validate_python(responses) == responses
    chat = tool_schemas("openai", strict=strict)
    assert all(("strict" in entry["function"]) is strict for entry in chat)
    assert TypeAdapter(list[ChatCompletionToolParam]).validate_python(chat) == chat
    with pytest.raises(ValueError, match="strict"):
        TypeAdapter(list[FunctionToolParam]).validate_python([{k: v for k, v in responses[0].items() if k != "strict"}])


def test_unknown_formats_and_a_strict_anthropic_form_are_refused() -> None:
    with pytest.raises(ValueError, match="openai-responses"):
        tool_schemas("gemini")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="strict"):
        tool_schemas("anthropic", strict=True)
