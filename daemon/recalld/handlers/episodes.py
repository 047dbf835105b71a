"""Work episodes (seed 001): capture, verdicts, and work_search.

An episode is captured ``pending``: the ingest stage redacted and trust-scored it, capture
chains it to its session's previous episode, and the evaluation actor settles it by the
policy (:func:`recalld.domain.policy.settle_episode`). ``blocked`` and ``ineligible`` are
final; a later verdict does not reopen them. work_search reads under the reader contract of
:mod:`recalld.retrieval.work_reader`.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Literal

from recall_client import protocol as p

from ..domain.dedup import episode_digest
from ..domain.ids import new_id
from ..domain.policy import Assessment
from ..domain.principal import Principal
from ..errors import RecallError
from ..pipeline.intake import RequestJob
from ..retrieval import work_reader
from ..store.port import EpisodeInsert, NewRecord, WriteTx
from .services import Services

__all__ = ["capture", "capture_episode", "capture_job", "judge", "search", "set_verdict"]


def capture_episode(
    tx: WriteTx, who: Principal, req: p.CaptureEpisode, trust: Assessment, now: float
) -> tuple[p.EpisodeCaptured, int | None]:
    """Store one episode, chained to its session's previous one and ``pending`` (the
    evaluation actor settles it), or answer with the one a replayed key or the same event
    wrote; returns the reply and the new row, if one was written.

    Raises:
        RecallError: ``invalid_request`` for a key that wrote a record other than an episode.
    """
    earlier = tx.records.replayed(who, req.idempotency_key)
    if earlier is not None:
        return _existing(tx, earlier, replayed=True), None
    workspace = who.workspace
    status = req.status.strip().lower()
    ts = req.ts if req.ts is not None else now
    # The same event reported twice is stored once; the same words at another time are
    # another episode.
    digest = episode_digest(who.agent, req.session_id, ts, req.tool, status, req.summary)
    same = tx.episodes.find_duplicate(workspace, digest)
    if same is not None:
        tx.records.remember_key(who, req.idempotency_key, same, now)
        return _existing(tx, same, duplicate=True), None
    prev_id = None
    if req.session_id is not None:
        prev_id = tx.episodes.lock_session(workspace, req.session_id, who.agent, who.uid)
    record_id = new_id("ep")
    rowid = tx.episodes.insert(
        EpisodeInsert(
            NewRecord(
                id=record_id,
                kind="episode",
                ts=ts,
                created_at=now,
                workspace=workspace,
                agent=who.agent,
                uid=who.uid,
                session=req.session_id,
                source=req.source,
                text=req.summary,
                content_hash=digest,
                tags=req.tags,
                trust=trust.trust,
                expires_at=now + req.ttl_s if req.ttl_s is not None else None,
            ),
            blocked=trust.blocked,
            channel=req.channel,
            episode_type=req.episode_type,
            tool=req.tool,
            status=status,
            error_code=req.error_code,
            duration_ms=req.duration_ms,
            result_size=req.result_size,
            task_result=req.task_result,
            verdict_at=now if req.task_result is not None else None,
            prev_id=prev_id,
            files=list(dict.fromkeys(req.files)),
        )
    )
    tx.records.remember_key(who, req.idempotency_key, record_id, now)
    return p.EpisodeCaptured(
        record_id=record_id, prev_id=prev_id, trust=trust.trust, blocked=trust.blocked
    ), rowid


def _existing(
    tx: WriteTx, record_id: str, *, duplicate: bool = False, replayed: bool = False
) -> p.EpisodeCaptured:
    """The reply naming an episode stored before: by a replayed key, or the same event."""
    row = tx.read.episodes.find(record_id)
    if row is None:
        raise RecallError(
            "invalid_request",
            f"idempotency_key was already used for {record_id}, which is not an episode",
        )
    return p.EpisodeCaptured(
        record_id=record_id,
        prev_id=row.prev_id,
        eligibility=row.eligibility,
        trust=row.trust,
        blocked=row.blocked,
        duplicate=duplicate,
        replayed=replayed,
    )


def judge(
    tx: WriteTx, who: Principal, req: p.WorkResult, now: float
) -> tuple[p.VerdictSet, list[int]]:
    """Set the verdict of one episode or a whole session of the caller's workspace (as
    work_search shows them); returns the reply and the rows it changed (episodes waiting
    for this verdict can settle now). Another workspace's episode or session is not found,
    exactly as one that does not exist.

    Raises:
        RecallError: ``not_found``.
    """
    agent = None if req.any_caller else who.agent
    found = tx.episodes.verdict_targets(
        who.workspace, who.uid, agent, req.episode_id, req.session_id
    )
    if not found:
        what = f"episode {req.episode_id}" if req.episode_id else f"session {req.session_id}"
        whose = "" if req.any_caller else f" of agent {who.agent!r}"
        raise RecallError("not_found", f"no {what}{whose} in workspace {who.workspace} to judge")
    verdict_at = req.verdict_at if req.verdict_at is not None else now
    # Re-sending the same verdict changes nothing (not even verdict_at).
    changed = [rowid for rowid, current in found if current != req.task_result]
    tx.episodes.set_verdict(changed, req.task_result, verdict_at, now)
    return p.VerdictSet(
        task_result=req.task_result,
        verdict_at=verdict_at,
        matched=len(found),
        updated=len(changed),
    ), changed


class _Capture(RequestJob[p.EpisodeCaptured]):
    __slots__ = ()

    def apply(self, tx: WriteTx, now: float) -> p.EpisodeCaptured:
        assert self.clean.trust is not None
        reply, rowid = capture_episode(
            tx, self.principal, self.clean.request, self.clean.trust, now
        )
        if rowid is not None:
            self.new_rowids.append(rowid)
        # Kinds of secret the ingest stage redacted from the episode, e.g. ["aws_key"].
        reply.redacted = self.clean.redacted
        return reply


class _Verdict(RequestJob[p.VerdictSet]):
    __slots__ = ()

    def apply(self, tx: WriteTx, now: float) -> p.VerdictSet:
        reply, changed = judge(tx, self.principal, self.clean.request, now)
        # Wakes the evaluation actor: episodes waiting for this verdict can settle now.
        self.new_rowids.extend(changed)
        return reply


def capture_job(services: Services, who: Principal, req: p.CaptureEpisode) -> _Capture:
    """capture_episode's write job (nothing to read before it)."""
    return _Capture(who, req)


