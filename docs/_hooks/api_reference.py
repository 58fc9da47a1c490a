"""MkDocs hook: the HTTP API reference page, generated from the server's OpenAPI document.

At build time it asks ``trio_batch.http.openapi_document`` (the same document a running server
answers at ``GET /openapi.json``) and adds two generated files to the site: ``openapi.json`` and
``api-reference.md``, a page per operation and schema. Nothing generated is kept in the tree, so
the reference cannot drift from the code. Without the ``server`` extra the page says how to get it.
"""

from __future__ import annotations

import json
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

PAGE = "api-reference.md"


def _cell(text: object) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _type(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    kind = schema.get("type", "any")
    if isinstance(kind, list):
        kind = " or ".join(kind)
    if kind == "array":
        return f"array of {_type(schema.get('items', {}))}"
    for key in ("oneOf", "anyOf"):
        if key in schema:
            return " or ".join(_type(s) for s in schema[key])
    return f"`{kind}`"


def _content_schema(body: dict[str, Any]) -> str:
    content = body.get("content", {})
    for media, spec in content.items():
        return f"{_type(spec.get('schema', {}))} (`{media}`)"
    return ""


def render(doc: dict[str, Any]) -> str:
    """Markdown for an OpenAPI 3 document."""
    info = doc.get("info", {})
    out = [
        "# HTTP API reference",
        "",
        "Generated from the OpenAPI document of `trio_batch.http` at build time (the same",
        "document a running server answers at `GET /openapi.json`; [download it](openapi.json)).",
        "For a guided tour of the API see [HTTP API](http.md).",
        "",
        f"**{info.get('title', '')}** version {info.get('version', '')}. "
        f"{info.get('description', '')}",
        "",
        "Authentication: every `/v1` route takes `Authorization: Bearer <key>`",
        "(`trio-batch keys add NAME` prints a key).",
        "",
        "## Operations",
        "",
    ]
    for path, item in doc.get("paths", {}).items():
        shared = item.get("parameters", [])
        for method, op in item.items():
            if method == "parameters" or not isinstance(op, dict):
                continue
            out += [f"### `{method.upper()} {path}`", "", f"**{op.get('summary', '')}.**", ""]
            if op.get("description"):
                out += [op["description"], ""]
            params = [*shared, *op.get("parameters", [])]
            if params:
                out += [
                    "| parameter | in | type | required | description |",
                    "|---|---|---|---|---|",
                ]
                for p in params:
                    out.append(
                        f"| `{p['name']}` | {p['in']} | {_type(p.get('schema', {}))} | "
                        f"{'yes' if p.get('required') else 'no'} | "
                        f"{_cell(p.get('description', ''))} |"
                    )
                out.append("")
            if "requestBody" in op:
                out += [f"Request body: {_content_schema(op['requestBody'])}", ""]
            out += ["| status | meaning | body |", "|---|---|---|"]
            for status, response in op.get("responses", {}).items():
                headers = ", ".join(f"`{h}`" for h in response.get("headers", {}))
                meaning = _cell(response.get("description", ""))
                if headers:
                    meaning += f" Headers: {headers}."
                out.append(f"| {status} | {meaning} | {_content_schema(response)} |")
            out.append("")
    out += ["## Schemas", ""]
    for name, schema in doc.get("components", {}).get("schemas", {}).items():
        out += [f"### {name}", ""]
        if schema.get("description"):
            out += [schema["description"], ""]
        props = schema.get("properties", {})
        if props:
            required = set(schema.get("required", []))
            out += ["| field | type | required | description |", "|---|---|---|---|"]
            for field, spec in props.items():
                out.append(
                    f"| `{field}` | {_type(spec)} | {'yes' if field in required else 'no'} | "
                    f"{_cell(spec.get('description', ''))} |"
                )
            out.append("")
        else:
            out += [f"Type: {_type(schema)}", ""]
    return "\n".join(out) + "\n"


def on_files(files: Files, config: MkDocsConfig) -> Files:
    try:
        from trio_batch.http import MAX_BODY, openapi_document
    except ModuleNotFoundError as exc:
        content = (
            "# HTTP API reference\n\nThis page is generated from the server's OpenAPI document, "
            f"which needs `{exc.name}`: install `trio-batch[server]` and build again.\n"
        )
    else:
        doc = openapi_document(with_fetch=True, max_body=MAX_BODY, retry_after=5)
        content = render(doc)
        files.append(
            File.generated(config, "openapi.json", content=json.dumps(doc, indent=2) + "\n")
        )
    files.append(File.generated(config, PAGE, content=content))
    return files
