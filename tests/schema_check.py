"""A small JSON Schema validator for the subset report.schema.json uses (type, properties, required, items,
additionalProperties, anyOf, allOf, if/then, const, $ref to #/$defs): checks report.json files against the schema
dlprobe ships."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from dlprobe.analysis.report.schema import SCHEMA_FILE

_TYPES = {
    "null": lambda v: v is None,
    "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "string": lambda v: isinstance(v, str),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}


@cache
def shipped_schema() -> dict[str, Any]:
    return json.loads(SCHEMA_FILE.read_text())


def problems(value: Any, schema: dict[str, Any] | None = None, where: str = "$") -> list[str]:
    """Every place where value does not fit the schema (the shipped report schema by default)."""
    root = shipped_schema()
    schema = root if schema is None else schema
    if "$ref" in schema:
        return problems(value, root["$defs"][schema["$ref"].rsplit("/", 1)[-1]], where)
    if "const" in schema and value != schema["const"]:
        return [f"{where}: {value!r:.60} is not {schema['const']!r}"]
    out: list[str] = []
    for part in schema.get("allOf", []):  # each code's evidence: if the code is this one, then its evidence fits
        if "if" in part and problems(value, part["if"], where):
            continue
        out += problems(value, part.get("then", part), where)
    if "anyOf" in schema:
        if any(not problems(value, arm, where) for arm in schema["anyOf"]):
            return out
        return [*out, f"{where}: fits none of {len(schema['anyOf'])} alternatives"]
    if "type" in schema:
        names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_TYPES[name](value) for name in names):
            return [*out, f"{where}: {type(value).__name__} {value!r:.60} is not {' or '.join(names)}"]
    if isinstance(value, dict):
        out += [f"{where}: no {key!r}" for key in schema.get("required", []) if key not in value]
        properties = schema.get("properties", {})
        for key, item in value.items():
            if key in properties:
                out += problems(item, properties[key], f"{where}.{key}")
            elif isinstance(schema.get("additionalProperties"), dict):
                out += problems(item, schema["additionalProperties"], f"{where}.{key}")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            out += problems(item, schema["items"], f"{where}[{i}]")
    return out


def undeclared_evidence(report: dict[str, Any]) -> list[str]:
    """Evidence keys a finding carries that its code's TypedDict (dlprobe/analysis/evidence/) does not name: the
    schema lets objects hold more keys than it names (a newer dlprobe may add some), so this is where a key written
    but never declared, or declared under another name, is caught."""
    from dlprobe.analysis.evidence.schema import EVIDENCE_BY_CODE

    out = []
    for i, finding in enumerate(report.get("findings") or []):
        record = EVIDENCE_BY_CODE.get(str(finding.get("code")))
        evidence = finding.get("evidence")
        if record is None or not isinstance(evidence, dict):
            continue
        extra = sorted(set(evidence) - set(record.__annotations__))
        if extra:
            out.append(f"$.findings[{i}] ({finding.get('code')}): {', '.join(extra)}")
    return out
