"""hap_serve: the Python client of HAP serve (hap.v1.Generation on hap-prefill, the front door).

    from hap_serve import Client
    with Client("127.0.0.1:50051") as client:
        stream = client.stream(open("scene.jpg", "rb").read(), "What is in the picture?",
                               method="hap", retain=64)
        for delta in stream:
            print(delta.text, end="", flush=True)
        print(stream.result().stats.average_visual_tokens)
"""

from .client import Client, Stream, build_request
from .datatypes import (Delta, Flops, GenerateResult, GenerateStats, PruneStage, RetryPolicy,
                        ServerState, StageTimings, TlsOptions)
from .errors import (CancelledError, DeadlineExceededError, HapError, InvalidArgumentError,
                     NotFrontDoorError, ResourceExhaustedError, UnauthenticatedError,
                     UnavailableError, UnimplementedError)

__version__ = "0.1.0"

__all__ = [
    "Client", "Stream", "build_request",
    "Delta", "Flops", "GenerateResult", "GenerateStats", "PruneStage", "RetryPolicy",
    "ServerState", "StageTimings", "TlsOptions",
    "HapError", "CancelledError", "DeadlineExceededError", "InvalidArgumentError",
    "NotFrontDoorError", "ResourceExhaustedError", "UnauthenticatedError", "UnavailableError",
    "UnimplementedError",
]
