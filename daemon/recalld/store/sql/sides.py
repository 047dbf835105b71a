"""The port's two sides assembled from the shared SQL: a reader and a write transaction on
one connection. An engine brings its connection, its channels (lexical, semantic) and its
nearest-lesson view; everything else is the same statements on either engine."""

from __future__ import annotations

from typing import Generic, TypeVar

from ..port import RetrievalReads
from .context import SqlContextReads, SqlContextWrites
from .db import Db
from .episodes import SqlEpisodeReads, SqlEpisodeWrites
from .experiences import NearLessons, SqlExperienceReads, SqlExperienceWrites
from .memories import SqlMemoryReads, SqlMemoryWrites
from .operations import SqlOperationReads, SqlOperationWrites
from .records import SqlRecordReads, SqlRecordWrites

__all__ = ["SqlReader", "SqlWriteTx"]

D = TypeVar("D", bound=Db)


class SqlReader(Generic[D]):
    """:class:`~recalld.store.port.Reader` on one connection."""

    def __init__(self, db: D, search: RetrievalReads) -> None:
        self.db = db
        self.search = search
        self.memories = SqlMemoryReads(db)
        self.episodes = SqlEpisodeReads(db)
        self.experiences = SqlExperienceReads(db)
        self.records = SqlRecordReads(db)
        self.ops = SqlOperationReads(db)
        self.context = SqlContextReads(db)


class SqlWriteTx:
    """:class:`~recalld.store.port.WriteTx` on the writer's connection, inside a batch."""

    def __init__(self, db: Db, search: RetrievalReads, lessons: NearLessons) -> None:
        self.read = SqlReader(db, search)
        self.records = SqlRecordWrites(db)
        self.memories = SqlMemoryWrites(db)
        self.episodes = SqlEpisodeWrites(db)
        self.experiences = SqlExperienceWrites(db, lessons)
        self.ops = SqlOperationWrites(db)
        self.context = SqlContextWrites(db)
