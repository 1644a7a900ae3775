"""The Python client of HAP serve, the counterpart of sdk/client.h: streaming Generate (iterate
the deltas, then take the result), deadlines, retries with exponential backoff on UNAVAILABLE
before the first token, TLS or plaintext channels, a bearer token, cancellation, and the health and
debug calls."""

import threading
import time

import grpc

from . import errors
from .errors import HapError
from .datatypes import (Delta, Flops, GenerateResult, GenerateStats, PruneStage, RetryPolicy,
                    ServerState, StageTimings, TlsOptions, from_message)

try:
    from ._proto import (common_pb2, debug_pb2, debug_pb2_grpc, generate_pb2, generate_pb2_grpc,
                         health_pb2, health_pb2_grpc)
except ModuleNotFoundError as e:
    if not (e.name or "").startswith(__package__ + "._proto"):
        raise
    raise ModuleNotFoundError(
        "hap_serve's gRPC stubs (hap_serve/_proto) were not generated: in a source tree run "
        "`/usr/bin/python3 sdk/python/generate_stubs.py`, or use the build tree's package "
        "(build/sdk/python) or an installed one (sdk/python/README.md)", name=e.name) from e

_GENERATE_METHOD = "hap.v1.Generation/Generate"


def _finish_reason_name(value):
    """FINISH_REASON_EOS -> "eos"."""
    try:
        return common_pb2.FinishReason.Name(value).removeprefix("FINISH_REASON_").lower()
    except ValueError:
        return f"unknown({value})"


def _stats_from_proto(s):
    return GenerateStats(
        request_id=s.request_id, method=s.method, budget=s.budget,
        prompt_tokens=s.prompt_tokens, text_tokens=s.text_tokens, visual_tokens=s.visual_tokens,
        image_visual_tokens=s.image_visual_tokens,
        average_visual_tokens=s.average_visual_tokens,
        layer_visual_tokens=tuple(s.layer_visual_tokens),
        stages=tuple(from_message(PruneStage, st) for st in s.stages),
        flops=from_message(Flops, s.flops), kv_bytes=s.kv_bytes,
        kv_bytes_unpruned=s.kv_bytes_unpruned, kv_bytes_received=s.kv_bytes_received,
        kv_chunks=s.kv_chunks, timings=from_message(StageTimings, s.timings))


def _assign(msg, name, value):
    """msg.name = value, with the field named when protobuf refuses the value."""
    try:
        setattr(msg, name, value)
    except TypeError as e:
        raise TypeError(f"{name}: {e}") from None
    except ValueError as e:
        raise ValueError(f"{name}: {e}") from None


def _budget_text(retain):
    """retain as the proto's string: 8 -> "8", 57.5 -> "57.5", "11.1%" as is."""
    if isinstance(retain, str):
        return retain
    if isinstance(retain, bool) or not isinstance(retain, (int, float)):
        raise TypeError(f"retain: a number of tokens or a string like '11.1%', got {retain!r}")
    return str(retain)


