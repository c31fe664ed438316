"""Settings from the environment (prefix ROOFLINE_)."""

from __future__ import annotations

import hashlib
import hmac
import re
from functools import lru_cache

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# Shorter secrets are guessable, and a short "token" is more often a label whose token was left out ("ops=").
MIN_TOKEN_LENGTH = 8
LABEL = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")


def parse_tokens(configured: str) -> dict[bytes, str]:
    """ROOFLINE_API_TOKENS -> {SHA-256 of each token: its label}. Only the hashes are kept.

    Entries are comma-separated: `label:token` (unambiguous for any token: ':' is in no base64, hex or
    urlsafe alphabet), `label=token` (when the token does not start with '='), or a bare token, labelled
    token-1, token-2, ... by position, never by anything derived from the secret. Spaces around labels and
    tokens are ignored. A token needs 8 characters or more. Anything that cannot be read raises ValueError, which stops the start-up."""
    tokens: dict[bytes, str] = {}
    for position, entry in enumerate((e.strip() for e in configured.split(",")), start=1):
        if not entry:
            continue
        label, token = None, entry
        if ":" in entry:
            label, token = (part.strip() for part in entry.split(":", 1))
        elif "=" in entry:
            left, right = (part.strip() for part in entry.split("=", 1))
            # A base64 secret's padding ("...==" or "...=") is part of the token, never a separator.
            if LABEL.match(left) and right and not right.startswith("="):
                label, token = left, right
        label = label if label is not None else f"token-{position}"
        if not LABEL.match(label):
            raise ValueError(f"ROOFLINE_API_TOKENS entry {position}: the label {label!r} must be letters, digits, "
                             "'.', '_' or '-' (starting with a letter)")
        if len(token) < MIN_TOKEN_LENGTH or any(c.isspace() for c in token):
            raise ValueError(f"ROOFLINE_API_TOKENS entry {position} ({label}): a token needs at least "
                             f"{MIN_TOKEN_LENGTH} characters and no spaces (e.g. `openssl rand -base64 24`)")
        if label in tokens.values():
            raise ValueError(f"ROOFLINE_API_TOKENS: the label {label!r} is used twice")
        digest = hashlib.sha256(token.encode()).digest()
        if digest in tokens:
            raise ValueError(f"ROOFLINE_API_TOKENS entry {position} ({label}): the same token is listed twice")
        tokens[digest] = label
    return tokens


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ROOFLINE_")

    database_url: str = "sqlite:///./data/roofline.db"
    # Comma-separated bearer tokens allowed to write, each optionally labelled: "alice:s3cret-t0ken,ci:an0ther-t0ken"
    # (see parse_tokens). Read once at start: a value that cannot be read stops the service.
    api_tokens: str = ""
    migrate_on_start: bool = True
    log_level: str = "INFO"
    # Large enough for a 4,096-point sweep or a 64-operator fusion graph, small enough to stay harmless.
    max_body_bytes: int = 1_048_576
    # The requests that carry a model's config (analyses, plans, charts, POST /v1/models): a published config.json
    # with its quantisation lists reaches 3 MB (MiniMax-M3 NVFP4 lists each of its unquantised modules); 8 MiB
    # holds it with room, and reading one costs about 0.1 s (bench/large_configs.py).
    max_model_body_bytes: int = Field(8 * 1_048_576, ge=1024, le=64 * 1_048_576)
    # The bulk writes' bodies (kernel timings, JSON or CSV; serving runs), a writer's only: 10,000 timings as JSON
    # are about 1.6 MB, past the limit above.
    max_bulk_body_bytes: int = Field(16 * 1_048_576, ge=1024, le=1 << 30)
    # Requests one worker serves at once (probes and metrics aside); more get 503 `overloaded`. A request counts
    # once its body has arrived.
    max_in_flight: int = Field(64, ge=1, le=100_000)
    # The threads a worker computes its analyses and database calls in (AnyIO's pool, 40 by default). The
    # interpreter runs one at a time, and each thread more makes the event loop wait longer for its turn: under 48
    # heavy requests on one worker /healthz took up to 6.6 s with 8 threads, 2.0 s with 4 and 0.14 s with 2
    # (tests/reliability/test_probes_under_saturation.py). Two keep one computing while the other waits on the
    # database; scale with workers, not threads.
    worker_threads: int = Field(2, ge=1, le=256)
    # Calls that may wait for one of those threads before the worker is saturated (503 `overloaded`, and /readyz
    # 503): a queue of a few turns, not of seconds.
    max_queued_work: int = Field(32, ge=1, le=100_000)
    # A body still arriving after this long is answered 408: a slow upload holds a connection, not a slot.
    body_timeout_s: float = Field(10.0, gt=0, le=3600)
    # What one request may compute: the long loops stop past it with 503 `deadline_exceeded` (and when the client
    # has gone, they stop at once).
    request_deadline_s: float = Field(30.0, gt=0, le=3600)
    # What one request may compute, in CPU seconds measured between the loops' checks (a batch's items, a plan's
    # search): past it the work stops as at the deadline. A batch's units are an estimate before it runs; this is
    # what it spends.
    request_cpu_s: float = Field(10.0, gt=0, le=3600)
    # On SIGTERM, how long requests in flight may take to finish before they are stopped (answered 503
    # `shutting_down` with Retry-After).
    graceful_shutdown_s: int = Field(10, ge=0, le=3600)
    # Anonymous reads (no writer token) of one client address share a budget of CPU seconds that refills at this
    # many a second, up to anonymous_burst_s; past it, 429 with Retry-After. 0 turns it off (behind a proxy every
    # client has the proxy's address: rate-limit there instead).
    anonymous_cpu_s_per_s: float = Field(1.0, ge=0, le=1e6)
    anonymous_burst_s: float = Field(60.0, gt=0, le=1e6)
    # The share of successful (1xx-3xx) requests that get an access-log line; errors always do. 1 logs every
    # request; a scheduler's hot path can set 0.01 (one line in a hundred) and read /metrics for the rest.
    access_log_sample: float = Field(1.0, ge=0.0, le=1.0)
    # FastAPI's own OpenTelemetry instrumentation (traces, metrics and logs to a configured provider). Off: the
    # service exports Prometheus metrics and JSON logs of its own, and unconfigured the instrumentation still
    # looks its providers up on every request.
    opentelemetry: bool = False
    # The hot analyses' valid requests answered without FastAPI's routing (service/api/hot_path.py); off, every
    # request takes the routes' path.
    hot_path: bool = True
    # How long a write's Idempotency-Key holds its answer: a retry after this is a new write, and the key's row is
    # deleted (service/api/idempotency.py).
    idempotency_ttl_s: float = Field(86_400.0, gt=0, le=30 * 86_400)

    @field_validator("api_tokens")
    @classmethod
    def _readable_tokens(cls, value: str) -> str:
        parse_tokens(value)
        return value

    def writer_tokens(self) -> dict[bytes, str]:
        """SHA-256 of each writer token -> its label."""
        return parse_tokens(self.api_tokens)


def scope_writer(tokens: dict[bytes, str], scope) -> str | None:
    """The label of the writer token an ASGI request's Authorization header carries, or None."""
    authorization = next((value for name, value in scope["headers"] if name == b"authorization"), b"")
    return bearer_label(tokens, authorization)


def bearer_label(tokens: dict[bytes, str], authorization: bytes) -> str | None:
    """The label of the writer token an Authorization header's bearer credentials are, or None."""
    scheme, _, offered = authorization.decode("latin-1").partition(" ")
    offered = offered.strip()
    return token_label(tokens, offered) if scheme.lower() == "bearer" and offered else None


def token_label(tokens: dict[bytes, str], offered: str) -> str | None:
    """The label of the writer token `offered` is, or None. Every configured token is compared in constant time
    (hashes of equal length), so neither the time taken nor a log reveals how much of a guess was right."""
    digest = hashlib.sha256(offered.encode()).digest()
    label = None
    for known, known_label in tokens.items():
        if hmac.compare_digest(digest, known):
            label = known_label
    return label


@lru_cache
def get_settings() -> Settings:
    return Settings()