async def capture(services: Services, who: Principal, req: p.CaptureEpisode) -> p.EpisodeCaptured:
    """capture_episode; returns once it has committed."""
    return await services.write(capture_job(services, who, req))


async def set_verdict(services: Services, who: Principal, req: p.WorkResult) -> p.VerdictSet:
    """work_result: judge one episode or a session.

    Raises:
        RecallError: ``not_found``.
    """
    return await services.write(_Verdict(who, req))


def _response_format(services: Services, req: p.WorkSearch) -> Literal["concise", "detailed"]:
    if req.response_format is not None:
        return req.response_format
    if req.verbosity is not None:
        return "concise" if req.verbosity == "terse" else "detailed"
    return services.settings().response_format


async def search(services: Services, who: Principal, req: p.WorkSearch) -> p.WorkSearchResult:
    """work_search under the reader contract.

    Raises:
        RecallError: ``busy`` / ``unavailable``.
    """
    started = time.perf_counter()
    # Without a model, or when it fails, the search degrades to lexical.
    async with services.query_vector(req.query if req.semantic else None) as qvec:
        result: p.WorkSearchResult = await services.read(
            partial(
                work_reader.search,
                who=who,
                req=req,
                qvec=qvec,
                response_format=_response_format(services, req),
            )
        )
    result.took_ms = round((time.perf_counter() - started) * 1000, 3)
    return result
