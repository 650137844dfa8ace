"""A small JSON Schema validator for the keywords our schemas use (draft-04/07 subset); tests only."""
from __future__ import annotations

import re
from typing import Any

_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}
SUPPORTED = {"$schema", "$id", "id", "title", "description", "default", "definitions", "$defs", "$ref", "type",
             "properties", "required", "additionalProperties", "items", "minItems", "maxItems", "uniqueItems",
             "enum", "const", "minimum", "maximum", "pattern", "format", "anyOf", "oneOf", "allOf",
             "patternProperties", "minLength", "deprecated", "examples"}


def _resolve(root: dict, ref: str) -> dict:
    if not ref.startswith("#/"):
        raise ValueError(f"only local $ref supported: {ref}")
    node: Any = root
    for part in ref[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def errors(instance: Any, schema: dict, root: dict | None = None, path: str = "$") -> list[str]:
    """Every violation of ``schema`` by ``instance`` as 'path: message' (empty list = valid)."""
    root = root if root is not None else schema
    if not isinstance(schema, dict):
        return []
    unknown = set(schema) - SUPPORTED
    if unknown:
        raise ValueError(f"{path}: schema keywords not supported by this validator: {sorted(unknown)}")
    out: list[str] = []
    if "$ref" in schema:
        return errors(instance, _resolve(root, schema["$ref"]), root, path)
    t = schema.get("type")
    if t is not None:
        types = t if isinstance(t, list) else [t]
        if not any(_TYPES[x](instance) for x in types):
            return [f"{path}: expected {types}, got {type(instance).__name__}"]
    if "enum" in schema and instance not in schema["enum"]:
        out.append(f"{path}: {instance!r} not in {schema['enum']}")
    if "const" in schema and instance != schema["const"]:
        out.append(f"{path}: {instance!r} != {schema['const']!r}")
    if isinstance(instance, (int, float)) and not isinstance(instance, bool):
        if "minimum" in schema and instance < schema["minimum"]:
            out.append(f"{path}: {instance} < minimum {schema['minimum']}")
        if "maximum" in schema and instance > schema["maximum"]:
            out.append(f"{path}: {instance} > maximum {schema['maximum']}")
    if isinstance(instance, str):
        if "pattern" in schema and not re.search(schema["pattern"], instance):
            out.append(f"{path}: {instance!r} does not match {schema['pattern']}")
        if "minLength" in schema and len(instance) < schema["minLength"]:
            out.append(f"{path}: shorter than {schema['minLength']}")
    if isinstance(instance, dict):
        props = schema.get("properties", {})
        for k in schema.get("required", []):
            if k not in instance:
                out.append(f"{path}: missing required key {k!r}")
        for k, v in instance.items():
            if k in props:
                out += errors(v, props[k], root, f"{path}.{k}")
                continue
            matched = False
            for pat, sub in schema.get("patternProperties", {}).items():
                if re.search(pat, k):
                    matched = True
                    out += errors(v, sub, root, f"{path}.{k}")
            if matched:
                continue
            extra = schema.get("additionalProperties", True)
            if extra is False:
                out.append(f"{path}: unexpected key {k!r}")
            elif isinstance(extra, dict):
                out += errors(v, extra, root, f"{path}.{k}")
    if isinstance(instance, list):
        if "minItems" in schema and len(instance) < schema["minItems"]:
            out.append(f"{path}: fewer than {schema['minItems']} items")
        if "maxItems" in schema and len(instance) > schema["maxItems"]:
            out.append(f"{path}: more than {schema['maxItems']} items")
        if schema.get("uniqueItems"):
            seen = [repr(x) for x in instance]
            if len(set(seen)) != len(seen):
                out.append(f"{path}: items not unique")
        items = schema.get("items")
        if isinstance(items, dict):
            for i, v in enumerate(instance):
                out += errors(v, items, root, f"{path}[{i}]")
    for sub in schema.get("allOf", []):
        out += errors(instance, sub, root, path)
    if "anyOf" in schema and not any(not errors(instance, s, root, path) for s in schema["anyOf"]):
        out.append(f"{path}: matches none of anyOf")
    if "oneOf" in schema:
        n = sum(1 for s in schema["oneOf"] if not errors(instance, s, root, path))
        if n != 1:
            out.append(f"{path}: matches {n} of oneOf (need exactly 1)")
    return out
