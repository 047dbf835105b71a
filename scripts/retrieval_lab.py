"""In-process retrieval experiments over a benchdata folder: every channel computed once,
levers tried over the cached candidates in a second each.

Not the bench (``retrieval_bench.py`` drives a real daemon end to end); this mirrors what
``recalld.retrieval`` does over an in-memory SQLite store with the daemon's FTS5 table and
exact cosine over the bundled model's vectors (cached under ``--cache``), so constants can be
chosen by leave-one-conversation-out without reloading a daemon per trial.
"""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from retrieval_bench import Dataset, load_dataset, score

CACHE = Path("/tmp/recalld-lab")


def embed(texts: Sequence[str], cache: Path = CACHE) -> np.ndarray:
    """Vectors of ``texts`` by the bundled model (as the daemon embeds), cached per text."""
    cache.mkdir(parents=True, exist_ok=True)
    store = cache / "vectors.npz"
    known: dict[str, np.ndarray] = {}
    if store.exists():
        with np.load(store) as z:
            known = dict(zip(z["keys"].tolist(), z["vecs"], strict=True))
    key = [hashlib.sha1(t.encode()).hexdigest() for t in texts]
    missing = sorted({k: t for k, t in zip(key, texts, strict=True) if k not in known}.items())
    if missing:
        from recalld.pipeline.bundled_model import bundled_model_path
        from recalld.pipeline.onnx_model import OnnxEmbedder, ensure_export

        path = bundled_model_path()
        model = OnnxEmbedder(ensure_export(path), path)
        for i in range(0, len(missing), 64):
            chunk = missing[i : i + 64]
            vecs = model.encode([t for _, t in chunk])
            for (k, _), v in zip(chunk, vecs, strict=True):
                known[k] = v
            print(f"embedded {i + len(chunk)}/{len(missing)}", file=sys.stderr, end="\r")
        keys = list(known)
        np.savez(store, keys=np.array(keys), vecs=np.stack([known[k] for k in keys]))
    return np.stack([known[k] for k in key]).astype(np.float32)


