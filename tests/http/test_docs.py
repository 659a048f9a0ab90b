"""``/docs``, ``/redoc`` and ``/openapi.json``: local assets, every body's schema, security."""

from __future__ import annotations

import re
from typing import Any

import httpx
import jsonschema
import pytest
from fastapi import FastAPI

from corral._config import Config
from corral.engine import Engine
from corral.http import create_app
from tests.http.httpkit import OPS, client_for, open_session, post

pytestmark = pytest.mark.anyio

DIAL_OPS = (
    "open_session",
    "get_session",
    "close_session",
    "execute_code",
    "upload_file",
    "download_file",
    "list_files",
    "transfer_input_file",
    "transfer_output_file",
)


@pytest.mark.parametrize(("page", "scripts"), [("/docs", 1), ("/redoc", 1)])
async def test_doc_pages_load_every_asset_locally(
    gateway_app: FastAPI, page: str, scripts: int
) -> None:
    async with client_for(gateway_app) as anonymous:  # no key needed to read the docs
        html = (await anonymous.get(page)).text
        urls = re.findall(r"""(?:src|href)=["']([^"']+)["']""", html)
        urls += re.findall(r"""url: ?['"]([^'"]+)['"]""", html)
        urls += re.findall(r"""spec-url=["']([^"']+)["']""", html)
        assert len([u for u in urls if u.endswith(".js")]) >= scripts
        assert "/openapi.json" in urls
        assert not re.search(r"https?://", html), "the page must not reach the network"
        for url in urls:
            assert url.startswith("/"), url
            response = await anonymous.get(url)
            assert response.status_code == 200, url
            assert len(response.content) > 0


async def _spec(app: FastAPI) -> dict[str, Any]:
    async with client_for(app) as anonymous:
        spec: dict[str, Any] = (await anonymous.get("/openapi.json")).json()
    return spec


def _validate(spec: dict[str, Any], name: str, instance: Any) -> None:
    schema = {"$ref": f"#/components/schemas/{name}", "components": spec["components"]}
    jsonschema.validate(instance, schema, cls=jsonschema.Draft202012Validator)


def _body_schema(spec: dict[str, Any], path: str) -> dict[str, Any]:
    content = spec["paths"][path]["post"]["requestBody"]["content"]
    schema: dict[str, Any] = next(iter(content.values()))["schema"]
    return schema


GATEWAY_ROUTES = [
    *(("post", f"{OPS}/{op}") for op in DIAL_OPS),
    ("post", "/v1/execute"),
    ("post", "/run_code"),
    ("post", "/run_code_batch"),
    ("get", "/v1/bucket"),
    ("put", "/v1/files/{bucket}/{path}"),
    ("get", "/v1/files/{bucket}/{path}"),
    ("delete", "/v1/files/{bucket}/{path}"),
    ("get", "/health"),
    ("get", "/metrics"),
    *(("post", f"/v1/sessions/{{session_id}}/{op}") for op in ("pause", "resume", "snapshot")),
]
CONTAINER_ROUTES = [
    ("get", "/health"),
    ("post", "/execute_code"),
    ("post", "/upload_file"),
    ("post", "/download_file"),
    ("post", "/list_files"),
    ("get", "/metrics"),
]


def _check_routes(spec: dict[str, Any], routes: list[tuple[str, str]]) -> None:
    documented = {(m, p) for p, ops in spec["paths"].items() for m in ops}
    assert documented == set(routes)
    for method, path in routes:
        operation = spec["paths"][path][method]
        assert operation["responses"]["200"], (method, path)
        if method in ("post", "put"):
            assert operation["requestBody"]["content"], (method, path)
        for status, answer in operation["responses"].items():
            if status != "200" and status != "401":
                assert answer.get("content"), (method, path, status)


async def test_every_route_has_request_and_response_schemas(
    gateway_app: FastAPI, engine: Engine, container_config: Config
) -> None:
    spec = await _spec(gateway_app)
    _check_routes(spec, GATEWAY_ROUTES)
    container_spec = await _spec(create_app(engine, container_config))
    _check_routes(container_spec, CONTAINER_ROUTES)
    upload = container_spec["paths"]["/upload_file"]["post"]["requestBody"]["content"]
    assert "multipart/form-data" in upload
    for op in DIAL_OPS:
        schema = _body_schema(spec, f"{OPS}/{op}")
        if "$ref" in schema:
            assert schema["$ref"].rsplit("/", 1)[1] in spec["components"]["schemas"]
    execute = spec["components"]["schemas"]["ExecuteBody"]
    assert set(execute["properties"]) == {"sessionId", "code", "inputFiles", "outputFiles"}
    own = spec["components"]["schemas"]["ExecuteRequest"]
    assert {"code", "sessionId", "timeout", "stream", "return_files", "network", "template"} == set(
        own["properties"]
    )


async def test_security_schemes(gateway_app: FastAPI) -> None:
    spec = await _spec(gateway_app)
    assert spec["components"]["securitySchemes"] == {
        "ApiKey": {"type": "apiKey", "in": "header", "name": "Api-Key"},
        "Bearer": {"type": "http", "scheme": "bearer"},
    }
    for op in DIAL_OPS:
        assert spec["paths"][f"{OPS}/{op}"]["post"]["security"] == [{"ApiKey": []}, {"Bearer": []}]
    assert "security" not in spec["paths"]["/health"]["get"]


async def test_real_answers_match_their_schemas(
    gateway_app: FastAPI, client: httpx.AsyncClient
) -> None:
    spec = await _spec(gateway_app)
    code = "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nopen('o.txt', 'w').write('x')\n1"
    full = await client.post("/v1/execute", json={"code": code, "return_files": True})
    _validate(spec, "ExecuteResponse", full.json())
    failed = await client.post("/v1/execute", json={"code": "1/0"})
    _validate(spec, "ExecuteResponse", failed.json())
    _validate(spec, "ErrorResponse", (await client.post("/v1/execute", json={})).json())
    _validate(spec, "HealthResponse", (await client.get("/health")).json())
    session_id = await open_session(client)
    dial = await post(client, "execute_code", {"sessionId": session_id, "code": code})
    _validate(spec, "DialExecuteResponse", dial.json())
    listed = await post(client, "list_files", {"sessionId": session_id})
    _validate(spec, "DialFilesResponse", listed.json())
    uploaded = await client.post(
        f"{OPS}/upload_file", params={"session_id": session_id}, files={"file": ("a.txt", b"1")}
    )
    _validate(spec, "DialFileResponse", uploaded.json())
    closed = await post(client, "close_session", {"sessionId": session_id})
    _validate(spec, "DialSessionResponse", closed.json())
    with pytest.raises(jsonschema.ValidationError):  # the DIAL shape admits no extra field
        _validate(spec, "DialExecuteResponse", full.json())
