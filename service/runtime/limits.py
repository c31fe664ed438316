"""Refuses request bodies over a size limit with 413, before anything parses them.

A declared Content-Length over the limit is refused at once; a body without one (chunked) is read up to
the limit before the application sees it, then replayed to it."""

from __future__ import annotations

import json


class BodySizeLimitMiddleware:
    def __init__(self, app, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = next((v for k, v in scope["headers"] if k == b"content-length"), None)
        if declared is not None:
            if not declared.isdigit() or int(declared) > self.max_bytes:
                await self._refuse(send)
                return
            await self.app(scope, receive, send)
            return
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                chunks.append(message)
                break
            size += len(message.get("body", b""))
            if size > self.max_bytes:
                await self._refuse(send)
                return
            chunks.append(message)
            if not message.get("more_body", False):
                break
        replay = iter(chunks)

        async def replayed():
            return next(replay, None) or await receive()

        await self.app(scope, replayed, send)

    async def _refuse(self, send):
        body = json.dumps({"error": "payload_too_large",
                           "detail": f"request bodies are limited to {self.max_bytes} bytes", "fields": []}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
