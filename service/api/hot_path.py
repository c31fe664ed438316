"""The hot analyses' successful answers, served without Starlette's routing, request objects and exception
layers: an ASGI middleware inside the service's own (request ids, metrics, logs, admission, body limit, gzip).

Schedulers ask for operator, model-step and KV-capacity answers thousands of times a second, and FastAPI's
path around a handler cost about what the analysis does (bench/in_process.py). This path answers a request
only when it is plainly valid: an exact route, a JSON body that validates, a catalog model; the catalog is
checked and reloaded as the routes do it. Anything else (and any error on the way, before a byte is sent) is
handed, body and all, to the application, whose routes answer it as they always do, so every refusal keeps
its one shape and wording.
Its answers are the same bytes as the routes' (tests/api/test_hot_path.py compares them);
`ROOFLINE_HOT_PATH=false` turns it off.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter

from service.api.deps import fresh_catalog
from service.api.lean_route import OFF_LOOP_BYTES
from service.runtime.errors import is_json_content_type
from service.runtime.limits import replaying
from service.runtime.observability import count_analysis
from service.translation.analyses import ANALYSES, Analysis


@dataclass(frozen=True)
class HotAnalysis:
    analysis: Analysis  # the registry's entry: its request model and its answer's JSON, as the routes run them
    kind: Callable[[Any], str]  # the analysis count's label, as the route counts it
    # Whether this request may be answered inline: an inline model config is parsed per request, in time
    # that grows with its layers, so the route runs it in the thread pool.
    inline: Callable[[Any], bool] = lambda request: True


HOT = {
    "/v1/analyze/operator": HotAnalysis(ANALYSES["operator"], lambda request: f"operator:{request.operator.kind}"),
    "/v1/analyze/model": HotAnalysis(ANALYSES["model"], lambda request: f"model:{request.phase}",
                                     lambda request: request.model is None),
    "/v1/analyze/kv-capacity": HotAnalysis(ANALYSES["kv-capacity"], lambda request: "kv_capacity",
                                           lambda request: request.model is None),
}
JSON_HEADERS = (b"content-type", b"application/json")


@dataclass(frozen=True)
class HotRoute:
    """Stands in for the route in the request's scope, as routing would have set it."""

    path: str


ROUTES = {path: HotRoute(path) for path in HOT}


class HotPathMiddleware:
    def __init__(self, app, enabled: bool = True):
        self.app = app
        self.enabled = enabled
        self._validators = {path: TypeAdapter(hot.analysis.request_model).validate_json for path, hot in HOT.items()}

    async def __call__(self, scope, receive, send):
        hot = HOT.get(scope.get("path")) if self.enabled and scope["type"] == "http" else None
        if hot is None or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        messages, body = await _read_body(receive)
        answer = await self._answer(scope, hot, body)
        if answer is None:
            await self.app(scope, replaying(messages, receive), send)
            return
        payload, kind = answer
        count_analysis(kind)
        scope["route"] = ROUTES[scope["path"]]  # what the metrics and the access log label requests by
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(len(payload)).encode()), JSON_HEADERS]})
        await send({"type": "http.response.body", "body": payload})

    async def _answer(self, scope, hot: HotAnalysis, body: bytes | None) -> tuple[bytes, str] | None:
        """(the answer's JSON, its count label), or None for the application to answer."""
        if not body or len(body) >= OFF_LOOP_BYTES:  # a large body is validated off the event loop, by the route
            return None
        content_type = next((v for k, v in scope["headers"] if k == b"content-type"), None)
        if content_type is None or not is_json_content_type(content_type.decode("latin-1")):
            return None
        try:
            request = self._validators[scope["path"]](body)
            if not hot.inline(request):
                return None
            # As the routes' catalog dependency does: reloaded first when anything was committed since.
            catalog, stale = await fresh_catalog(scope["app"])
            if stale:
                scope.setdefault("state", {})["catalog_stale"] = True
            return hot.analysis.answer_json(request, catalog), hot.kind(request)
        except Exception:  # refused or failed (the database unreachable too): the route answers it, in its own words
            return None


async def _read_body(receive) -> tuple[list[dict], bytes | None]:
    """Every message of the request body (to replay them) and the body, or None when the client left."""
    messages, chunks = [], []
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            return messages, None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return messages, b"".join(chunks)
