"""Typed views of the messages the client returns (proto/hap/v1/generate.proto, debug.proto):
plain frozen dataclasses, so callers need no protobuf."""

import dataclasses
from dataclasses import dataclass, field
from typing import Tuple


@dataclass(frozen=True)
class TlsOptions:
    """TLS for the channel; Client(tls=None) is plaintext. Empty root_certs_file = the system
    roots; client_cert_file + client_key_file = mutual TLS; server_name = the name the server's
    certificate carries when it differs from the address's host."""
    root_certs_file: str = ""
    client_cert_file: str = ""
    client_key_file: str = ""
    server_name: str = ""


@dataclass(frozen=True)
class RetryPolicy:
    """Generate retries on UNAVAILABLE, and only before the first delta arrived (a retry then
    cannot duplicate output), sleeping initial_backoff_ms, then times multiplier up to
    max_backoff_ms, between attempts. max_attempts = 1: no retry."""
    max_attempts: int = 4
    initial_backoff_ms: float = 100
    multiplier: float = 2.0
    max_backoff_ms: float = 2000


@dataclass(frozen=True)
class Delta:
    """A piece of the streamed answer: the text completed by this step (may be empty while a
    multi-byte character or a possible stop string is pending) and the token it sampled (one id,
    or none for the final flush)."""
    text: str
    token_ids: Tuple[int, ...]


@dataclass(frozen=True)
class PruneStage:
    """One pruning event: visual tokens dropped at the end of decoder layer after_layer (-1:
    before layer 0, for the methods that choose their visual tokens before the LLM)."""
    after_layer: int
    tokens_before: int
    tokens_kept: int


@dataclass(frozen=True)
class Flops:
    """Prefill multiply-adds, pruned and unpruned (docs/design.md §3): `paper` counts the visual
    tokens of each layer, `full` all prompt tokens."""
    paper: float
    full: float
    unpruned_paper: float
    unpruned_full: float

    @property
    def fraction(self):
        """full / unpruned_full: the share of the unpruned prefill compute that ran."""
        return self.full / self.unpruned_full if self.unpruned_full else 1.0


@dataclass(frozen=True)
class StageTimings:
    """Wall time of each stage of the request on the servers, in milliseconds."""
    queue_ms: float
    preprocess_ms: float
    encode_ms: float
    encode_rpc_ms: float
    prefill_ms: float
    score_select_ms: float
    kv_transfer_ms: float
    ttft_ms: float
    decode_ms: float
    total_ms: float
    prefill_tokens_per_s: float
    decode_tokens_per_s: float


@dataclass(frozen=True)
class GenerateStats:
    """The server's report of one request: the pruning that ran and what it cost."""
    request_id: str
    method: str                 # the pruning method that ran ("none", "hap", ...)
    budget: str                 # "retain 64", "flops 0.25", or "" (method none)
    prompt_tokens: int          # unpruned prompt length, visual tokens included
    text_tokens: int            # prompt tokens that are not visual
    visual_tokens: int          # visual tokens entering the decoder (V, or VisionZip's)
    image_visual_tokens: int    # V
    average_visual_tokens: float
    layer_visual_tokens: Tuple[int, ...]  # [L] visual rows each decoder layer processed
    stages: Tuple[PruneStage, ...]
    flops: Flops
    kv_bytes: int               # compacted KV cache prefill produced
    kv_bytes_unpruned: int      # the same prompt's cache without pruning
    kv_bytes_received: int      # K/V payload bytes the decode service received
    kv_chunks: int
    timings: StageTimings


@dataclass(frozen=True)
class GenerateResult:
    """A finished Generate call."""
    text: str                   # the streamed deltas, concatenated (= the server's whole answer)
    token_ids: Tuple[int, ...]  # every generated id; ends with the EOS id when EOS ended it
    streamed_token_ids: Tuple[int, ...]  # the ids the deltas carried (EOS is never streamed)
    finish_reason: str          # "eos", "stop", "length" or "cancelled"
    stats: GenerateStats
    attempts: int               # tries made (> 1 after retries)
    ttft_ms: float              # call start -> first delta, as the client saw it
    token_times_ms: Tuple[float, ...] = field(default=())  # call start -> each streamed token


@dataclass(frozen=True)
class ServerState:
    """hap.v1.Debug/GetState: a service's requests and KV caches (what tests and operators use
    to check nothing leaks)."""
    service: str
    serving: bool
    draining: bool
    in_flight_requests: int
    queued_requests: int
    kv_caches_held: int
    kv_bytes_held: int
    kv_leases: int
    requests_total: int
    requests_rejected: int
    leases_expired: int
    in_flight_ids: Tuple[str, ...]
    kv_pool_blocks_total: int
    kv_pool_blocks_in_use: int
    kv_pool_blocks_peak: int
    kv_pool_block_bytes: int


def from_message(cls, msg):
    """The dataclass `cls` from the proto message whose fields it names (repeated -> tuple)."""
    values = {}
    for f in dataclasses.fields(cls):
        v = getattr(msg, f.name)
        values[f.name] = v if isinstance(v, (str, bytes, bool, int, float)) else tuple(v)
    return cls(**values)
