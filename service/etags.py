"""Entity tags of stored answers: a strong `ETag` and `If-None-Match` revalidation.

Owns: `entity_tag(body)` (the SHA-256 of the exact bytes answered, in quotes: a strong
validator, RFC 9110 section 8.8.3, since equal tags mean equal bytes), `matches(header,
tag)` (the weak comparison `If-None-Match` uses, section 13.1.2: `W/` ignored, `*` matches
any), `tagged(response, if_none_match)` (the answer with its `ETag` and `Cache-Control:
no-cache`, or a bodiless 304 with the same two headers when the client holds that
version), and the `IfNoneMatch` header parameter and `NOT_MODIFIED` OpenAPI entry the
routes declare. The answers tagged are those of stored plans (the plan, its pictures and
trace), pure functions of the stored row. Must not: read the store or build bodies.
"""

import hashlib
import re
from typing import Annotated, Any

from fastapi import Header, Response

_TAG = re.compile(r'\s*(?:W/)?("[\x21\x23-\x7e\x80-\xff]*")\s*(?:,|$)')

NOT_MODIFIED: dict[int | str, dict[str, Any]] = {304: {
    "description": "Not modified: the `If-None-Match` header names this answer's ETag; no "
                   "body.",
    "headers": {"ETag": {"description": "The answer's strong entity tag.",
                         "schema": {"type": "string"}}}}}
"""The OpenAPI entry of the 304 answer."""

ETAG_HEADER = {"ETag": {"description": "Strong entity tag of this answer (the SHA-256 of its "
                        "bytes); send it back in If-None-Match to get 304 while it holds.",
                        "schema": {"type": "string"}}}
"""The OpenAPI header entry of a tagged 200 answer."""

IfNoneMatch = Annotated[str | None, Header(
    description="ETags of the copies the client holds (from earlier answers' ETag "
                "headers): when one is this answer's, the answer is 304 with no body.",
    examples=['"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"'],
    max_length=8192)]
"""The `If-None-Match` request header parameter."""


def entity_tag(body: bytes) -> str:
    """The strong entity tag of `body`: its SHA-256 in hexadecimal, quoted."""
    return f'"{hashlib.sha256(body).hexdigest()}"'


def matches(if_none_match: str | None, tag: str) -> bool:
    """Whether an `If-None-Match` value names `tag` (weak comparison, RFC 9110 13.1.2);
    `*` names any. A malformed list names nothing."""
    if if_none_match is None:
        return False
    value = if_none_match.strip()
    if value == "*":
        return True
    position = 0
    while position < len(value):
        found = _TAG.match(value, position)
        if found is None:
            return False
        if found.group(1) == tag:
            return True
        position = found.end()
    return False


def tagged(response: Response, if_none_match: str | None) -> Response:
    """`response` with its `ETag` and `Cache-Control: no-cache` (caches keep it but ask
    again), or a 304 with those headers when `if_none_match` names its tag."""
    tag = entity_tag(bytes(response.body))
    headers = {"ETag": tag, "Cache-Control": "no-cache"}
    if matches(if_none_match, tag):
        return Response(status_code=304, headers=headers)
    response.headers.update(headers)
    return response


__all__ = ["ETAG_HEADER", "NOT_MODIFIED", "IfNoneMatch", "entity_tag", "matches", "tagged"]
