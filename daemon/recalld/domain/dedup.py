"""What makes two records of a kind the same: each kind's rule for the ``content_hash`` the
store's dedup index holds, in one place, for the writers and for import alike (an imported
record dedups later writes exactly as a stored one does)."""

from __future__ import annotations

from .ids import content_hash
from .policy import lesson_key

__all__ = ["episode_digest", "experience_digest", "lesson_digest", "memory_digest", "rollup_digest"]


def memory_digest(text: str) -> bytes:
    return content_hash("memory", text)


def lesson_digest(text: str) -> bytes:
    return content_hash("lesson", lesson_key(text))


def episode_digest(
    agent: str, session: str | None, ts: float, tool: str | None, status: str, summary: str
) -> bytes:
    """The same event reported twice is stored once; the same words at another time are
    another episode."""
    return content_hash(
        "episode", "\0".join((agent, session or "", repr(ts), tool or "", status, summary))
    )


def experience_digest(
    description: str, status: str, strategy: str | None, session: str | None
) -> bytes:
    return content_hash(
        "experience", "\0".join((description, status, strategy or "", session or ""))
    )


def rollup_digest(session: str) -> bytes:
    """A rolled-up experience is named by its session: a record_experience of the same words
    is another experience, and an update does not change what identifies this one."""
    return content_hash("experience", f"rollup\0{session}")
