"""Registering the EvalFarm service so that undecodable request bytes get INVALID_ARGUMENT.

With the generated registration, grpc fails a request whose bytes do not parse before any of our
code runs, and the client sees UNKNOWN. Here the deserializer never raises: it returns a
``MalformedRequest`` that the servicer rejects with INVALID_ARGUMENT and a message saying why.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from evalfarm.v1 import evalfarm_pb2 as pb

SERVICE = "evalfarm.v1.EvalFarm"


@dataclasses.dataclass(frozen=True)
class MalformedRequest:
    """Bytes that are not a valid message of the expected type."""

    message_type: str
    error: str

    @property
    def message(self) -> str:
        return (f"the request is not a valid {self.message_type} message ({self.error}); "
                "send a serialized evalfarm.v1 message")


def decoder(cls: Any) -> Callable[[bytes], Any]:
    def decode(data: bytes) -> Any:
        try:
            return cls.FromString(data)
        except (DecodeError, ValueError, RuntimeError) as err:
            return MalformedRequest(cls.DESCRIPTOR.full_name, str(err) or type(err).__name__)
    return decode


def add_servicer(servicer: Any, server: Any) -> None:
    """Like ``add_EvalFarmServicer_to_server``, with never-failing request decoders."""
    handlers = {
        "Score": grpc.unary_unary_rpc_method_handler(
            servicer.Score, request_deserializer=decoder(pb.ScoreRequest),
            response_serializer=pb.ScoredSample.SerializeToString),
        "ScoreStream": grpc.stream_stream_rpc_method_handler(
            servicer.ScoreStream, request_deserializer=decoder(pb.ScoreRequest),
            response_serializer=pb.ScoredSample.SerializeToString),
        "Capacity": grpc.unary_unary_rpc_method_handler(
            servicer.Capacity, request_deserializer=decoder(pb.CapacityRequest),
            response_serializer=pb.CapacityResponse.SerializeToString),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    server.add_registered_method_handlers(SERVICE, handlers)