def build_request(image, prompt, *, method=None, retain=None, flops=None, max_new_tokens=0,
                  temperature=0, top_p=1, top_k=0, seed=0, stop=(), request_id="",
                  paq_temperature=None):
    """The hap.v1.GenerateRequest that Client.generate()/stream() send (see generate())."""
    if not isinstance(image, (bytes, bytearray, memoryview)):
        raise TypeError(f"image: the JPEG or PNG file's bytes, got {type(image).__name__}")
    if retain is not None and flops is not None:
        raise ValueError("give one budget: retain or flops, not both")
    if isinstance(stop, str):
        stop = (stop,)
    req = generate_pb2.GenerateRequest()
    req.image = bytes(image)
    _assign(req, "request_id", request_id)
    _assign(req, "prompt", prompt)
    _assign(req, "max_new_tokens", max_new_tokens)
    for s in stop:
        if not isinstance(s, str):
            raise TypeError(f"stop: strings, got {s!r}")
        req.stop.append(s)
    if method is not None:
        _assign(req.pruning, "method", method)
    if retain is not None:
        req.pruning.retain = _budget_text(retain)
    if flops is not None:
        _assign(req.pruning, "flops", flops)
    if paq_temperature is not None:
        # hap / hap-flat only, in [0.01, 100]; the server checks (None = 1, the paper's).
        if isinstance(paq_temperature, bool) or not isinstance(paq_temperature, (int, float)):
            raise TypeError(f"paq_temperature: a number, got {paq_temperature!r}")
        _assign(req.pruning, "paq_temperature", float(paq_temperature))
    # One seed for the sampler and for method "random"'s subset, as `hapctl run --seed`.
    _assign(req.pruning, "seed", seed)
    _assign(req.sampling, "temperature", temperature)
    _assign(req.sampling, "top_p", top_p)
    _assign(req.sampling, "top_k", top_k)
    _assign(req.sampling, "seed", seed)
    return req


def _read_pem(path, what):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        # OSError(errno, ...) comes back as the matching subclass (FileNotFoundError, ...).
        raise OSError(e.errno, f"cannot read the {what} ({e.strerror})", path) from None


def _make_channel(address, tls, max_receive_message_bytes):
    options = [
        ("grpc.max_receive_message_length", max_receive_message_bytes),
        ("grpc.max_send_message_length", -1),
        # Reconnect quickly after a server restart. Unlike the C++ SDK, no
        # grpc.min_reconnect_backoff_ms: gRPC also takes it as the shortest time one connection
        # attempt may take, and 100 ms fails every attempt (tcp handshaker shutdown) on a busy
        # host.
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 1000),
    ]
    if tls is None:
        return grpc.insecure_channel(address, options=options)
    if bool(tls.client_cert_file) != bool(tls.client_key_file):
        raise ValueError("mutual TLS needs both client_cert_file and client_key_file")
    roots = _read_pem(tls.root_certs_file, "root certificates") if tls.root_certs_file else None
    chain = key = None
    if tls.client_cert_file:
        chain = _read_pem(tls.client_cert_file, "client certificate")
        key = _read_pem(tls.client_key_file, "client key")
    if tls.server_name:
        options.append(("grpc.ssl_target_name_override", tls.server_name))
    creds = grpc.ssl_channel_credentials(root_certificates=roots, private_key=key,
                                         certificate_chain=chain)
    return grpc.secure_channel(address, creds, options=options)


