"""The embedded engine: SQLite (WAL, FTS5) as the source of truth, FAISS as its vector cache.

One writer connection, used by the writer actor's thread for group commits; one read
connection per reader (search workers, the evaluation and embedding actors). FAISS is a cache
of the vectors table: opened (loaded or rebuilt) once the model is known, changed only through
:meth:`SqliteStore.vectors_added` / :meth:`SqliteStore.vectors_removed`, snapshotted to disk.
"""
