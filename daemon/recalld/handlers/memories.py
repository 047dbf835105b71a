"""Memories and canonical facts: store, update, verify, record use, resolve, search, show.

Writes are jobs the pipeline runs after the ingest stage; memory_store and memory_update are
decided in :mod:`.memory_writes` (a fact's supersession or contest by the policy) in the
transaction that stores them, so the reply and any search after it already see the outcome.
Git look-ups (a workspace's top level and HEAD, read in-process) happen here, never on the
writer.
"""

from __future__ import annotations

import os
import time
from functools import partial

import anyio
import msgspec
from recall_client import protocol as p

from ..domain import use_tokens
from ..domain.drift import GitOrigin, cached_origin, git_head, git_origin
from ..domain.principal import Principal
from ..domain.scopes import ADMIN
from ..errors import RecallError
from ..pipeline.intake import RequestJob
from ..retrieval import learned_relevance
from ..retrieval import listing as browse
from ..retrieval.memory_detail import memory_detail
from ..store.port import WriteTx
from .memory_writes import resolve_fact, store_memory, update_memory
from .services import Services

__all__ = [
    "fact_resolve",
    "listing",
    "record_use",
    "search",
    "show",
    "store",
    "store_job",
    "update",
    "verify",
]


class _Store(RequestJob[p.MemoryStored]):
    __slots__ = ("origin",)

    def __init__(self, who: Principal, req: p.MemoryStore, origin: GitOrigin | None) -> None:
        super().__init__(who, req)
        self.origin = origin

    def apply(self, tx: WriteTx, now: float) -> p.MemoryStored:
        req = self.clean.request
        assert self.clean.trust is not None
        reply, rowid = store_memory(
            tx,
            self.principal,
            req,
            repo=self.origin.repo if self.origin else None,
            commit=req.origin_commit or (self.origin.commit if self.origin else None),
            trust=self.clean.trust,
            now=now,
        )
        if rowid is not None:
            self.new_rowids.append(rowid)
        return reply


class _Update(RequestJob[p.MemoryChanged]):
    __slots__ = ("head",)

    def __init__(self, who: Principal, req: p.MemoryUpdate, head: str | None) -> None:
        super().__init__(who, req)
        self.head = head

    def apply(self, tx: WriteTx, now: float) -> p.MemoryChanged:
        reply, reembed = update_memory(tx, self.principal, self.clean.request, self.head, now)
        if reembed is not None:
            # Its vector is replaced once the embedding actor has embedded the new text.
            self.new_rowids.append(reembed)
        return reply


class _Verify(RequestJob[p.MemoryChanged]):
    __slots__ = ("head",)

    def __init__(self, who: Principal, req: p.MemoryVerify, head: str | None) -> None:
        super().__init__(who, req)
        self.head = head

    def apply(self, tx: WriteTx, now: float) -> p.MemoryChanged:
        req: p.MemoryVerify = self.clean.request
        updated_at = tx.memories.verify(
            self.principal, req.memory_id, req.verified_paths, self.head, now
        )
        return p.MemoryChanged(
            memory_id=req.memory_id,
            updated_at=updated_at,
            last_verified_at=now,
            verified_commit=self.head,
            changed=["last_verified_at"] + (["verified_paths"] if req.verified_paths else []),
        )


class _RecordUse(RequestJob[p.UseRecorded]):
    __slots__ = ()

    def apply(self, tx: WriteTx, now: float) -> p.UseRecorded:
        req: p.MemoryRecordUse = self.clean.request
        targets: list[tuple[str, str | None]] = [(i, None) for i in req.memory_ids]
        outcome = req.outcome or "used"
        if req.use_token is not None:
            token = use_tokens.read(tx.read.memories.use_token_key(), req.use_token)
            targets.insert(0, (token.memory_id, token.nonce))
            _learn(tx, self.principal, token, outcome, now)
        recorded = tx.memories.record_uses(self.principal, targets, outcome, req.note, now)
        return p.UseRecorded(recorded=[p.RecordedUse(id=i, outcome=outcome) for i in recorded])


def _learn(
    tx: WriteTx, who: Principal, token: use_tokens.UseToken, outcome: str, now: float
) -> None:
    """One step of the caller's relevance calibrations (its own, and those of the memory's
    workspace, the store that served it) on the hit's evidence as it was served, in the
    outcome's transaction; a token teaches once (a later outcome of the same token overrides
    the record, not the lesson), and one without evidence not at all."""
    if token.evidence is None or tx.read.memories.token_outcome(token.nonce) not in (
        None,
        "injected",
    ):
        return
    memory = tx.read.memories.live([token.memory_id]).get(token.memory_id)
    if memory is None:
        return
    rows = tx.read.memories.calibrations(memory.workspace, who.uid)
    for row in learned_relevance.taught(
        rows, memory.workspace, who.uid, token.evidence, outcome, now
    ):
        tx.memories.save_calibration(row)


