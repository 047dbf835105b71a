"""The unions of every request and every reply, and the codec: a frame is a 4-byte
big-endian length and one msgpack message."""

from __future__ import annotations

import msgspec
from msgspec import Struct

from .base import HEADER, Error, Reply, Request
from .context import ContextBlock, ContextInjected, ContextLog, ContextLogResult
from .experience import (
    ExecutionContext,
    ExperienceForgotten,
    ExperienceList,
    ExperienceListResult,
    ExperienceRecorded,
    ExperienceRolledUp,
    ExperienceSearchResult,
    ExplainNode,
    ForgetExperience,
    GetExecutionContext,
    NodeExplained,
    RecordExperience,
    RollUpExperience,
    SearchExperience,
)
from .memory import (
    FactResolved,
    MemoryChanged,
    MemoryFactResolve,
    MemoryList,
    MemoryListResult,
    MemoryRecordUse,
    MemorySearch,
    MemorySearchResult,
    MemoryShare,
    MemoryShared,
    MemoryShow,
    MemoryShown,
    MemoryStore,
    MemoryStored,
    MemoryUpdate,
    MemoryVerify,
    RelevanceShow,
    RelevanceShown,
    Stored,
    UseRecorded,
)
from .operations import OpsReplies, OpsRequests
from .session import Hello, Ping, Pong, Status, StatusResult, Welcome
from .work import (
    CaptureEpisode,
    EpisodeCaptured,
    Forget,
    Forgotten,
    VerdictSet,
    WorkResult,
    WorkSearch,
    WorkSearchResult,
)

Requests = (
    Hello
    | Ping
    | MemoryStore
    | MemorySearch
    | MemoryList
    | MemoryUpdate
    | MemoryVerify
    | MemoryShow
    | MemoryRecordUse
    | MemoryFactResolve
    | MemoryShare
    | RelevanceShow
    | Status
    | CaptureEpisode
    | WorkSearch
    | WorkResult
    | Forget
    | RecordExperience
    | SearchExperience
    | ExperienceList
    | ExplainNode
    | ForgetExperience
    | GetExecutionContext
    | RollUpExperience
    | ContextBlock
    | ContextLog
    | OpsRequests
)

Replies = (
    Error
    | Welcome
    | Pong
    | Stored
    | MemoryStored
    | MemoryChanged
    | UseRecorded
    | FactResolved
    | MemorySearchResult
    | MemoryListResult
    | MemoryShown
    | MemoryShared
    | RelevanceShown
    | StatusResult
    | EpisodeCaptured
    | WorkSearchResult
    | VerdictSet
    | Forgotten
    | ExperienceRecorded
    | ExperienceSearchResult
    | ExperienceListResult
    | NodeExplained
    | ExperienceForgotten
    | ExecutionContext
    | ExperienceRolledUp
    | ContextInjected
    | ContextLogResult
    | OpsReplies
)


# --------------------------------------------------------------------------- codec

_encoder = msgspec.msgpack.Encoder()
_request_decoder = msgspec.msgpack.Decoder(Requests)
_reply_decoder = msgspec.msgpack.Decoder(Replies)


class _IdOnly(Struct):
    id: int = 0


_id_decoder = msgspec.msgpack.Decoder(_IdOnly)


class FrameTooLarge(ValueError):
    """A frame's declared length is over :data:`MAX_FRAME`."""


def encode(msg: Request | Reply) -> bytes:
    """Encode one message body (no length prefix)."""
    return _encoder.encode(msg)


def frame(msg: Request | Reply) -> bytes:
    """Encode one message with its length prefix, ready to send."""
    body = _encoder.encode(msg)
    return HEADER.pack(len(body)) + body


def decode_request(body: bytes) -> Request:
    """Decode a request body.

    Raises:
        msgspec.DecodeError: not msgpack at all.
        msgspec.ValidationError: msgpack, but not a valid request (unknown op, bad field).
    """
    req: Request = _request_decoder.decode(body)
    req._check_strings()
    return req


def decode_reply(body: bytes) -> Reply:
    """Decode a reply body. Raises msgspec.DecodeError or msgspec.ValidationError."""
    return _reply_decoder.decode(body)


def peek_request_id(body: bytes) -> int:
    """Best-effort request id of a body that failed validation, so its error reply can name it."""
    try:
        value = _id_decoder.decode(body).id
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        # RecursionError: skipping a deeply nested field; msgspec reports that depth as
        # Python's recursion limit rather than as a DecodeError.
        return 0
    return value if isinstance(value, int) and 0 <= value <= 2**53 else 0
