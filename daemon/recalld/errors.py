"""The daemon's one exception type for failures a client should see, with its wire code."""

from __future__ import annotations

from recall_client.protocol import ErrorCode

__all__ = ["RecallError"]


class RecallError(Exception):
    """A failure of one request, carried to the client as a typed ``Error`` reply."""

    def __init__(self, code: ErrorCode, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.code: ErrorCode = code
        self.message = message
        self.retryable = retryable
