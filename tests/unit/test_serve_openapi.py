"""``aioaccum serve``'s OpenAPI document covers every route the application serves, with its
methods, and nothing it does not serve."""

from __future__ import annotations

import re

from starlette.routing import Route

from aioaccum.config.serve_settings import ServeSettings
from aioaccum.serve._app import create_app
from aioaccum.serve._openapi import OPENAPI_PATH, document

_METHODS = {"get", "post", "put", "patch", "delete"}


def _served() -> set[tuple[str, str]]:
    app = create_app(ServeSettings.create({"bootstrap.servers": "127.0.0.1:9092"}))
    found = set()
    for route in app.routes:
        assert isinstance(route, Route)
        # Starlette's converters ({partition:int}) are OpenAPI's plain {partition}.
        path = re.sub(r"\{(\w+):\w+\}", r"{\1}", route.path)
        for method in route.methods or ():
            if method != "HEAD":  # Starlette adds HEAD to every GET
                found.add((path, method.lower()))
    return found


def test_every_route_is_in_the_document_and_nothing_else() -> None:
    described = {
        (path, method)
        for path, item in document("0").get("paths", {}).items()
        for method in item
        if method in _METHODS
    }
    assert described == _served()
    assert (OPENAPI_PATH, "get") in described


def test_every_operation_has_an_id_a_success_and_rest_proxys_error_body() -> None:
    doc = document("1.2.3")
    assert doc["info"]["version"] == "1.2.3"
    ids = []
    for item in doc["paths"].values():
        for method, operation in item.items():
            if method not in _METHODS:
                continue
            ids.append(operation["operationId"])
            assert "200" in operation["responses"]
            assert operation["responses"]["default"]["content"]["application/json"][
                "schema"
            ] == {"$ref": "#/components/schemas/Error"}
    assert len(ids) == len(set(ids))
    assert doc["components"]["schemas"]["Error"]["required"] == ["error_code", "message"]
