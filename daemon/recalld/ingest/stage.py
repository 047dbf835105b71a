"""The ingest stage: every write request is sanitised and trust-scored here, once, before a
write job is built from it.

Sanitising (``sanitize``: free text redacted, a secret in an identifier refused) follows the
protocol's declarations, so a new field is covered by declaring it. Trust scoring follows
:data:`_TRUST`: which text of a request is judged, as one text. Both are linear in the
request's size; a request whose strings total more than :data:`INLINE_CHARS` is processed in
a worker thread, a small one inline: handing it to a thread costs more (~0.2 ms) than the
work, and the work is bounded (a few milliseconds at that size, whatever the text).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import msgspec
from recall_client import protocol as p

from ..domain.policy import Assessment
from .sanitize import sanitize
from .trust import score

__all__ = ["INLINE_CHARS", "Ingested", "ingest", "inline", "run"]

INLINE_CHARS = 1_024


@dataclass(slots=True)
class Ingested:
    """A write request after the ingest stage."""

    request: Any
    # Kinds of secret redacted from it, sorted, each once.
    redacted: list[str] = field(default_factory=list)
    # The trust of its text, where the request carries one (see _TRUST).
    trust: Assessment | None = None
    # Of each lesson it brings (record_experience, roll-ups).
    lesson_trust: list[Assessment] = field(default_factory=list)


def _episode(req: p.CaptureEpisode) -> Assessment:
    text = req.summary if req.error_code is None else f"{req.summary}\n{req.error_code}"
    return score(text, req.source)


def _experience(req: p.RecordExperience) -> Assessment:
    return score(f"{req.description}\n{req.strategy or ''}")


# The text of a request that trust scoring judges.
_TRUST: dict[type, Callable[[Any], Assessment]] = {
    p.MemoryStore: lambda req: score(req.text, req.source, req.authority),
    p.CaptureEpisode: _episode,
    p.RecordExperience: _experience,
}


def ingest(req: p.Request) -> Ingested:
    """Sanitise and score ``req`` (CPU work; see :func:`run`).

    Raises:
        RecallError: ``invalid_request`` when an identifier holds a secret.
    """
    cleaned = sanitize(req)
    request = cleaned.request
    judge = _TRUST.get(type(request))
    lessons = getattr(request, "lessons", None)
    return Ingested(
        request=request,
        redacted=cleaned.redacted,
        trust=judge(request) if judge is not None else None,
        lesson_trust=[score(text) for text in lessons] if isinstance(lessons, list) else [],
    )


def _size(req: p.Request) -> int:
    # The encoded size bounds the strings' total; encoding is far cheaper than the scan.
    return len(msgspec.msgpack.encode(req))


def inline(req: p.Request) -> bool:
    """Whether ``req`` is small enough to be ingested on the event loop."""
    return _size(req) <= INLINE_CHARS


async def run(req: p.Request, limiter: anyio.CapacityLimiter) -> Ingested:
    """:func:`ingest`, in a worker thread unless ``req`` is small."""
    if inline(req):
        return ingest(req)
    return await anyio.to_thread.run_sync(ingest, req, limiter=limiter)
