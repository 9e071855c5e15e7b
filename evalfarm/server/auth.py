"""Bearer-token authentication for every RPC except the health service."""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

log = logging.getLogger(__name__)

# Always open, so load balancers and orchestrators can probe without a token.
UNAUTHENTICATED_METHODS = frozenset({"/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch"})


class BearerTokenInterceptor(grpc.aio.ServerInterceptor):
    """Requires `authorization: Bearer <token>` (constant-time compare); else UNAUTHENTICATED.

    ``tokens``: one token, or a callable giving the accepted tokens now (one or two, during a
    rotation; see evalfarm.server.reload.TokenFile).
    """

    def __init__(self, tokens: str | Callable[[], tuple[str, ...]],
                 on_reject: Callable[[str], None] | None = None) -> None:
        self._tokens = (lambda: (tokens,)) if isinstance(tokens, str) else tokens
        self._on_reject = on_reject

    def _accepted(self, given: bytes) -> bool:
        ok = False
        for token in self._tokens():  # every token compared: no early exit to time
            ok |= hmac.compare_digest(given, f"Bearer {token}".encode())
        return ok

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        method = handler_call_details.method
        if method in UNAUTHENTICATED_METHODS:
            return await continuation(handler_call_details)
        given = b""
        for key, value in handler_call_details.invocation_metadata or ():
            if key == "authorization":
                given = value.encode() if isinstance(value, str) else bytes(value)
                break
        if self._accepted(given):
            return await continuation(handler_call_details)
        reason = "missing" if not given else "wrong"
        log.warning("event=auth_rejected method=%s reason=%s", method, reason)
        if self._on_reject is not None:
            self._on_reject(reason)
        handler = await continuation(handler_call_details)
        return _rejecting_handler(handler, f"{reason} bearer token (metadata 'authorization: Bearer <token>')")


def _rejecting_handler(handler: grpc.RpcMethodHandler | None, message: str) -> grpc.RpcMethodHandler:
    code = grpc.StatusCode.UNAUTHENTICATED

    async def abort_unary(_req: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(code, message)

    async def abort_stream(_req: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(code, message)
        yield  # pragma: no cover - makes this an async generator

    deser = handler.request_deserializer if handler else None
    ser = handler.response_serializer if handler else None
    if handler is None or (not handler.request_streaming and not handler.response_streaming):
        return grpc.unary_unary_rpc_method_handler(abort_unary, deser, ser)
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(abort_stream, deser, ser)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(abort_unary, deser, ser)
    return grpc.unary_stream_rpc_method_handler(abort_stream, deser, ser)
