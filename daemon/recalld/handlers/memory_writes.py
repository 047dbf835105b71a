"""memory_store, memory_update and memory_fact_resolve as use cases over the port: replay,
dedup, supersession and contest, trust, what changed, decided here by the policy; the store
only reads and writes rows. Each runs inside the writer's transaction (a job's ``apply``)
and answers the reply.
"""

from __future__ import annotations

from recall_client import protocol as p

from ..domain.dedup import memory_digest
from ..domain.drift import scrape_paths
from ..domain.ids import new_id
from ..domain.policy import (
    Assessment,
    FactView,
    decide_fact,
    held_for,
    record_visibility,
    subject_key,
)
from ..domain.principal import Principal
from ..errors import RecallError
from ..ingest.trust import score
from ..store.port import MemoryChange, MemoryInsert, NewRecord, WriteTx

__all__ = ["resolve_fact", "store_memory", "update_memory"]


def store_memory(
    tx: WriteTx,
    who: Principal,
    req: p.MemoryStore,
    *,
    repo: str | None,
    commit: str | None,
    trust: Assessment,
    now: float,
) -> tuple[p.MemoryStored, int | None]:
    """Store one memory, or answer with the one a replayed key or the same text wrote;
    returns the reply and the new row, if one was written.

    Raises:
        RecallError: ``not_found`` for a supersedes or depends_on naming no live memory.
    """
    earlier = tx.records.replayed(who, req.idempotency_key)
    if earlier is not None:
        return _existing(req, earlier, "replayed"), None
    tx.memories.require_live(req.supersedes, "supersedes")
    workspace = who.workspace
    digest = memory_digest(req.text)
    same = tx.memories.find_duplicate(workspace, digest)
    if same is not None:
        tx.records.remember_key(who, req.idempotency_key, same, now)
        return _existing(req, same, "duplicate"), None
    tx.memories.require_live([d.id for d in req.depends_on], "depends_on")

    record_id = new_id("mem")
    ts = req.ts if req.ts is not None else now
    origin = None if req.global_scope or workspace == "/" else workspace
    key = subject_key(req.subject) if req.subject else None
    visibility = record_visibility(req.visibility)
    paths = _paths(req.text, req.paths)
    rowid = tx.memories.insert(
        MemoryInsert(
            NewRecord(
                id=record_id,
                kind="memory",
                ts=ts,
                created_at=now,
                workspace=workspace,
                agent=who.agent,
                uid=who.uid,
                session=req.session or who.session,
                source=req.source,
                text=req.text,
                content_hash=digest,
                tags=req.tags,
                trust=trust.trust,
                eligibility=trust.eligibility,
                expires_at=now + req.ttl_s if req.ttl_s is not None else None,
                visibility=visibility,
            ),
            trust_reasons=trust.reasons,
            memory_kind=req.kind,
            subject=req.subject,
            subject_key=key,
            authority=req.authority,
            distortion_tolerance=req.distortion_tolerance,
            origin=origin,
            origin_repo=repo,
            origin_commit=commit,
            writer_client=who.client or None,
            writer_model=who.model,
            labels={"scope": req.scopes, "band": req.bands, "episode": req.episodes},
            paths=paths,
            depends_on=[(d.id, d.note) for d in req.depends_on],
            held=held_for(req.source),
        )
    )
    superseded = list(req.supersedes)
    for target in superseded:
        tx.memories.note_supersedes(rowid, record_id, target)
    action = "superseded" if superseded else "inserted"
    contested_with: list[str] = []
    if key is not None and not trust.blocked:
        # Decided among facts of its own visibility: a private fact must not supersede or
        # contest a team fact (its other readers would see it replaced or disputed by one
        # they cannot see), and a team fact is decided among team facts, which every member
        # sees, so both see both contenders. A reader seeing a team and a private fact
        # current on one subject is shown them as contested.
        others = [
            f
            for f in tx.memories.lock_facts(key, origin, now)
            if f.rowid != rowid and f.visibility == visibility
        ]
        decision = decide_fact(
            req.authority,
            ts,
            [FactView(f.id, f.authority, f.ts) for f in others],
            explicit=bool(superseded),
        )
        action, contested_with = decision.action, list(decision.contested_with)
        if decision.history_of is not None:
            # About an earlier time than the current answer: history from the start.
            tx.memories.supersede(rowid, decision.history_of)
        for f in others:
            if f.id in decision.supersedes:
                tx.memories.supersede(f.rowid, record_id)
        superseded += decision.supersedes
    tx.memories.event(who, record_id, "stored", now)
    tx.records.remember_key(who, req.idempotency_key, record_id, now)
    return p.MemoryStored(
        record_id=record_id,
        duplicate=False,
        replayed=False,
        kind=req.kind,
        action=action,
        subject=req.subject,
        superseded=superseded,
        contested=bool(contested_with),
        contested_with=contested_with,
        authority=req.authority,
        trust=trust.trust,
        cited_paths=list(paths),
        origin_repo=repo,
        origin_commit=commit,
    ), rowid


