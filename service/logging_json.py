"""JSON log lines, each carrying the id of the request it was written for.

Owns: `REQUEST_ID` (the context variable the request-id middleware sets; the solver pool
and the store gate carry it onto their threads), `JsonFormatter` (one JSON object per
record: `time` in UTC ISO 8601, `level`, `logger`, `message`, `request_id`, null outside a
request, and for uvicorn's access log the `client`, `method`, `path`, `http_version` and
`status` as fields; an exception's traceback as `exception`), `install_json_logging(level)`
(for an app built outside `serve`: a JSON handler on the root logger when it has none) and
`uvicorn_log_config(level)` (what `serve` hands uvicorn, so its own and its access log
lines are JSON too, in every worker). Must not: decide what is logged.
"""

import json
import logging
import sys
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

REQUEST_ID: ContextVar[str | None] = ContextVar("atlas_request_id", default=None)
"""The id of the request being handled (the `X-Request-ID` answered), None outside one."""

_ACCESS_ARGS = ("client", "method", "path", "http_version", "status")
"""The fields of uvicorn's access record, in the order of its `args`
(`'%s - "%s %s HTTP/%s" %d'`, uvicorn/protocols/http/h11_impl.py)."""


class JsonFormatter(logging.Formatter):
    """Formats a record as one line of JSON (no newline inside: messages are escaped)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(
                timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", None) or REQUEST_ID.get(),
        }
        if record.name == "uvicorn.access" and isinstance(record.args, tuple) \
                and len(record.args) == len(_ACCESS_ARGS):
            line.update(zip(_ACCESS_ARGS, record.args, strict=True))
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        return json.dumps(line, ensure_ascii=False, default=str)


def install_json_logging(level: str) -> None:
    """Write JSON lines to stderr from the root logger unless the host (uvicorn under
    `serve`, pytest) already set handlers; `service` loggers at `level`."""
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(JsonFormatter())
        root.addHandler(handler)
        root.setLevel(logging.WARNING)
    logging.getLogger("service").setLevel(level.upper())


def uvicorn_log_config(level: str) -> dict[str, Any]:
    """A `logging.config.dictConfig` dictionary (uvicorn's `log_config`): every logger,
    uvicorn's error and access logs and the root, writes JSON lines to stderr."""
    handler = {"class": "logging.StreamHandler", "formatter": "json",
               "stream": "ext://sys.stderr"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": JsonFormatter}},
        "handlers": {"json": handler},
        "loggers": {
            "uvicorn": {"handlers": ["json"], "level": level.upper(), "propagate": False},
            "uvicorn.error": {"level": level.upper()},
            "uvicorn.access": {"handlers": ["json"], "level": level.upper(),
                               "propagate": False},
        },
        "root": {"handlers": ["json"], "level": "WARNING"},
    }


__all__ = ["REQUEST_ID", "JsonFormatter", "install_json_logging", "uvicorn_log_config"]