class Stream:
    """One Generate call as an iterator of Delta; result() then gives the GenerateResult (it
    reads whatever is left first). The call starts at the first next() (or result()); errors
    raise HapError subclasses from there. cancel() may be called from any thread: the stream
    then ends with CancelledError and the server stops generating."""

    def __init__(self, client, request, timeout, metadata):
        self._client = client
        self._request = request
        self._timeout = timeout
        self._metadata = metadata
        self._lock = threading.Lock()
        self._cancelled = threading.Event()
        self._call = None
        self._attempts = 0
        self._result = None
        self._error = None
        self._gen = self._run()

    def __iter__(self):
        return self

    def __next__(self):
        try:
            return next(self._gen)
        except HapError as e:
            self._error = e
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.cancel()
        return False

    @property
    def attempts(self):
        """Tries made so far."""
        return self._attempts

    def done(self):
        """True once the stream ended, with its result or an error."""
        return self._result is not None or self._error is not None

    def cancel(self):
        """Cancels the call (and any retry still to come). False when it had already ended."""
        with self._lock:
            if self.done():
                return False
            self._cancelled.set()
            if self._call is not None:
                self._call.cancel()
        return True

    def result(self):
        """The GenerateResult, after reading the rest of the stream; raises the call's error."""
        for _ in self:
            pass
        if self._error is not None:
            raise self._error
        return self._result

    def _cancelled_error(self):
        return errors.CancelledError(grpc.StatusCode.CANCELLED, "cancelled by the caller",
                                     self._client.address, self._attempts)

    def _run(self):
        retry = self._client.retry
        address = self._client.address
        t0 = time.monotonic()
        deadline = None if self._timeout is None else t0 + self._timeout
        backoff_s = retry.initial_backoff_ms / 1000.0
        while True:
            if self._cancelled.is_set():
                raise self._cancelled_error()
            timeout = None
            if deadline is not None:
                timeout = deadline - time.monotonic()
                if timeout <= 0:
                    raise errors.DeadlineExceededError(
                        grpc.StatusCode.DEADLINE_EXCEEDED,
                        f"the timeout of {self._timeout * 1000:g} ms ran out before attempt "
                        f"{self._attempts + 1}", address, max(self._attempts, 1))
            self._attempts += 1
            with self._lock:
                call = self._client._generation.Generate(
                    self._request, timeout=timeout,
                    metadata=self._client._with_token(self._metadata))
                self._call = call
            text, streamed, times, stats = [], [], [], None
            ttft_ms = 0.0
            got_delta = finished = False
            try:
                for msg in call:
                    kind = msg.WhichOneof("kind")
                    if kind == "delta":
                        ms = (time.monotonic() - t0) * 1000.0
                        if not got_delta:
                            ttft_ms = ms
                        got_delta = True
                        ids = tuple(msg.delta.token_ids)
                        text.append(msg.delta.text)
                        streamed.extend(ids)
                        times.extend([ms] * len(ids))
                        yield Delta(msg.delta.text, ids)
                        if self._cancelled.is_set():
                            raise self._cancelled_error()
                    elif kind == "stats":
                        stats = msg.stats
                finished = True
            except grpc.RpcError as e:
                finished = True
                if self._cancelled.is_set():
                    raise self._cancelled_error() from None
                code = e.code()
                # Only a server that could not be reached, and only before any token: a retry
                # then cannot duplicate output.
                if code == grpc.StatusCode.UNAVAILABLE and not got_delta and \
                        self._attempts < retry.max_attempts:
                    wake = time.monotonic() + backoff_s
                    if deadline is None or wake < deadline:
                        if self._client._backoff(backoff_s, self._cancelled):
                            raise self._cancelled_error() from None
                        backoff_s = min(backoff_s * retry.multiplier,
                                        retry.max_backoff_ms / 1000.0)
                        continue
                if code == grpc.StatusCode.UNIMPLEMENTED:
                    raise self._client._explain_unimplemented(e, self._attempts) from None
                raise errors.from_rpc_error(e, address, self._attempts) from None
            finally:
                if not finished:  # the caller stopped iterating (or cancelled) mid-stream
                    call.cancel()
            if stats is None:
                raise HapError(grpc.StatusCode.INTERNAL,
                               "the stream ended without its stats message", address,
                               self._attempts)
            self._result = GenerateResult(
                text="".join(text), token_ids=tuple(stats.token_ids),
                streamed_token_ids=tuple(streamed),
                finish_reason=_finish_reason_name(stats.finish_reason),
                stats=_stats_from_proto(stats), attempts=self._attempts, ttft_ms=ttft_ms,
                token_times_ms=tuple(times))
            return


