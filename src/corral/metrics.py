"""Prometheus counters (DESIGN §5 "Visibility"); per process, scraped at /metrics."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

RETRY_SCHEDULED = Counter("corral_session_retry_scheduled", "Retries the engine created, by cause", ["cause"])
RETRY_EXHAUSTED = Counter(
    "corral_session_retry_exhausted", "Chains whose retries were used up, by cause", ["cause"]
)
RETRY_SUCCEEDED = Counter("corral_session_retry_succeeded", "Retried chains that ended in success")
RETRY_ALREADY_DECIDED = Counter(
    "corral_retry_already_decided",
    "Ended attempts read undecided that another manager decided before this one could claim them",
)
RETRY_DECISIONS = Counter(
    "corral_retry_decisions", "Decisions the retry engine took, by policy and verdict", ["policy", "decision"]
)
DB_CONNECTIONS_OPENED = Counter(
    "corral_db_connections_opened",
    "PostgreSQL connections this process opened (its pool's, and one to migrate at start); rising"
    " under a steady load means CORRAL_DB_POOL_SIZE is too small",
)
STREAM_SUBSCRIBERS = Gauge(
    "corral_event_stream_subscribers", "Clients reading /events/stream from this manager"
)
STREAM_RESYNCS = Counter(
    "corral_event_stream_resyncs", "Stream clients told to resync: they fell a whole queue behind"
)
WEBHOOK_DELIVERIES = Counter(
    "corral_webhook_deliveries",
    "Webhook delivery attempts by result: delivered (2xx), failed (an answer or no answer), refused"
    " (a private address), gone (410: the webhook is disabled)",
    ["result"],
)
WEBHOOK_SECONDS = Histogram(
    "corral_webhook_delivery_seconds",
    "From a delivery attempt's start to its receiver's answer",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 15),
)
WEBHOOK_BACKLOG = Gauge(
    "corral_webhook_backlog",
    "Events a webhook has not yet been delivered (as its deliverer last read; up to 1000)",
    ["webhook"],
)
SERVE_REQUESTS = Counter(
    "corral_serve_requests",
    "Requests through /serve/{deployment}/ by the status answered (502: no replica answered, 503:"
    " none in traffic)",
    ["deployment", "code"],
)
SERVE_SECONDS = Histogram(
    "corral_serve_request_seconds",
    "From a /serve request's arrival to its replica's response headers",
    ["deployment"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10),
)
ROUTES = Gauge(
    "corral_routes",
    "A deployment's routes by status (as the last deployment cycle left them)",
    ["deployment", "status"],
)
