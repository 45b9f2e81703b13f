"""Log configuration for every Corral process: plain tracebacks, and no secret ever written.

structlog's default renderer prints rich tracebacks *with local variables*: request headers (API keys,
the agent token) and request bodies (env values) then end up in the log.  Here tracebacks are plain
text, and every rendered line goes through a redactor for keys, tokens and bearer credentials.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Iterable, MutableMapping
from typing import Any

import structlog

_PATTERNS = [
    re.compile(r"crl_[A-Za-z0-9_\-]{8,}"),
    re.compile(r"(?i)(bearer\s+)[^\s'\",}]+"),
    re.compile(r"(?i)((?:token|api_key|password|secret)['\"]?\s*[:=]\s*['\"]?)[^\s'\",}]+"),
]
_known: set[str] = set()


def add_secret(*values: str) -> None:
    """Values this process knows to be secret (its agent token, its admin key): always redacted."""
    _known.update(v for v in values if v and len(v) >= 6)


def redact(text: str) -> str:
    for secret in _known:
        text = text.replace(secret, "[REDACTED]")
    for pattern in _PATTERNS:
        text = pattern.sub(lambda m: (m.group(1) if m.groups() else "") + "[REDACTED]", text)
    return text


def _redact_event(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    for key, value in list(event.items()):
        if isinstance(value, str):
            event[key] = redact(value)
        elif not isinstance(value, int | float | bool | type(None)):
            event[key] = redact(repr(value))
    return event


class _RedactingFilter(logging.Filter):
    """For stdlib loggers (uvicorn, sqlalchemy, httpx): the same redaction on their messages."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "uvicorn.error" and str(record.msg).startswith("Exception in ASGI application"):
            return False  # the API's own handler has logged it once already
        record.msg = redact(record.getMessage())
        record.args = ()
        if record.exc_info:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        return True


def configure(secrets: Iterable[str] = ()) -> None:
    add_secret(*secrets)
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,  # plain text: never the locals of a frame
            _redact_event,
            structlog.dev.ConsoleRenderer(colors=False, exception_formatter=structlog.dev.plain_traceback),
        ],
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_RedactingFilter())
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(logging.WARNING)
