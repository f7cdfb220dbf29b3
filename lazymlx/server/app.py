"""The HTTP app over one LLM and the socket it serves on: the routes, the API key, OpenAI's
error object for every error reply, and one log line per request (stderr)."""

from __future__ import annotations

import errno
import hmac
import ipaddress
import logging
import socket
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from lazymlx.errors import LazymlxError
from lazymlx.llm import LLM
from lazymlx.server.bodies import Refusal
from lazymlx.server.endpoints import Endpoints, Limits

log = logging.getLogger("lazymlx.server")


def error(
    status: int,
    message: str,
    param: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    """OpenAI's error object: invalid_request_error for the client's mistakes, else server_error."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return JSONResponse(body, status, headers=headers)


def create_app(llm: LLM, limits: Limits | None = None, api_key: str | None = None) -> FastAPI:
    """The server for `llm`; requests that name no "lazy" preset get the LLM's. With `api_key`
    every endpoint asks for it (`Authorization: Bearer KEY`, as OpenAI's clients send it)."""
    endpoints = Endpoints(llm, limits or Limits())
    app = FastAPI(title="lazymlx", description="OpenAI-compatible API over lazymlx")
    app.add_exception_handler(Refusal, _refused)
    app.add_exception_handler(HTTPException, _not_routed)
    app.add_exception_handler(Exception, _failed)
    if api_key is not None:
        app.middleware("http")(_key_check(api_key))

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        return {"object": "list", "data": [endpoints.card()]}

    @app.get("/v1/models/{model_id:path}")
    def model(model_id: str) -> dict[str, Any]:
        return endpoints.model(model_id)

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        return await endpoints.chat(request)

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await endpoints.completions(request)

    return app


def _key_check(api_key: str):
    """The middleware that answers 401 in OpenAI's shape (`invalid_api_key`, as OpenAI's own
    API does, so clients raise AuthenticationError) to a request without the key. The key is
    compared in constant time (hmac.compare_digest), so the reply's timing says nothing of how
    much of a guess was right."""
    expected = api_key.encode()

    async def check(request: Request, call_next):
        given = request.headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), expected):
            return await call_next(request)
        said = "no API key" if not given else "a wrong API key"
        message = (
            f"{said}: this server asks for its key as `Authorization: Bearer KEY` "
            "(the openai client's api_key)"
        )
        log.info("%s %s 401 · %s", request.method, request.url.path, said)
        return error(401, message, code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})

    return check


def exposure_warning(address: str, api_key: str | None) -> str | None:
    """The warning a server listening beyond this machine with no key gets at start (None: it
    listens on loopback only, or asks for a key)."""
    if api_key is not None:
        return None
    try:
        loopback = ipaddress.ip_address(address.split("%")[0]).is_loopback
    except ValueError:
        loopback = address == "localhost"
    if loopback:
        return None
    return (
        f"listening on {address} with no API key: anyone who can reach this port can use the "
        "model; set one with --api-key KEY or LAZYMLX_API_KEY"
    )


async def _refused(request: Request, refusal: Refusal) -> JSONResponse:
    log.info("%s %s %d · %s", request.method, request.url.path, refusal.status, refusal)
    return error(refusal.status, refusal.message, refusal.param, refusal.code)


async def _not_routed(request: Request, problem: HTTPException) -> JSONResponse:
    """404 and 405 (and any other HTTP error of the framework) in OpenAI's shape."""
    where = f"{request.method} {request.url.path}"
    if problem.status_code == 404:
        message = (
            f"no such endpoint: {where}; this server has /v1/chat/completions, "
            "/v1/completions, /v1/models and /health"
        )
    elif problem.status_code == 405:
        allowed = (problem.headers or {}).get("Allow", "another method")
        message = f"{where} is not allowed; use {allowed}"
    else:
        message = f"{where}: {problem.detail}"
    log.info("%s %d · %s", where, problem.status_code, message)
    return error(problem.status_code, message, headers=problem.headers)


async def _failed(request: Request, fault: Exception) -> JSONResponse:
    """A fault of ours: an error object, and the server lives on."""
    log.error("%s %s 500 · %r", request.method, request.url.path, fault)
    return error(500, f"the server failed: {fault}")


def listen(host: str, port: int) -> socket.socket:
    """A socket listening on host:port, made before the model loads: a busy port is one clear
    error before anything says "serving", and connections made before uvicorn starts wait."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as bad:
        raise LazymlxError(
            f"cannot listen on {host!r} ({bad.strerror}); give an address such as 127.0.0.1"
        ) from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
    try:
        sock.bind(address)
    except OSError as bad:
        sock.close()
        if bad.errno == errno.EADDRINUSE:
            raise LazymlxError(
                f"port {port} on {host} is in use (another server?); pick another with --port"
            ) from None
        raise LazymlxError(
            f"cannot listen on {host}:{port} ({bad.strerror}); pick another --host or --port"
        ) from None
    sock.listen()
    return sock


def serve(llm: LLM, sock: socket.socket, limits: Limits, api_key: str | None = None) -> None:
    """Serve on a socket from `listen`, logging each request (and waits) to stderr; with
    `api_key`, to clients that send it only."""
    import uvicorn

    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%Y-%m-%d %H:%M:%S"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    config = uvicorn.Config(create_app(llm, limits, api_key), log_level="warning")
    uvicorn.Server(config).run(sockets=[sock])
