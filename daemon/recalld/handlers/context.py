"""context_block: the block a host's context hook injects, the uses it records and the log
context_log reads.

The block is gathered and packed on a search worker (``retrieval.context_reader``), with a
prompt's vector embedded meanwhile as memory_search does; tokens are the host model's,
estimated from above (``retrieval.host_tokens``), and whose memories come in is the
workspace's ``context_inject_from``. Each memory injected is then recorded as a use
("injected", under the nonce of the token its item carries): a later memory_record_use of
that token, or of the memory's id, says what became of it. The block itself (its ids, not
its lines) goes in the log with those uses, in their transaction.
"""

from __future__ import annotations

import logging
from functools import partial

from recall_client import protocol as p

from ..domain.ids import new_id
from ..domain.principal import Principal
from ..pipeline.writer import WriteJob
from ..retrieval import context_log, host_tokens
from ..retrieval.context_reader import Injection, gather
from ..store.port import InjectedItem, InjectionRow, WriteTx
from .services import Services

__all__ = ["block", "injections"]

log = logging.getLogger(__name__)


class _Injected(WriteJob[None]):
    """The daemon's own record of what it injected: the block in the log, and a use of each
    memory in it, in one transaction. Nothing of the client's is written (the prompt is not
    stored), so no ingest stage."""

    __slots__ = ("block", "principal", "session", "uses", "workspace")

    def __init__(
        self,
        who: Principal,
        workspace: str,
        session: str,
        block: p.ContextInjected,
        uses: list[tuple[str, str]],
    ) -> None:
        super().__init__()
        self.principal, self.workspace, self.session = who, workspace, session
        self.block, self.uses = block, uses

    def apply(self, tx: WriteTx, now: float) -> None:
        who, block = self.principal, self.block
        tx.memories.record_uses(who, self.uses, "injected", block.event, now)
        # A memory's item names its use by the token's nonce: a read of the log joins in
        # what became of the use.
        nonces = dict(self.uses)
        tx.context.record_injection(
            InjectionRow(
                id=new_id("ctx"),
                ts=now,
                workspace=self.workspace,
                uid=who.uid,
                agent=who.agent,
                session=self.session,
                event=block.event,
                budget=block.budget,
                tokens=block.tokens,
                items=[
                    InjectedItem(
                        item.id,
                        item.section,
                        item.tokens,
                        item.drift,
                        item.contested,
                        nonces.get(item.id),
                    )
                    for item in block.items
                ],
            )
        )


def _checkout(who: Principal, workspace: str) -> str:
    """The connection's checkout when the block is its own workspace's (a workspace's table
    in the config may name it by that path), else ""."""
    return who.path if workspace == who.workspace else ""


def _budget(services: Services, who: Principal, req: p.ContextBlock, workspace: str) -> int:
    """The request's own budget, else the workspace's (its table in the config, by identity
    or by the connection's checkout), else the daemon's."""
    if req.budget is not None:
        return req.budget
    path = _checkout(who, workspace)
    return services.settings().context_budget(req.event == "session_start", workspace, path)


async def block(services: Services, who: Principal, req: p.ContextBlock) -> p.ContextInjected:
    """context_block, on a search worker; its uses are queued for the writer when it returns.

    Raises:
        RecallError: ``busy`` / ``unavailable``.
    """
    workspace = who.workspace
    budget = _budget(services, who, req, workspace)
    empty = p.ContextInjected(
        event=req.event, budget=budget, tokens=0, tokenizer=host_tokens.NAME, text=""
    )
    if budget == 0:
        return empty
    log = services.injected
    given = log.given(workspace, req.session_id, restart=req.event == "session_start")
    async with services.query_vector(req.prompt) as qvec:
        found: Injection = await services.read(
            partial(
                gather,
                memory=services.memory,
                who=who,
                req=req,
                budget=budget,
                given=given,
                count=host_tokens.count,
                qvec=qvec,
                inject_from=services.settings().inject_from(workspace, _checkout(who, workspace)),
            )
        )
    log.add(workspace, req.session_id, [item.id for item in found.items])
    reply = p.ContextInjected(
        event=req.event,
        budget=budget,
        tokens=found.packed.tokens,
        tokenizer=host_tokens.NAME,
        text=found.packed.text,
        items=found.items,
        left_out=found.packed.left_out,
        given_before=found.packed.given_before,
    )
    if found.items:
        # Queued, not waited for: the hook's answer does not wait for an fsync (the log and
        # the uses commit in the writer's next batch, before any later write of this
        # connection).
        job = _Injected(who, workspace, req.session_id, reply, found.uses)
        job.on_done = _logged
        await services.submit(job)
    return reply


def _logged(job: WriteJob[None]) -> None:
    if job.error is not None:
        log.error("a context block and its uses were not recorded: %s", job.error)


async def injections(services: Services, who: Principal, req: p.ContextLog) -> p.ContextLogResult:
    """context_log, on a search worker.

    Raises:
        RecallError: ``invalid_request`` for a bad cursor; ``busy`` / ``unavailable``.
    """
    result: p.ContextLogResult = await services.read(partial(context_log.page, who=who, req=req))
    return result
