"""What the client side must never load: the daemon and the libraries only the daemon runs."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

# The daemon, and every dependency pyproject.toml declares for its side alone. Each is
# installed (checked below), so a test that finds none of them loaded could have found one.
DAEMON_SIDE = (
    "recalld",
    "numpy",
    "faiss",
    "onnxruntime",
    "tokenizers",
    "safetensors",
    "pygit2",
    "psycopg",
)


def daemon_side_loaded(*modules: str) -> list[str]:
    """The daemon-side packages a fresh interpreter holds after importing ``modules``."""
    missing = [name for name in DAEMON_SIDE if importlib.util.find_spec(name) is None]
    assert missing == [], f"not installed, so never seen loaded: {missing}"
    code = "\n".join(
        [
            f"import sys, {', '.join(modules)}",
            "loaded = {m.partition('.')[0] for m in sys.modules}",
            f"print(*sorted(loaded & {set(DAEMON_SIDE)!r}))",
        ]
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    return out.stdout.split()
