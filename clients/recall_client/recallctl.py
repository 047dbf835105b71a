"""The ``recallctl`` entry point: the admin client's commands (recall_client.ctl) with the
web page's ``ui`` command (recall_client.ui.command). It sits above both, so neither
imports the other.

A host's capture hook is answered before any of them is imported
(:mod:`recall_client.ctl.hook_entry`): their imports are most of a capture's time.
"""

from __future__ import annotations

import sys

from .ctl.hook_entry import answer_host_first

__all__ = ["main"]


def main(argv: list[str] | None = None) -> None:
    answer_host_first(sys.argv[1:] if argv is None else argv)
    # Imported here, after a detached hook's host has its answer.
    from .ctl.main import main as run
    from .ui.command import add_command as add_ui

    run(argv, more=(add_ui,))


if __name__ == "__main__":
    main()
