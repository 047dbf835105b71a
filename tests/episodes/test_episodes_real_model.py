"""work_search's semantic channel with the real bundled all-MiniLM-L6-v2: meaning, not words,
under the same reader contract."""

from __future__ import annotations

import pytest
from recall_client import protocol as p

from tests.support.daemon import DaemonFactory, DaemonProcess
from tests.support.episodes import capture, embedded, ids, search, settled

pytestmark = pytest.mark.real_model

EPISODES = [
    "Bumped the numpy pin to 2.1 and regenerated the lockfile",
    "Our cat photos upload failed because the S3 bucket policy denied PutObject",
    "Renamed the CLI flag --verbose to --log-level",
]
PARAPHRASE = "storage permissions blocked writing pictures to the cloud"


async def test_a_paraphrase_is_found_semantically_and_never_across_the_partition(
    daemon_factory: DaemonFactory,
) -> None:
    d: DaemonProcess = daemon_factory(embedder="minilm")
    await d.start(within_s=60)
    assert (await d.status(wait_model_s=120)).model.state == "ready"
    async with d.client(agent="a") as a:
        mine = [await capture(a, text) for text in EPISODES]
    async with d.client(agent="b") as b:
        theirs = await capture(b, "Image uploads to the object store were rejected: access denied")
    await settled(d, *(r.record_id for r in mine), theirs.record_id)
    await embedded(d, 4, within_s=120)

    async with d.client(agent="a") as a:
        lexical = await search(a, query=PARAPHRASE)
        fused = await search(a, query=PARAPHRASE, semantic=True)
        await a.call(p.Forget(record_id=mine[1].record_id), p.Forgotten)
        after = await search(a, query=PARAPHRASE, semantic=True)
    assert lexical.results == [], "the paraphrase must share no word with the episode"
    assert fused.floor is not None and fused.floor.semantic_used
    # Unrelated episodes stay out (cosine floor), and so does agent b's near-duplicate.
    assert ids(fused) == [mine[1].record_id]
    assert theirs.record_id not in ids(fused)
    assert mine[1].record_id not in ids(after)
    assert await d.stop() == 0
