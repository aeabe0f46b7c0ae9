"""A tool's JSON Schema in the form OpenAI's strict mode (Structured Outputs) takes.

Strict mode makes the model's arguments always valid under the schema, but accepts only a subset of JSON Schema:

* every object lists all of its properties in ``required`` and sets ``additionalProperties: false``;
* so an optional property becomes nullable (``"type": ["integer", "null"]``): the model sends ``null`` to leave it
  at its default, and the tool parser (``cudagym.tools.parse_action``) reads ``null`` that way;
* ``default`` is not a keyword it takes, nor are ``minLength``/``maxLength``: those move into the description,
  and the parser still enforces them. Kept are the keywords strict mode documents: ``pattern`` and ``format`` for
  strings, ``minimum``, ``maximum``, ``exclusiveMinimum``, ``exclusiveMaximum`` and ``multipleOf`` for numbers,
  ``minItems`` and ``maxItems`` for arrays, ``enum``, ``const``, ``anyOf``, ``$ref`` and ``$defs``.
"""

from __future__ import annotations

import copy
import json
from typing import Any

STRICT_KEYWORDS = frozenset(
    {
        "type",
        "description",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "enum",
        "const",
        "anyOf",
        "$ref",
        "$defs",
        "pattern",
        "format",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minItems",
        "maxItems",
    }
)
"""The JSON Schema keywords a strict-mode schema keeps (see the module doc)."""


def _length_note(key: str, value: int) -> str:
    if key == "minLength":
        return "not empty" if value == 1 else f"at least {value} characters"
    return f"at most {value} characters"


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    kind = schema.get("type")
    if isinstance(kind, str):
        schema["type"] = [kind, "null"] if kind != "null" else "null"
    elif isinstance(kind, list):
        schema["type"] = kind if "null" in kind else [*kind, "null"]
    else:  # no type of its own (anyOf, $ref): null as one more alternative
        schema = {"anyOf": [schema, {"type": "null"}]}
    return schema


def _describe(schema: dict[str, Any], notes: list[str]) -> None:
    if notes:
        text = schema.get("description", "")
        schema["description"] = f"{text} ({'; '.join(notes)})" if text else "; ".join(notes)


def _strict(schema: dict[str, Any]) -> dict[str, Any]:
    notes = [_length_note(key, schema[key]) for key in ("minLength", "maxLength") if key in schema]
    out = {key: value for key, value in schema.items() if key in STRICT_KEYWORDS}
    if "properties" in out:
        optional = set(out["properties"]) - set(schema.get("required", ()))
        properties = {}
        for name, prop in out["properties"].items():
            prop = _strict(prop)
            if name in optional:
                if "default" in schema["properties"][name]:
                    default = json.dumps(schema["properties"][name]["default"])
                    _describe(prop, [f"optional: null for the default, {default}"])
                else:
                    _describe(prop, ["optional: null to leave it out"])
                prop = _nullable(prop)
            properties[name] = prop
        out["properties"] = properties
        out["required"] = list(properties)
    if out.get("type") == "object" or "properties" in out:
        out["additionalProperties"] = False
        out.setdefault("properties", {})
        out.setdefault("required", [])
    if isinstance(out.get("items"), dict):
        out["items"] = _strict(out["items"])
    if "anyOf" in out:
        out["anyOf"] = [_strict(alternative) for alternative in out["anyOf"]]
    if "$defs" in out:
        out["$defs"] = {name: _strict(definition) for name, definition in out["$defs"].items()}
    _describe(out, notes)
    return out


def strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` (a JSON Schema object, left unchanged) in OpenAI's strict-mode form (see the module doc)."""
    return _strict(copy.deepcopy(schema))