@dataclass
class Store:
    """A dataset as recalld would hold it: one FTS5 table over every workspace (one IDF),
    vectors, and each record's place in its session (no session: the loader's one)."""

    data: Dataset
    db: sqlite3.Connection
    vecs: np.ndarray
    qvecs: np.ndarray
    workspace_rows: dict[str, np.ndarray]  # workspace -> rowids (1-based)
    ws: list[str]  # by rowid - 1
    session_of: list[str]
    ts: np.ndarray
    texts: list[str]
    runs: dict[tuple[str, str], list[int]] = field(default_factory=dict)  # ordered rowids
    place: dict[int, tuple[tuple[str, str], int]] = field(default_factory=dict)
    _match: dict[tuple[str, str], frozenset[int]] = field(default_factory=dict)
    _df: dict[str, int] = field(default_factory=dict)

    @classmethod
    def load(cls, folder: Path) -> Store:
        data = load_dataset(folder)
        db = sqlite3.connect(":memory:")
        db.execute("CREATE TABLE records (rowid INTEGER PRIMARY KEY, workspace TEXT, text TEXT)")
        db.execute(
            "CREATE VIRTUAL TABLE records_fts USING fts5(text, content='records',"
            " content_rowid='rowid', tokenize='porter unicode61 remove_diacritics 2')"
        )
        rows = [(i + 1, m.scope, m.text) for i, m in enumerate(data.memories)]
        db.executemany("INSERT INTO records VALUES (?, ?, ?)", rows)
        db.execute("INSERT INTO records_fts(records_fts) VALUES ('rebuild')")
        db.execute("CREATE INDEX records_ws ON records(workspace)")
        vecs = embed([m.text for m in data.memories])
        qvecs = embed([q.query[:4000] for q in data.queries])
        wsr: dict[str, list[int]] = defaultdict(list)
        for i, m in enumerate(data.memories):
            wsr[m.scope].append(i + 1)
        st = cls(
            data=data,
            db=db,
            vecs=vecs,
            qvecs=qvecs,
            workspace_rows={w: np.array(r) for w, r in wsr.items()},
            ws=[m.scope for m in data.memories],
            session_of=[m.session or "\0connection" for m in data.memories],
            ts=np.array([m.ts or 0.0 for m in data.memories]),
            texts=[m.text for m in data.memories],
        )
        order = sorted(range(len(data.memories)), key=lambda i: (st.ts[i], i))
        for i in order:
            key = (st.ws[i], st.session_of[i])
            run = st.runs.setdefault(key, [])
            st.place[i + 1] = (key, len(run))
            run.append(i + 1)
        return st

    @property
    def n(self) -> int:
        return len(self.texts)

    def lexical(self, terms: Sequence[str], workspace: str, depth: int) -> list[tuple[int, float]]:
        if not terms:
            return []
        match = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
        return [
            (rowid, -b)
            for rowid, b in self.db.execute(
                "SELECT r.rowid, bm25(records_fts) FROM records_fts f JOIN records r"
                " ON r.rowid = f.rowid WHERE records_fts MATCH ? AND r.workspace = ?"
                " ORDER BY bm25(records_fts) LIMIT ?",
                (match, workspace, depth),
            )
        ]

    def semantic(self, qi: int, workspace: str, depth: int) -> list[tuple[int, float]]:
        rows = self.workspace_rows[workspace]
        sims = self.vecs[rows - 1] @ self.qvecs[qi]
        top = np.argsort(-sims, kind="stable")[:depth]
        return [(int(rows[j]), float(sims[j])) for j in top]

    def matching(self, term: str, workspace: str) -> frozenset[int]:
        """Rowids of ``workspace`` whose text holds ``term`` as FTS5 matches it."""
        key = (term, workspace)
        if key not in self._match:
            self._match[key] = frozenset(
                r
                for (r,) in self.db.execute(
                    "SELECT f.rowid FROM records_fts f JOIN records r ON r.rowid = f.rowid"
                    " WHERE records_fts MATCH ? AND r.workspace = ?",
                    ('"' + term.replace('"', '""') + '"', workspace),
                )
            )
        return self._match[key]

    def df(self, term: str) -> int:
        if term not in self._df:
            self._df[term] = int(
                self.db.execute(
                    "SELECT count(*) FROM records_fts WHERE records_fts MATCH ?",
                    ('"' + term.replace('"', '""') + '"',),
                ).fetchone()[0]
            )
        return self._df[term]

    def window(self, rowid: int, w: int) -> list[int]:
        key, i = self.place[rowid]
        run = self.runs[key]
        return [run[j] for j in range(max(0, i - w), min(len(run), i + w + 1)) if j != i]


def ordered_workspaces(st: Store) -> dict[str, bool]:
    """The daemon's order test per workspace (its latest 1,000 records with a session)."""
    from recalld.retrieval import session_context

    out = {}
    for ws, rows in st.workspace_rows.items():
        recs = sorted(rows.tolist(), key=lambda r: (st.ts[r - 1], r))[
            -session_context.ORDER_SAMPLE :
        ]

        class _Search:
            def __init__(self, recs: list[int]) -> None:
                self.recs = recs

            def session_sample(
                self, workspace: str, kind: str, limit: int
            ) -> list[tuple[str, str]]:
                return [(st.session_of[r - 1], st.texts[r - 1]) for r in self.recs]

        class _Reader:
            def __init__(self, search: _Search) -> None:
                self.search = search

        v = session_context.order_test(_Reader(_Search(recs)), ws, "memory", 0.0)  # type: ignore[arg-type]
        out[ws] = v.ordered
        print(f"order {ws}: t={v.t:.1f} pairs={v.pairs} ordered={v.ordered}", file=sys.stderr)
    return out


