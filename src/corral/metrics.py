"""Prometheus counters (DESIGN §5 "Visibility"); per process, scraped at /metrics."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

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
