"""Context injection (the hosts' context hooks): the block a hook asks for and gets."""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta, Struct

from .base import Path, Query, Reply, Request, RequestRuleError, SessionId, StalenessVerdict

# ---- context injection (the hosts' context hooks)

ContextEvent = Literal["session_start", "prompt"]


class ContextBlock(Request, tag="context_block"):
    """The context a host's hook injects: at a session's start the workspace's current
    facts, the lessons for its branch, the last session's unresolved failures and the
    memories citing files changed since; at a prompt what is relevant to it that this
    session was not given yet. Within ``budget`` tokens of the model's tokenizer; every
    memory injected is recorded as a use of the token it carries."""

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


class ContextItem(Struct, kw_only=True, omit_defaults=True):
    """One item of an injected block, as its line in ``text`` says it."""

    id: str
    section: ContextSection
    tokens: int
    # Memories: "fresh", or the staleness verdict of a memory whose cited paths or commits
    # drifted (spot_check_recommended / spot_check_required).
    drift: StalenessVerdict | None = None
    contested: bool = False
    use_token: str | None = None


class ContextInjected(Reply, tag="context_injected"):
    """A context hook's block: ``text`` is what the host puts before the model ("" when
    nothing applies or the budget is 0)."""

    event: ContextEvent
    budget: int
    tokens: Annotated[int, Meta(description="Tokens of text, by the model's tokenizer.")]
    tokenizer: str
    text: str
    items: list[ContextItem] = []
    # Candidates the budget left out, and those this session was given already.
    left_out: int = 0
    given_before: int = 0