def metrics(ranked: list[list[int]], st: Store) -> list[dict[str, Any]]:
    out = []
    for q, top in zip(st.data.queries, ranked, strict=True):
        ids = [[st.data.memories[r - 1].id] for r in top]
        out.append(
            score(ids, q.relevant_ids) | {"category": q.category, "scope": q.qid.split(":")[0]}
        )
    return out


def summary(rows: list[dict[str, Any]]) -> dict[str, float]:
    keys = ("recall@5", "recall@10", "mrr@10")
    return {k: sum(r[k] for r in rows) / len(rows) for k in keys}


def by(rows: list[dict[str, Any]], field_: str) -> dict[str, dict[str, float]]:
    g: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        g[r[field_]].append(r)
    return {k: summary(v) for k, v in sorted(g.items())}


def fmt(s: dict[str, float]) -> str:
    return f"{s['recall@5']:.3f} / {s['recall@10']:.3f} / {s['mrr@10']:.3f}"


def dump(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=1))


def idf(st: Store, term: str) -> float:
    n = st.df(term)
    return max(1e-6, math.log((st.n - n + 0.5) / (n + 0.5)))


# --------------------------------------------------------------------------- the pipeline


@dataclass
class Lab:
    """A store with its order verdicts and each query's first stage, cached."""

    st: Store
    ordered: dict[str, bool]
    stage: dict[int, tuple[list[int], np.ndarray, dict[str, Any]]] = field(default_factory=dict)

    @classmethod
    def load(cls, folder: Path) -> Lab:
        st = Store.load(folder)
        return cls(st, ordered_workspaces(st))

    def first_stage(self, qi: int) -> tuple[list[int], np.ndarray, dict[str, Any]]:
        """What ``fusion.retrieve`` computes before the learned ranking, and its features."""
        if qi in self.stage:
            return self.stage[qi]
        from recalld.retrieval import ranker
        from recalld.retrieval.fusion import CHANNEL_DEPTH, LEXICAL_WEIGHT, _holding, fuse
        from recalld.retrieval.session_context import (
            CONTEXT_CANDIDATES,
            CONTEXT_WEIGHT,
            CONTEXT_WINDOW,
            in_context,
        )
        from recalld.retrieval.terms import query_terms

        st = self.st
        q = st.data.queries[qi]
        terms = query_terms(q.query)
        lex = st.lexical(terms, q.scope, CHANNEL_DEPTH)
        sem = st.semantic(qi, q.scope, CHANNEL_DEPTH)
        found = fuse(([(lex, LEXICAL_WEIGHT)] if terms else []) + [(sem, 1 - LEXICAL_WEIGHT)])
        best = sorted(found, key=lambda r: -found[r])[:CONTEXT_CANDIDATES]
        near: dict[int, list[int]] = {}
        for r in best:
            for x in [r, *st.window(r, CONTEXT_WINDOW)] if self.ordered[q.scope] else [r]:
                if x not in near:
                    near[x] = st.window(x, CONTEXT_WINDOW) if self.ordered[q.scope] else []
        scores = in_context(found, near, CONTEXT_WEIGHT)
        pool = list(scores)
        kept = set(pool)
        before = {}
        if self.ordered[q.scope]:
            for r in pool:
                key, i = st.place[r]
                if i > 0 and st.runs[key][i - 1] in kept:
                    before[r] = st.runs[key][i - 1]
        rows = ranker.features(
            pool,
            terms=terms,
            names=ranker.query_names(q.query),
            lexical=lex,
            semantic=sem,
            fused=found,
            in_context=scores,
            near={r: [n for n in near.get(r, ()) if n in kept] for r in pool},
            holding=_holding({r: st.texts[r - 1] for r in pool}),
            depth=CHANNEL_DEPTH,
            texts={r: st.texts[r - 1] for r in pool},
            before=before,
        )
        extra = {"terms": terms, "cosine": dict(sem), "scores": scores}
        out = (
            pool,
            np.array(rows, dtype=np.float64).reshape(len(pool), len(ranker.FEATURES)),
            extra,
        )
        self.stage[qi] = out
        return out

    def labels(self, qi: int) -> np.ndarray:
        pool = self.first_stage(qi)[0]
        rel = set(self.st.data.queries[qi].relevant_ids)
        return np.array([self.st.data.memories[r - 1].id in rel for r in pool], dtype=np.float64)

    def ranked(
        self,
        qi: int,
        weights: np.ndarray | None,
        *,
        evidence: bool = True,
        in_context: bool = True,
    ) -> list[int]:
        """The top 10 memory_search returns: the learned ranking (None: the first stage's
        scores), cut at the reader's depth, then times the evidence factor."""
        from recalld.retrieval import ranker
        from recalld.retrieval.terms import Coverage

        pool, X, extra = self.first_stage(qi)
        if not pool:
            return []
        context: dict[int, float] = {}
        if weights is None:
            score = dict(extra["scores"])
        else:
            learned = dict(zip(pool, ranker.rank(X.tolist(), weights.tolist()), strict=True))
            score = ranker.on_scale(learned, extra["scores"])
            if in_context:
                context = dict(zip(pool, ranker.context_evidence(X.tolist()), strict=True))
        top = sorted(score, key=lambda r: (-score[r], r))[:30]
        if not evidence:
            return top[:10]
        covers = Coverage(extra["terms"])
        best = max(score[r] for r in top) or 1.0
        final = {}
        for r in top:
            cov, _ = covers(self.st.texts[r - 1])
            cos = extra["cosine"].get(r)
            ce = min(1.0, max(0.0, (cos - 0.2) / 0.4)) if cos is not None else 0.0
            final[r] = score[r] / best * min(1.0, max(cov, ce, context.get(r, 0.0)) / 0.25)
        return sorted(top, key=lambda r: (-final[r], r))[:10]


