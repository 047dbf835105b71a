"""Experiences and lessons (seed 000): recording, forgetting, search, explain, context.

An experience is one finished task; its lessons are stored once per workspace and merged by
the policy (same words, or near in meaning under the embedding model) inside the experience's
own transaction. The pipeline embeds an experience and its lessons before the write (when the
model is up), so the merge by meaning can happen there and the experience is searchable by
meaning the moment it is acknowledged; without a model, records wait for the embedding actor.
"""

from __future__ import annotations

import posixpath
import time
from collections.abc import Sequence
from functools import partial
from typing import TypeVar

import msgspec
from recall_client import protocol as p

from ..domain.policy import Assessment, lesson_key
from ..domain.principal import Principal
from ..domain.scopes import ADMIN
from ..errors import RecallError
from ..pipeline.intake import RequestJob
from ..retrieval import experience_reader
from ..retrieval import listing as browse
from ..store.port import WriteTx
from .experience_writes import ExperienceWrite, Written, forget_experience, record_experience
from .services import Services

__all__ = [
    "ExperienceJob",
    "execution_context",
    "explain",
    "forget",
    "listing",
    "project_file",
    "record",
    "search",
    "unique_lessons",
]

R = TypeVar("R")


def project_file(workspace: str, name: str) -> str | None:
    """``name`` as a normalised project-relative path; None when it is outside the workspace
    or is the workspace itself. ``workspace`` is its path here ("" when it has none: then no
    absolute path is inside it)."""
    path = posixpath.normpath(name)
    if posixpath.isabs(path) and not workspace:
        return None
    if posixpath.isabs(path):
        rel = posixpath.relpath(path, posixpath.normpath(workspace))
        path = path if rel == ".." or rel.startswith("../") else rel
    if posixpath.isabs(path) or path in (".", "..") or path.startswith("../"):
        return None
    return path


def _project_files(workspace: str, files: Sequence[str]) -> list[str]:
    """``files`` as normalised project-relative paths, deduplicated, in their order.

    Raises:
        RecallError: ``invalid_request`` for a path outside the workspace.
    """
    out: dict[str, None] = {}
    for name in files:
        path = project_file(workspace, name)
        if path is None:
            itself = posixpath.normpath(name) in (".", posixpath.normpath(workspace))
            where = (
                "names the workspace itself"
                if itself
                else (f"is outside the workspace {workspace}; give paths inside it")
            )
            raise RecallError("invalid_request", f"file {name!r} {where}")
        out[path] = None
    return list(out)


def unique_lessons(
    lessons: Sequence[str], trust: Sequence[Assessment]
) -> tuple[list[str], list[Assessment]]:
    """Each lesson once (the first spelling wins), with its trust."""
    unique: dict[str, tuple[str, Assessment]] = {}
    for text, judged in zip(lessons, trust, strict=True):
        unique.setdefault(lesson_key(text), (text, judged))
    return [t for t, _ in unique.values()], [a for _, a in unique.values()]


class ExperienceJob(RequestJob[R]):
    """Writes an experience: prepared from the ingested request, embedded, then applied by
    the kind of write (recorded, rolled up), ``R`` its reply."""

    __slots__ = ("plan",)

    SOURCE = "record_experience"

    def __init__(self, who: Principal, req: p.Request) -> None:
        super().__init__(who, req)
        self.plan: ExperienceWrite | None = None

    def prepare(self) -> None:
        req: p.RecordExperience = self.clean.request
        assert self.clean.trust is not None
        lessons, trust = unique_lessons(req.lessons, self.clean.lesson_trust)
        self.plan = ExperienceWrite(
            description=req.description,
            strategy=req.strategy,
            files=_project_files(self.principal.path, req.files),
            lessons=lessons,
            trust=self.clean.trust,
            lesson_trust=trust,
            source=self.SOURCE,
        )

    def embed_texts(self) -> list[str]:
        assert self.plan is not None
        return [self.plan.description, *self.plan.lessons]

    def _plan(self) -> ExperienceWrite:
        assert self.plan is not None
        self.plan.vectors, self.plan.model = self.vectors, self.model
        return self.plan

    def _after(self, written: Written) -> None:
        """What the write left for after its COMMIT, for the writer to hand on."""
        for rowid, vec in written:
            if vec is None:
                self.new_rowids.append(rowid)
            else:
                self.index_adds.append((rowid, vec))