def _existing(req: p.MemoryStore, record_id: str, action: str) -> p.MemoryStored:
    """The reply naming a memory stored before: by a replayed key, or with the same text."""
    return p.MemoryStored(
        record_id=record_id,
        duplicate=action == "duplicate",
        replayed=action == "replayed",
        kind=req.kind,
        action=action,
        subject=req.subject,
        superseded=[],
        contested=False,
        authority=req.authority,
        trust=1.0,
        cited_paths=[],
    )


def _paths(text: str, named: list[str]) -> dict[str, int]:
    """The paths a memory cites: those its writer named are claim-anchored (1), those its
    text mentions are evidence (0)."""
    paths = dict.fromkeys(scrape_paths(text), 0)
    paths.update(dict.fromkeys(named, 1))
    return paths


def update_memory(
    tx: WriteTx, who: Principal, req: p.MemoryUpdate, head: str | None, now: float
) -> tuple[p.MemoryChanged, int | None]:
    """Correct a memory in place (an update is also a verification); returns the reply and
    the row to embed again when its text changed.

    Raises:
        RecallError: ``not_found`` for a memory or a depends_on that is not live;
            ``invalid_request`` for a subject of an entry or a text another memory has.
    """
    target = tx.memories.target(req.memory_id)
    change = MemoryChange()
    changed: list[str] = []
    if req.subject is not None:
        if target.kind != "fact":
            raise RecallError("invalid_request", "subject applies to facts")
        change.subject, change.subject_key = req.subject, subject_key(req.subject)
        changed.append("subject")
    text = target.text
    if req.text is not None:
        text = req.text
        digest = memory_digest(text)
        clash = tx.memories.find_duplicate(target.workspace, digest, besides=target.rowid)
        if clash is not None:
            raise RecallError("invalid_request", f"memory {clash} already has this text")
        change.text, change.content_hash = text, digest
        changed.append("text")
    source = target.source
    if req.source is not None:
        source = change.source = req.source
        change.held = held_for(source)
        changed.append("source")
    authority = target.authority
    if req.authority is not None:
        authority = change.authority = req.authority
        changed.append("authority")
    if {"text", "source", "authority"} & set(changed):
        change.trust = score(text, source, authority or "first-party")
    if req.tags is not None:
        change.tags = req.tags
        changed.append("tags")
    for name, values in (("scope", req.scopes), ("band", req.bands), ("episode", req.episodes)):
        if values is not None:
            change.labels[name] = values
            changed.append(f"{name}s")
    if req.distortion_tolerance is not None:
        unpinned = req.distortion_tolerance == "none"
        change.distortion_tolerance = (None if unpinned else req.distortion_tolerance,)
        changed.append("distortion_tolerance")
    if req.depends_on is not None:
        tx.memories.require_live([d.id for d in req.depends_on], "depends_on")
        change.depends_on = [(d.id, d.note) for d in req.depends_on]
        changed.append("depends_on")
    if req.paths is not None or "text" in changed:
        named = req.paths if req.paths is not None else tx.memories.anchored_paths(target.rowid)
        change.paths = _paths(text, named)
        if req.paths is not None:
            changed.append("paths")
    if req.ttl_s is not None:
        change.expires_at = now + req.ttl_s
        changed.append("ttl_s")
    tx.memories.change(target.rowid, change, head, now)
    tx.memories.event(who, req.memory_id, "updated", now)
    return p.MemoryChanged(
        memory_id=req.memory_id,
        updated_at=now,
        last_verified_at=now,
        verified_commit=head,
        changed=changed,
    ), target.rowid if "text" in changed else None


def resolve_fact(
    tx: WriteTx, who: Principal, req: p.MemoryFactResolve, now: float
) -> p.FactResolved:
    """Settle a contested subject: one fact stays current, the others are superseded.

    Raises:
        RecallError: ``invalid_request`` for a keep_id that is not one of the contenders.
    """
    key = subject_key(req.subject)
    facts = tx.memories.lock_facts(key, who.workspace, now)
    if len(facts) < 2:
        facts = tx.memories.lock_facts(key, None, now)
    if len(facts) < 2:
        return p.FactResolved(resolved=False, subject=req.subject, reason="no_contender")
    if req.keep_id is not None:
        chosen = [f for f in facts if f.id == req.keep_id]
        if not chosen:
            raise RecallError(
                "invalid_request",
                f"{req.keep_id} is not one of the contested facts on {req.subject!r}: "
                + ", ".join(f.id for f in facts),
            )
        winner = chosen[0]
    else:
        # facts are oldest first: the incumbent, then the contenders.
        winner = facts[-1] if req.accept else facts[0]
    # A private winner leaves team facts current: the team's answer changes only by a team
    # fact, not by a choice other members cannot see.
    losers = [
        f
        for f in facts
        if f.rowid != winner.rowid and (winner.visibility == "team" or f.visibility == "private")
    ]
    for f in losers:
        tx.memories.supersede(f.rowid, winner.id)
    tx.memories.change(winner.rowid, MemoryChange(), None, now)  # updated and verified now
    tx.memories.event(who, winner.id, "resolved", now)
    return p.FactResolved(
        resolved=True,
        subject=req.subject,
        accepted=req.accept if req.accept is not None else winner.rowid != facts[0].rowid,
        current=winner.id,
        current_text=winner.text,
        superseded=[f.id for f in losers],
    )