def train_pairwise(
    lab: Lab, queries: Sequence[int], l2: float = 10.0, *, also: Sequence[Lab] = ()
) -> np.ndarray:
    """Weights of a pairwise logistic regression: every relevant candidate of a query
    against every other candidate of it (Newton's method, L2 ``l2``). ``also``: training
    sets whose same-numbered queries (the same questions, reworded) join the fit."""
    diffs = []
    for source in (lab, *also):
        for qi in queries:
            _, X, _ = source.first_stage(qi)
            y = source.labels(qi)
            if 0 < y.sum() < len(y):
                neg = X[y == 0]
                diffs += [p - neg for p in X[y == 1]]
    D = np.concatenate(diffs)
    w = np.zeros(D.shape[1])
    for _ in range(50):
        p = 1 / (1 + np.exp(-(D @ w)))
        g = -D.T @ (1 - p) + l2 * w
        H = (D * (p * (1 - p))[:, None]).T @ D + l2 * np.eye(len(w))
        step = np.linalg.solve(H, g)
        w -= step
        if np.abs(step).max() < 1e-9:
            break
    return w


def conversations(lab: Lab) -> dict[str, list[int]]:
    """Query indexes by conversation (the part of the qid before its colon)."""
    out: dict[str, list[int]] = defaultdict(list)
    for i, q in enumerate(lab.st.data.queries):
        out[q.qid.split(":")[0]].append(i)
    return dict(sorted(out.items()))


def evaluate(
    lab: Lab, rank_of: Any
) -> tuple[dict[str, float], dict[str, dict[str, float]], dict[str, float]]:
    """(full set, by category, mean over conversations) of ``rank_of(qi)``."""
    rows = metrics([rank_of(i) for i in range(len(lab.st.data.queries))], lab.st)
    per = by(rows, "scope")
    macro = {
        k: sum(s[k] for s in per.values()) / len(per) for k in ("recall@5", "recall@10", "mrr@10")
    }
    return summary(rows), by(rows, "category"), macro


