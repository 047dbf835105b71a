"""memory_show: one memory in full, with its links, contenders, drift and use outcomes."""

from __future__ import annotations

import time

from recall_client import protocol as p

from ..domain.principal import Principal
from ..errors import RecallError
from ..store.port import Reader
from .memory_rows import contender, contested_slots, core_of, instruction_flags, summary
from .staleness import Checkouts, staleness
from .use_outcomes import use_outcomes

__all__ = ["memory_detail"]


def memory_detail(reader: Reader, who: Principal, req: p.MemoryShow) -> p.MemoryDetail:
    """One memory in full. Raises RecallError not_found / forbidden."""
    now = time.time()
    row = reader.memories.live([req.memory_id]).get(req.memory_id)
    if row is None:
        raise RecallError("not_found", f"no memory {req.memory_id}")
    if row.eligibility == "blocked":
        raise RecallError("forbidden", f"memory {row.id} was blocked as unsafe to serve")
    memories = reader.memories
    outcomes = use_outcomes(reader, [row], now)[row.rowid]
    judged = staleness(
        row,
        now,
        Checkouts(reader, who),
        unresolved_contradiction=outcomes.unresolved_contradiction,
    )
    path_drift, anchored_missing, commit = (
        judged.path_drift,
        judged.anchored_missing,
        judged.commit,
    )
    links_out = memories.links_from(row.rowid)
    links_in = memories.depended_on_by(row.id)
    targets = memories.texts([dst for rel, dst, _ in links_out if rel == "depends_on"])
    core = core_of(row, judged, contested_slots(reader, [row], now))
    facts = (
        memories.current_facts(row.subject_key or "", row.origin, now) if core["contested"] else []
    )
    contenders = [contender(f) for f in facts if f.id != row.id]
    counts = memories.use_counts(row.rowid)
    recent = [
        p.NegativeOutcome(outcome=u.outcome, ts=u.ts, note=u.note)
        for u in memories.uses([row.rowid])
        if u.outcome != "injected"
    ][:10]
    return p.MemoryDetail(
        **core,
        text=row.text,
        scopes=row.labels.get("scope", []),
        bands=row.labels.get("band", []),
        episodes=row.labels.get("episode", []),
        distortion_tolerance=row.distortion_tolerance,
        trust=row.trust,
        instruction_signals=instruction_flags(row.text),
        eligibility=row.eligibility,
        ts=row.ts,
        created_at=row.created_at,
        updated_at=row.updated_at,
        last_verified_at=row.last_verified_at,
        expires_at=row.expires_at,
        workspace=row.workspace,
        origin=row.origin,
        origin_repo=row.origin_repo,
        origin_commit=row.origin_commit,
        verified_commit=row.verified_commit,
        agent=row.agent,
        client=row.writer_client,
        model=row.writer_model,
        session=row.session,
        superseded_by_text=memories.texts([row.superseded_by]).get(row.superseded_by)
        if row.superseded_by
        else None,
        supersedes=[dst for rel, dst, _ in links_out if rel == "supersedes"],
        contenders=contenders,
        depends_on=[
            p.MemoryLink(
                id=dst, summary=summary(targets.get(dst, "")), note=note, exists=dst in targets
            )
            for rel, dst, note in links_out
            if rel == "depends_on"
        ],
        depended_on_by=[
            p.MemoryLink(id=i, summary=summary(t), note=n, exists=True) for i, t, n in links_in
        ],
        cited_paths=judged.cited,
        path_drift=path_drift,
        claim_anchored_missing=anchored_missing,
        commit_drift=commit,
        commit_drift_count=commit.count if commit is not None and commit.head else None,
        outcomes=counts,
        recent_outcomes=recent,
    )
