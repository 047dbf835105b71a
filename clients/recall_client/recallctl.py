"""The ``recallctl`` entry point: the admin client's commands (recall_client.ctl) with the
web page's ``ui`` command (recall_client.ui.command). It sits above both, so neither
imports the other."""

from __future__ import annotations

from .ctl.main import main as run
from .ui.command import add_command as add_ui

__all__ = ["main"]


def main(argv: list[str] | None = None) -> None:
    run(argv, more=(add_ui,))


if __name__ == "__main__":
    main()