def loco_weights(lab: Lab, l2: float, also: Sequence[Lab] = ()) -> dict[str, np.ndarray]:
    """Per conversation: the weights fitted on the other conversations (of ``lab`` and of
    the training sets ``also``)."""
    convs = conversations(lab)
    return {
        c: train_pairwise(lab, [i for d, ix in convs.items() if d != c for i in ix], l2, also=also)
        for c in convs
    }


def main(argv: list[str] | None = None) -> None:
    import argparse

    from recalld.retrieval import ranker

    ap = argparse.ArgumentParser(prog="retrieval_lab", description=__doc__.split("\n")[0])
    ap.add_argument("train", type=Path, help="the folder the ranking is fitted on (LoCoMo)")
    ap.add_argument("variants", type=Path, nargs="*", help="folders scored with its weights")
    ap.add_argument(
        "--also-train",
        type=Path,
        action="append",
        default=[],
        help="a variant of the training folder (its questions reworded) whose questions join"
        " the fit; never one of the variants scored",
    )
    ap.add_argument("--l2", type=float, default=10.0)
    ap.add_argument("--json", type=Path, help="write every figure here")
    args = ap.parse_args(argv)
    if scored := set(args.also_train) & set(args.variants):
        ap.error(f"a training set is scored too: {', '.join(map(str, scored))}")
    base = Lab.load(args.train)
    also = [Lab.load(folder) for folder in args.also_train]
    for extra in also:
        if [q.qid for q in extra.st.data.queries] != [q.qid for q in base.st.data.queries]:
            ap.error(f"{extra.st.data.name}: not the training folder's questions, reworded")
    folds = loco_weights(base, args.l2, also)
    full_w = train_pairwise(base, range(len(base.st.data.queries)), args.l2, also=also)
    shipped = np.array(ranker.WEIGHTS)
    print("WEIGHTS = (" + ", ".join(f"{x:.4f}" for x in full_w) + ")")
    print(dict(zip(ranker.FEATURES, np.round(full_w, 3).tolist(), strict=True)))
    report: dict[str, Any] = {}
    for folder in [args.train, *args.variants]:
        lab = base if folder == args.train else Lab.load(folder)
        conv_of = {i: q.qid.split(":")[0] for i, q in enumerate(lab.st.data.queries)}

        def lexical(i: int, lab: Lab = lab) -> list[int]:
            from recalld.retrieval.terms import query_terms

            q = lab.st.data.queries[i]
            return [r for r, _ in lab.st.lexical(query_terms(q.query), q.scope, 10)]

        def dense(i: int, lab: Lab = lab) -> list[int]:
            q = lab.st.data.queries[i]
            return [r for r, _ in lab.st.semantic(i, q.scope, 10)]

        def first(i: int, lab: Lab = lab) -> list[int]:
            return lab.ranked(i, None)

        def in_package(i: int, lab: Lab = lab) -> list[int]:
            return lab.ranked(i, shipped)

        def fitted(i: int, lab: Lab = lab) -> list[int]:
            return lab.ranked(i, full_w)

        def held_out(i: int, lab: Lab = lab, conv: dict[int, str] = conv_of) -> list[int]:
            return lab.ranked(i, folds[conv[i]])

        methods: dict[str, Callable[[int], list[int]]] = {
            "bm25 alone": lexical,
            "dense alone": dense,
            "fusion + context (old default)": first,
            "learned ranking, WEIGHTS": in_package,
            "learned ranking, full-set fit": fitted,
            "learned ranking, LOCO": held_out,
        }
        out = {}
        for name, fn in methods.items():
            full, cats, macro = evaluate(lab, fn)
            out[name] = {"full": full, "by_category": cats, "mean_of_conversations": macro}
            print(
                f"{folder.name:14} {name:32} {fmt(full)}  (mean of convs {fmt(macro)})", flush=True
            )
        report[folder.name] = out
    if args.json:
        dump(args.json, report)


if __name__ == "__main__":
    main()
