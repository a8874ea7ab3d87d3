"""The baseline for bench/webhook_load.py: a bare FastAPI handler that only echoes the uid."""

from __future__ import annotations

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response

app = FastAPI()


@app.post("/mutate")
@app.post("/validate")
async def echo(request: Request) -> Response:
    review = orjson.loads(await request.body())
    body = {"apiVersion": review["apiVersion"], "kind": "AdmissionReview",
            "response": {"uid": review["request"]["uid"], "allowed": True}}
    return Response(orjson.dumps(body), media_type="application/json")


@app.get("/healthz")
async def healthz() -> Response:
    return Response(b"ok", media_type="text/plain")