class Client:
    """A connection to hap-prefill, the front door (hap.v1.Generation). Thread-safe; close() (or
    `with`) releases the channel.

    address: "host:port" (any gRPC target). tls: None = plaintext, or a TlsOptions.
    retry: the RetryPolicy of generate()/stream().
    token: the bearer token of a front door with authentication, sent as
      `authorization: Bearer <token>` on every call (None = none). Over a plaintext channel
      anyone who sees the traffic can read it: beyond loopback or a trusted network, use tls."""

    def __init__(self, address, tls=None, retry=None, *, token=None,
                 max_receive_message_bytes=64 << 20):
        if not address:
            raise ValueError("server address is empty")
        if token is not None:
            if not isinstance(token, str):
                raise TypeError(f"token: a str, got {type(token).__name__}")
            # What an HTTP header and gRPC metadata carry; never echoed in the message.
            if not token or any(not "\x21" <= c <= "\x7e" for c in token):
                raise ValueError("token: printable ASCII without spaces")
        self._auth = (("authorization", f"Bearer {token}"),) if token else ()
        self._retry = retry if retry is not None else RetryPolicy()
        if self._retry.max_attempts < 1:
            raise ValueError(f"retry.max_attempts = {self._retry.max_attempts} must be >= 1")
        if self._retry.initial_backoff_ms < 0 or self._retry.max_backoff_ms < 0 or \
                self._retry.multiplier < 1:
            raise ValueError(f"{self._retry}: backoffs must be >= 0 and multiplier >= 1")
        if tls is not None and not isinstance(tls, TlsOptions):
            raise TypeError(f"tls: None or a TlsOptions, got {type(tls).__name__}")
        self._address = address
        self._channel = _make_channel(address, tls, max_receive_message_bytes)
        self._generation = generate_pb2_grpc.GenerationStub(self._channel)
        self._debug = debug_pb2_grpc.DebugStub(self._channel)
        self._health = health_pb2_grpc.HealthStub(self._channel)

    @property
    def address(self):
        return self._address

    @property
    def retry(self):
        return self._retry

    @property
    def channel(self):
        """The grpc.Channel, for calls of your own."""
        return self._channel

    def close(self):
        self._channel.close()

    def _with_token(self, metadata=None):
        """`metadata` (a tuple of pairs or None) with the bearer token, if any."""
        md = self._auth + tuple(metadata or ())
        return md or None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def stream(self, image, prompt, *, method=None, retain=None, flops=None, max_new_tokens=0,
               temperature=0, top_p=1, top_k=0, seed=0, stop=(), timeout=None, request_id="",
               metadata=(), paq_temperature=None):
        """Generate as a Stream of Delta (arguments as generate())."""
        req = build_request(image, prompt, method=method, retain=retain, flops=flops,
                            max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                            top_k=top_k, seed=seed, stop=stop, request_id=request_id,
                            paq_temperature=paq_temperature)
        if timeout is not None and timeout < 0:
            raise ValueError(f"timeout = {timeout} s must be >= 0")
        md = tuple(metadata.items()) if isinstance(metadata, dict) else tuple(metadata)
        return Stream(self, req, timeout, md or None)

    def generate(self, image, prompt, *, method=None, retain=None, flops=None, max_new_tokens=0,
                 temperature=0, top_p=1, top_k=0, seed=0, stop=(), timeout=None, request_id="",
                 metadata=(), paq_temperature=None):
        """Answers `prompt` about `image` (JPEG or PNG bytes) and returns a GenerateResult.

        method: "none", "hap", "uniform", "fastv", "pdrop", "sparsevlm", "visionzip", "random",
          "divprune", "cdpruner-llm", "hap-flat", "uniform-flat", "dart"; None = the server's
          default. One budget: retain (average visual tokens per layer,
          8 / 57.5 / "11.1%") or flops (fraction of the unpruned prefill FLOPs); None = the
          server's default. paq_temperature: PAQ-softmax temperature of "hap" / "hap-flat"
          (an extension beyond the paper), in [0.01, 100]; None = 1, the paper's weights.
        max_new_tokens: 0 = the server's 64. temperature 0 = greedy; top_p, top_k, seed as in
          hap.v1.Sampling (seed also seeds method "random"). stop: strings that end generation.
        timeout: seconds for the whole call, retries included (None = no deadline).
        metadata: (key, value) pairs or a dict, lowercase keys (e.g. traceparent).
        Raises a HapError subclass: InvalidArgumentError, ResourceExhaustedError,
        UnavailableError, DeadlineExceededError, CancelledError, NotFrontDoorError, ..."""
        return self.stream(image, prompt, method=method, retain=retain, flops=flops,
                           max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                           top_k=top_k, seed=seed, stop=stop, timeout=timeout,
                           request_id=request_id, metadata=metadata,
                           paq_temperature=paq_temperature).result()

    def health(self, timeout=2.0, service="", wait_for_ready=False):
        """grpc.health.v1.Health/Check: True when `service` ("" = the whole server) is SERVING,
        False when it answers otherwise; HapError when it cannot be asked (at once when the
        server cannot be reached, unless wait_for_ready: then it waits up to `timeout`)."""
        try:
            resp = self._health.Check(health_pb2.HealthCheckRequest(service=service),
                                      timeout=timeout, wait_for_ready=wait_for_ready,
                                      metadata=self._with_token())
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e, self._address) from None
        return resp.status == health_pb2.HealthCheckResponse.SERVING

    def get_state(self, timeout=2.0):
        """hap.v1.Debug/GetState as a ServerState (waits up to `timeout` s for the connection,
        so it rides out a reconnect)."""
        try:
            state = self._debug.GetState(debug_pb2.GetStateRequest(), timeout=timeout,
                                         wait_for_ready=True, metadata=self._with_token())
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e, self._address) from None
        return from_message(ServerState, state)

    def wait_until_serving(self, timeout=30.0):
        """Polls health() until SERVING; DeadlineExceededError naming the last answer if not
        within `timeout` seconds."""
        end = time.monotonic() + timeout
        last = "no answer yet"
        while True:
            try:
                # wait_for_ready: the call itself keeps the channel reconnecting.
                if self.health(timeout=min(0.5, max(end - time.monotonic(), 0.01)),
                               wait_for_ready=True):
                    return
                last = "NOT_SERVING"
            except HapError as e:
                last = str(e)
            if time.monotonic() >= end:
                raise errors.DeadlineExceededError(
                    grpc.StatusCode.DEADLINE_EXCEEDED, "", self._address,
                    message=f"{self._address} did not report SERVING within {timeout:g} s "
                            f"(last: {last})")
            time.sleep(0.05)

    def _backoff(self, seconds, cancelled):
        """Sleeps `seconds` (True at once if `cancelled` is set), keeping the channel connecting.
        gRPC Python makes progress on a reconnect only while something polls the channel: with
        no call in flight, a channel in TRANSIENT_FAILURE fails each new call at once with its
        last error, long after the server is back. A health check that waits for the
        connection is such a call. (Not channel.subscribe(): its polling thread outlives
        unsubscribe() and raises when the channel is closed.)"""
        probe = self._health.Check.future(health_pb2.HealthCheckRequest(), timeout=seconds,
                                          wait_for_ready=True, metadata=self._with_token())
        try:
            return cancelled.wait(seconds)
        finally:
            probe.cancel()

    def _explain_unimplemented(self, e, attempts):
        """The error for Generate answered UNIMPLEMENTED: which server was reached and why."""
        details = e.details() or ""
        said = f" ({details})" if details else ""
        try:
            service = self.get_state(timeout=1.0).service
        except HapError:
            service = ""
        if service == "hap-prefill":
            # The front door itself: gRPC answers UNIMPLEMENTED when the request does not parse
            # (generate.proto).
            return errors.UnimplementedError(
                e.code(), details, self._address, attempts,
                message=f"hap-prefill at {self._address} answered UNIMPLEMENTED{said}: it could "
                        "not parse the request (a string field that is not valid UTF-8?)")
        who = f"{self._address} is {service}" if service else \
            f"{self._address} does not serve {_GENERATE_METHOD}{said}"
        return errors.NotFrontDoorError(
            e.code(), details, self._address, attempts,
            message=f"{who}: it is not a hap-prefill front door; send Generate to hap-prefill's "
                    "address")
