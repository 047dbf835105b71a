"""The context block's host-token estimate against real byte-level BPE tokenizers (o200k_base,
cl100k_base): at or above them on prose, code, identifiers and other scripts, and linear in
its input."""

from __future__ import annotations

import base64
import random
import string
import time
import uuid

import pytest
from recalld.retrieval.host_tokens import count, estimate

from tests.support.bpe import bpe_tokens

_rng = random.Random(39)
CORPUS = {
    "english": "Always use ruff format, never black, in this repo. Production PostgreSQL moved "
    "to port 5434; run the migrations before the tests.",
    "code": 'def f(x: int) -> dict[str, list[int]]:\n    return {"a": [x, x+1]}  # why',
    "camel": "getUserName setHTTPHeader XMLHttpRequest parseJSONResponse toString",
    "shell": "cd /srv && alembic upgrade head 2>&1 | tee -a log.txt; echo $? && git rev-parse HEAD",
    "json": '{"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": "x"}}',
    "url": "https://github.com/acme/shop/blob/main/services/cart/total.py#L42 /home/me/README.md",
    "caps": "ERROR: FATAL: PGRST301 JWT EXPIRED; HTTP 503 SERVICE UNAVAILABLE",
    "punctuation": "{}[]();:,.<>/?\\|!@#$%^&*-_=+~`'\"" * 4,
    "hex": _rng.randbytes(64).hex(),
    "base64": base64.b64encode(_rng.randbytes(300)).decode(),
    "uuids": " ".join(str(uuid.UUID(int=_rng.getrandbits(128))) for _ in range(5)),
    "digits": "".join(_rng.choice(string.digits) for _ in range(200)),
    "random letters": "".join(_rng.choice(string.ascii_letters) for _ in range(300)),
    "random lowercase": "".join(_rng.choice(string.ascii_lowercase) for _ in range(200)),
    "german": "Die Produktionsdatenbank wurde auf Port 5434 verschoben; Straßenbahn Überprüfung.",
    "french": "L'équipe a déplacé la base de données de production vers le port 5434.",
    "russian": "Производственная база данных переехала на порт 5434. Сначала миграции.",
    "chinese": "生产数据库已迁移到端口5434。运行测试之前先运行迁移。鬱鬯鬲鬳鬴鬵",
    "japanese": "データベースは本番環境でポート5434に移動しました。",
    "korean": "프로덕션 데이터베이스가 포트 5434로 이동했습니다.",
    "arabic": "قاعدة البيانات انتقلت إلى المنفذ ٥٤٣٤",
    "hindi": "उत्पादन डेटाबेस पोर्ट 5434 पर चला गया",
    "emoji": "🦄🧪🚀🔥✅❌👩‍💻",
    "block line": "- [mem_01je8zq3k7v2] local agent codex from user; verified at commit "
    '3f9a2b7c0d: "prod db port: Production PostgreSQL moved to port 5434"',
}


@pytest.mark.parametrize("name", list(CORPUS))
def test_the_estimate_is_at_or_above_a_real_bpe(name: str) -> None:
    text = CORPUS[name]
    assert estimate(text) >= bpe_tokens(text)


def test_a_blocks_lines_counted_apart_cover_the_block() -> None:
    lines = list(CORPUS.values())
    assert sum(count(lines)) >= bpe_tokens("\n".join(lines))


def test_on_prose_and_code_it_is_within_two_and_a_half_times_the_real_count() -> None:
    """Not so far above that a budget buys little."""
    for name in ("english", "code", "block line", "url"):
        assert estimate(CORPUS[name]) <= 2.5 * bpe_tokens(CORPUS[name]), name


def test_it_is_linear_in_its_input() -> None:
    unit = "aaaa1[ é中" * 1_000

    def took(text: str) -> float:
        t = time.perf_counter()
        estimate(text)
        return time.perf_counter() - t

    assert took(unit * 16) < 16 * 4 * max(took(unit), 1e-4)