class _Record(ExperienceJob[p.ExperienceRecorded]):
    """record_experience's write."""

    __slots__ = ()

    def apply(self, tx: WriteTx, now: float) -> p.ExperienceRecorded:
        reply, written = record_experience(
            tx, self.principal, self.clean.request, self._plan(), now
        )
        self._after(written)
        return reply


class _Forget(RequestJob[p.ExperienceForgotten]):
    __slots__ = ()

    def apply(self, tx: WriteTx, now: float) -> p.ExperienceForgotten:
        reply, removed = forget_experience(
            tx, self.principal.workspace, self.clean.request.record_id, now
        )
        self.index_removals.extend(removed)
        return reply


async def record(
    services: Services, who: Principal, req: p.RecordExperience
) -> p.ExperienceRecorded:
    """record_experience; durable (and searchable by meaning) when it returns.

    Raises:
        RecallError: ``invalid_request`` for a file outside the workspace; ``busy`` or
            ``unavailable`` from the writer.
    """
    req = msgspec.structs.replace(req, visibility=services.visibility(req.visibility))
    return await services.write(_Record(who, req))


async def forget(
    services: Services, who: Principal, req: p.ForgetExperience
) -> p.ExperienceForgotten:
    """forget_experience: its lessons lose its support; one it alone supported is retired.

    Raises:
        RecallError: ``not_found`` when the workspace has no such experience.
    """
    return await services.write(_Forget(who, req))


async def search(
    services: Services, who: Principal, req: p.SearchExperience
) -> p.ExperienceSearchResult:
    """search_experience: similar past tasks, best first, and the lessons they support."""
    started = time.perf_counter()
    async with services.query_vector(req.query) as qvec:
        experiences, lessons = await services.read(
            partial(
                experience_reader.search,
                workspace=who.workspace,
                query=req.query,
                qvec=qvec,
                limit=req.limit,
            )
        )
    return p.ExperienceSearchResult(
        query=req.query,
        experiences=experiences,
        lessons=lessons,
        semantic_used=qvec is not None and qvec.came(),
        took_ms=round((time.perf_counter() - started) * 1000, 3),
    )


async def listing(
    services: Services, who: Principal, req: p.ExperienceList
) -> p.ExperienceListResult:
    """experience_list: the workspace's experiences newest first, with their lessons.

    Raises:
        RecallError: ``invalid_request`` for a bad cursor; ``busy`` / ``unavailable``.
    """
    result: p.ExperienceListResult = await services.read(
        partial(browse.experiences, workspace=who.workspace, req=req)
    )
    return result


async def explain(services: Services, who: Principal, req: p.ExplainNode) -> p.NodeExplained:
    """explain_node: one experience in full; with a query, why it ranked for it.

    Raises:
        RecallError: ``not_found`` when the workspace has no such (surfacing) experience.
    """
    async with services.query_vector(req.query) as qvec:
        result: p.NodeExplained = await services.read(
            partial(
                experience_reader.explain,
                workspace=who.workspace,
                agent=None if ADMIN in who.scopes else who.agent,
                record_id=req.record_id,
                query=req.query,
                qvec=qvec,
                model=services.model.name if qvec is not None else None,
            )
        )
    return result


async def execution_context(
    services: Services, who: Principal, req: p.GetExecutionContext
) -> p.ExecutionContext:
    """get_execution_context: applicable lessons and similar experiences, prompt-ready."""
    async with services.query_vector(req.task) as qvec:
        lessons, experiences = await services.read(
            partial(
                experience_reader.context,
                workspace=who.workspace,
                task=req.task,
                qvec=qvec,
                limit=req.limit,
            )
        )
    return p.ExecutionContext(
        task=req.task,
        lessons=lessons,
        experiences=experiences,
        context=experience_reader.render_context(lessons, experiences),
        semantic_used=qvec is not None and qvec.came(),
    )
