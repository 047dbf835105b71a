"""What every recallctl connection presents in its hello."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TypedDict

from .paths import read_admin_token, read_token_file

__all__ = ["HelloTokens", "hello_tokens"]


class HelloTokens(TypedDict):
    """The credential keyword arguments of :func:`recall_client.client.connect`."""

    admin_token: str | None
    agent_token: str | None


def hello_tokens(args: argparse.Namespace) -> HelloTokens:
    """``admin_token`` and ``agent_token`` for :func:`recall_client.client.connect`.

    recallctl is the user's own admin client: it presents the admin token whenever it can
    read it, unless ``--no-admin``; ``--agent-token-file`` adds an agent's own credential.

    Raises:
        PermissionError: the agent token file cannot be read or is not private.
    """
    token_file = getattr(args, "agent_token_file", None)
    return {
        "admin_token": None if args.no_admin else read_admin_token(),
        "agent_token": read_token_file(Path(token_file)) if token_file else None,
    }
