"""The port's two sides assembled from the shared SQL: a reader and a write transaction on
one connection. An engine brings its connection, its channels (lexical, semantic) and its
nearest-lesson view; everything else is the same statements on either engine."""

from __future__ import annotations

from typing import Generic, TypeVar

from ..port import RetrievalReads
from .db import Db
from .episodes import EpisodeReads, EpisodeWrites
from .experiences import ExperienceReads, ExperienceWrites, NearLessons
from .memories import MemoryReads, MemoryWrites
from .operations import OperationReads, OperationWrites
from .records import RecordReads, RecordWrites

__all__ = ["SqlReader", "SqlWriteTx"]

D = TypeVar("D", bound=Db)


class SqlReader(Generic[D]):
    """:class:`~recalld.store.port.Reader` on one connection."""

    def __init__(self, db: D, search: RetrievalReads) -> None:
        self.db = db
        self.search = search
        self.memories = MemoryReads(db)
        self.episodes = EpisodeReads(db)
        self.experiences = ExperienceReads(db)
        self.records = RecordReads(db)
        self.ops = OperationReads(db)


class SqlWriteTx:
    """:class:`~recalld.store.port.WriteTx` on the writer's connection, inside a batch."""

    def __init__(self, db: Db, search: RetrievalReads, lessons: NearLessons) -> None:
        self.read = SqlReader(db, search)
        self.records = RecordWrites(db)
        self.memories = MemoryWrites(db)
        self.episodes = EpisodeWrites(db)
        self.experiences = ExperienceWrites(db, lessons)
        self.ops = OperationWrites(db)
