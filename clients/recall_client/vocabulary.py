"""The words a stored record is made of (its kind, authority, visibility, a use's outcome,
a staleness verdict): shared by the wire protocol, which sends them, and the daemon's store,
which holds them, so the store can name them without depending on the protocol's messages.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

__all__ = [
    "FIRST_PARTY",
    "Authority",
    "DistortionTolerance",
    "MemoryKind",
    "Outcome",
    "StalenessVerdict",
    "StoredOutcome",
    "Visibility",
]

MemoryKind = Literal["entry", "fact"]
Authority = Literal["first-party", "quoted"]
# The default authority, as the very object the Literal holds: msgspec decodes a Literal to its
# own objects and omit_defaults compares a str default by identity, so a default spelled anew
# in another module would be encoded where the Struct means to leave it out.
FIRST_PARTY: Final[Authority] = get_args(Authority)[0]
# private: only the role (person) that stored it sees it in a shared database; team: every
# role of that database does. The embedded store has one user and keeps it for migration.
Visibility = Literal["private", "team"]
DistortionTolerance = Literal["constraint"]
Outcome = Literal["used", "ignored", "contradicted", "corrected"]
# A use as stored: an outcome, or "injected" (a context hook put the memory in a prompt; a
# memory_record_use of the token it was injected with replaces it with the outcome).
StoredOutcome = Literal["used", "ignored", "contradicted", "corrected", "injected"]
StalenessVerdict = Literal["fresh", "spot_check_recommended", "spot_check_required"]
