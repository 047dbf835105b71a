"""Context injection (the hosts' context hooks): the block a hook asks for and gets, and the
log of what was injected."""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta, Struct

from .base import (
    ListCursor,
    MemoryId,
    Path,
    Query,
    Reply,
    Request,
    RequestRuleError,
    SessionId,
    StalenessVerdict,
    StoredOutcome,
)

# ---- context injection (the hosts' context hooks)

ContextEvent = Literal["session_start", "prompt"]


class ContextBlock(Request, tag="context_block"):
    """The context a host's hook injects: at a session's start the workspace's current
    facts, the lessons for its branch, the last session's unresolved failures and the
    memories citing files changed since; at a prompt what is relevant to it that this
    session was not given yet. Within ``budget`` tokens of the host's model (estimated
    from above); every memory injected is recorded as a use of the token it carries."""

    event: ContextEvent
    session_id: SessionId
    prompt: Query | None = None
    workspace: Path | None = None
    # Tokens; None: the daemon's context_session_budget / context_prompt_budget; 0: nothing.
    budget: Annotated[int, Meta(ge=0, le=20_000)] | None = None

    def __post_init__(self) -> None:
        if self.event == "prompt" and self.prompt is None:
            raise RequestRuleError("a prompt event needs its prompt")


ContextSection = Literal["facts", "failures", "changed", "lessons", "memories"]


class _Item(Struct, kw_only=True, omit_defaults=True):
    """What a block's item was when it was injected: the fields a block and the log share."""

    id: str
    section: ContextSection
    tokens: int
    # Memories: "fresh", or the staleness verdict of a memory whose cited paths or commits
    # drifted (spot_check_recommended / spot_check_required).
    drift: StalenessVerdict | None = None
    contested: bool = False


class ContextItem(_Item, kw_only=True, omit_defaults=True):
    """One item of an injected block, as its line in ``text`` says it."""

    use_token: str | None = None


class ContextInjected(Reply, tag="context_injected"):
    """A context hook's block: ``text`` is what the host puts before the model ("" when
    nothing applies or the budget is 0)."""

    event: ContextEvent
    budget: int
    tokens: Annotated[
        int, Meta(description="Tokens of text, the host model's (estimated from above).")
    ]
    tokenizer: str
    text: str
    items: list[ContextItem] = []
    # Candidates the budget left out, and those this session was given already.
    left_out: int = 0
    given_before: int = 0


# ---- the log of injections (the web page's sessions)


class ContextLog(Request, tag="context_log"):
    """What the context hooks injected, newest first: each injection (a session start or a
    prompt) with its items, and what became of each memory since. The caller's own: its
    workspace's, its agent's and (in a team database) its database role's; another
    workspace, every workspace or any agent needs admin:workspace."""

    workspace: Path | None = None
    all_workspaces: bool = False
    # Every agent's injections, not only the caller's (admin:workspace).
    any_caller: bool = False
    # Only this host session's injections.
    session_id: SessionId | None = None
    # Only the injections that held this memory.
    memory_id: MemoryId | None = None
    # The previous reply's next_before: the page after it.
    before: ListCursor | None = None
    limit: Annotated[int, Meta(ge=1, le=100)] = 50

    def __post_init__(self) -> None:
        if self.all_workspaces and self.workspace is not None:
            raise RequestRuleError("give workspace or all_workspaces, not both: they contradict")


class LoggedItem(_Item, kw_only=True, omit_defaults=True):
    """An injected item as the log keeps it (its text is the record's own: a forgotten
    record's is gone, and its line with it)."""

    # A memory's use as it stands: "injected" until a memory_record_use of the token it was
    # injected with said what became of it. None for a lesson or an episode (not uses).
    outcome: StoredOutcome | None = None


class ContextInjection(Struct, kw_only=True, omit_defaults=True):
    """One block a hook was given."""

    id: str
    ts: float
    workspace: str
    agent: str
    # The host's session id, from its hook's payload.
    session_id: str
    event: ContextEvent
    budget: int
    tokens: int
    items: list[LoggedItem] = []


class ContextLogResult(Reply, tag="context_log_result"):
    injections: list[ContextInjection]
    # Pass as ``before`` for the next page; None when this was the last one.
    next_before: str | None = None
