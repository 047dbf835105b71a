"""``recallctl connect``: wire recalld into an agent host's own config."""

from __future__ import annotations

import argparse

__all__ = ["add_commands"]


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    return None
