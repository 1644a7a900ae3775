"""The exceptions a failed call raises: HapError carries the gRPC status code, the server's
message, the address and the attempts made; one subclass per code a caller usually handles."""

import grpc


class HapError(Exception):
    """A call that failed. `code` is a grpc.StatusCode, `details` the server's (or gRPC's)
    message, `address` the server called, `attempts` the tries made (Generate retries)."""

    def __init__(self, code, details, address="", attempts=1, message=None):
        self.code = code
        self.details = details
        self.address = address
        self.attempts = attempts
        if message is None:
            message = f"{code.name}: {details}" if details else code.name
            if address:
                tries = f", {attempts} attempts" if attempts > 1 else ""
                message += f" ({address}{tries})"
        super().__init__(message)


class InvalidArgumentError(HapError):
    """The server rejected the request (no or corrupt image, empty prompt, bad budget, ...)."""


class ResourceExhaustedError(HapError):
    """A server limit was hit: image size, concurrency + queue, KV memory."""


class UnavailableError(HapError):
    """The server (or a service behind it) could not be reached, or is loading or draining."""


class DeadlineExceededError(HapError):
    """The call's timeout ran out."""


class CancelledError(HapError):
    """The call was cancelled (Stream.cancel(), or by the server)."""


class UnauthenticatedError(HapError):
    """The front door requires a bearer token and got none, or one it does not accept (the
    message is the same for both)."""


class UnimplementedError(HapError):
    """The server does not serve the method called."""


class NotFrontDoorError(UnimplementedError):
    """Generate went to a server that is not hap-prefill, the front door."""


_BY_CODE = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    grpc.StatusCode.CANCELLED: CancelledError,
    grpc.StatusCode.UNIMPLEMENTED: UnimplementedError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
}


def error_for(code, details, address="", attempts=1, message=None):
    """The HapError subclass for `code`."""
    return _BY_CODE.get(code, HapError)(code, details, address, attempts, message)


def from_rpc_error(e, address, attempts=1):
    """A grpc.RpcError (which is also a grpc.Call) as a HapError."""
    return error_for(e.code(), e.details() or "", address, attempts)
