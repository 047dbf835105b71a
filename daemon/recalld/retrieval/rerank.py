"""An optional local cross-encoder that re-scores memory_search candidates.

Only a model folder named in the config (``rerank_model_path``) is ever loaded, from local
files; nothing is downloaded. Without one, a search that asks for reranking is answered
without it and its explain trace says so: reranking is never faked.
"""

from __future__ import annotations

import logging
import math
import os
import threading
from collections.abc import Sequence
from typing import Any

__all__ = ["Reranker"]

log = logging.getLogger(__name__)


class Reranker:
    """Loads the cross-encoder on first use (in a search worker thread) and scores pairs."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._model: Any = None
        self._lock = threading.Lock()
        self.reason: str | None = None if path else "no rerank_model_path configured"

    @property
    def available(self) -> bool:
        return bool(self.path) and (self._model is not None or self.reason is None)

    def _load(self) -> Any:
        with self._lock:
            if self._model is None and self.reason is None:
                if not os.path.isdir(self.path):
                    self.reason = f"rerank_model_path {self.path} is not a folder"
                    return None
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                try:
                    from sentence_transformers import CrossEncoder
                except ImportError:
                    self.reason = (
                        "the cross-encoder reranker needs the torch extra:"
                        " pip install 'recalld[torch]'"
                    )
                    log.warning("%s", self.reason)
                    return None
                try:
                    self._model = CrossEncoder(self.path, device="cpu", local_files_only=True)
                except Exception as exc:  # a broken folder must not break search
                    self.reason = f"cross-encoder failed to load: {type(exc).__name__}: {exc}"
                    log.warning("%s", self.reason)
            return self._model

    def score(self, query: str, texts: Sequence[str]) -> list[float] | None:
        """Relevance of each text to the query in 0..1; None when no model is available."""
        model = self._load() if self.path else None
        if model is None or not texts:
            return None if model is None else []
        with self._lock:  # one inference at a time: torch threads are shared
            raw = model.predict([(query, t) for t in texts], show_progress_bar=False)
        values = [float(v) for v in raw]
        # Cross-encoders emit logits or probabilities; map logits into 0..1.
        if any(v < 0 or v > 1 for v in values):
            values = [1 / (1 + math.exp(-v)) for v in values]
        return values