class _Resolve(RequestJob[p.FactResolved]):
    __slots__ = ()

    def apply(self, tx: WriteTx, now: float) -> p.FactResolved:
        return resolve_fact(tx, self.principal, self.clean.request, now)


def _check_origin_repo(req: p.MemoryStore, workspace: str, origin: GitOrigin | None) -> None:
    """A client may name the origin repository only as the one recalld itself finds for the
    workspace: drift is computed in that directory, so it must never be a path that only a
    client asserted.

    Raises:
        RecallError: ``invalid_request`` saying what recalld found instead.
    """
    if req.origin_repo is None:
        return
    if origin is None:
        raise RecallError(
            "invalid_request",
            f"origin_repo {req.origin_repo} was given, but workspace {workspace} is not in a "
            "git repository recalld can read; leave origin_repo unset",
        )
    if os.path.normpath(req.origin_repo) != origin.repo:
        raise RecallError(
            "invalid_request",
            f"origin_repo must be the git top level of workspace {workspace}, which is "
            f"{origin.repo}; leave it unset and recalld records it",
        )


def store_job(services: Services, who: Principal, req: p.MemoryStore) -> _Store | None:
    """memory_store's write job, when the workspace's git origin is known already (None
    when a repository must be read first, off the event loop: :func:`store`).

    Raises:
        RecallError: ``invalid_request`` for an origin_repo recalld does not find.
    """
    if req.global_scope:
        return _store_job(services, who, req, None)
    known, origin = cached_origin(who.path)
    return _store_job(services, who, req, origin) if known else None


def _store_job(
    services: Services, who: Principal, req: p.MemoryStore, origin: GitOrigin | None
) -> _Store:
    _check_origin_repo(req, who.path or who.workspace, origin)
    req = msgspec.structs.replace(req, visibility=services.visibility(req.visibility))
    return _Store(who, req, origin)


async def store(services: Services, who: Principal, req: p.MemoryStore) -> p.MemoryStored:
    """memory_store; durable when it returns.

    Raises:
        RecallError: invalid_request, not_found, busy or unavailable.
    """
    job = store_job(services, who, req)
    if job is None:
        origin = await anyio.to_thread.run_sync(git_origin, who.path)
        job = _store_job(services, who, req, origin)
    return await services.write(job)


async def _head_of(services: Services, memory_id: str) -> str | None:
    """HEAD of a memory's origin repository now: the new base for its commit drift."""
    repo: str | None = await services.read(lambda r: r.memories.origin_repo(memory_id))
    if repo is None:
        return None
    return await anyio.to_thread.run_sync(_head_if_there, repo)


def _head_if_there(repo: str) -> str | None:
    return git_head(repo) if os.path.isdir(repo) else None


async def update(services: Services, who: Principal, req: p.MemoryUpdate) -> p.MemoryChanged:
    """memory_update: correct a memory in place (also a verification)."""
    return await services.write(_Update(who, req, await _head_of(services, req.memory_id)))


async def verify(services: Services, who: Principal, req: p.MemoryVerify) -> p.MemoryChanged:
    """memory_verify: attest that a memory still holds."""
    return await services.write(_Verify(who, req, await _head_of(services, req.memory_id)))


async def record_use(services: Services, who: Principal, req: p.MemoryRecordUse) -> p.UseRecorded:
    """memory_record_use: what became of surfaced memories."""
    return await services.write(_RecordUse(who, req))


async def fact_resolve(
    services: Services, who: Principal, req: p.MemoryFactResolve
) -> p.FactResolved:
    """memory_fact_resolve: settle a contested subject."""
    return await services.write(_Resolve(who, req))


async def search(services: Services, who: Principal, req: p.MemorySearch) -> p.MemorySearchResult:
    """memory_search, on a search worker; the query is embedded meanwhile (the search waits
    for its vector only when its lexical channel is done).

    Raises:
        RecallError: ``invalid_request`` for contradictory flags; ``busy`` / ``unavailable``.
    """
    started = time.perf_counter()
    reader = services.memory
    async with services.query_vector(req.query if reader.wants_vector(req) else None) as qvec:
        result = await services.search_memories(who, req, qvec)
    result.took_ms = round((time.perf_counter() - started) * 1000, 3)
    return result


async def show(services: Services, who: Principal, req: p.MemoryShow) -> p.MemoryShown:
    """memory_show, on a search worker. Raises RecallError not_found / forbidden."""
    detail: p.MemoryDetail = await services.read(partial(memory_detail, who=who, req=req))
    return p.MemoryShown(memory=detail)


async def listing(services: Services, who: Principal, req: p.MemoryList) -> p.MemoryListResult:
    """memory_list, on a search worker: memories newest first under memory_search's contract.

    Raises:
        RecallError: ``invalid_request`` for a bad cursor or contradictory flags; ``busy`` /
            ``unavailable``.
    """
    result: p.MemoryListResult = await services.read(
        partial(browse.memories, who=who, req=req, every_count=ADMIN in who.scopes)
    )
    return result
