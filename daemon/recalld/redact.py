"""Secret redaction: runs on every text before its first COMMIT, so no secret ever reaches the
database file, its WAL, the full-text index or an embedding.

A redacted secret keeps its place and says what it was: ``[REDACTED:aws_key]``. Patterns are
ordered most specific first, so a JWT inside a URL is named as a JWT.
"""

from __future__ import annotations

import re

__all__ = ["redact"]

_SECRET_KEY = (
    r"(?:password|passwd|pwd|secret|token|api[_-]?key|apikey|access[_-]?key|private[_-]?key"
    r"|client[_-]?secret|credential)"
)

# (name, pattern, group to replace: 0 = the whole match)
_PATTERNS: list[tuple[str, re.Pattern[str], int]] = [
    (
        "private_key",
        re.compile(
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----.*?"
            r"(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\Z)",
            re.S,
        ),
        0,
    ),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), 0),
    ("aws_key", re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[0-9A-Z]{16}\b"), 0),
    (
        "aws_secret",
        re.compile(
            r"(?i)\baws_?secret_?access_?key\b[\"']?\s*[:=]\s*[\"']?([A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])"
        ),
        1,
    ),
    ("github_token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b"), 0),
    ("gitlab_token", re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}\b"), 0),
    ("slack_token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b"), 0),
    ("slack_webhook", re.compile(r"https://hooks\.slack\.com/services/[A-Za-z0-9/_-]+"), 0),
    ("anthropic_key", re.compile(r"\bsk-ant-[A-Za-z0-9_-]{20,}\b"), 0),
    ("openai_key", re.compile(r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}\b"), 0),
    ("stripe_key", re.compile(r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}\b"), 0),
    ("google_api_key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b"), 0),
    ("google_oauth", re.compile(r"\bya29\.[0-9A-Za-z_-]{20,}\b"), 0),
    ("npm_token", re.compile(r"\bnpm_[A-Za-z0-9]{36}\b"), 0),
    ("pypi_token", re.compile(r"\bpypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{20,}\b"), 0),
    ("hf_token", re.compile(r"\bhf_[A-Za-z0-9]{30,}\b"), 0),
    ("sendgrid_key", re.compile(r"\bSG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}\b"), 0),
    ("twilio_key", re.compile(r"\bSK[0-9a-fA-F]{32}\b"), 0),
    ("azure_key", re.compile(r"(?i)\b(?:AccountKey|SharedAccessKey)=([A-Za-z0-9+/=]{20,})"), 1),
    # scheme://user:password@host — keep the user and host, drop the password (the user may
    # be empty: redis://:password@host).
    ("url_password", re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@]*:([^\s@/]+)@"), 1),
    # Shell commands, as agent hooks record them: curl -u user:password, an
    # "Authorization: Basic" header, mysql -pPASSWORD, --password VALUE.
    ("basic_auth", re.compile(r"(?:\s-u|--user)\s+['\"]?[^\s:'\"]+:([^\s'\"]+)"), 1),
    ("basic_auth", re.compile(r"(?i)\bauthorization:\s*basic\s+([A-Za-z0-9+/]{8,}={0,2})"), 1),
    ("cli_password", re.compile(r"\b(?:mysql|mysqldump|mysqladmin)\b[^\n|;&]*?\s-p([^\s-]\S*)"), 1),
    (
        "cli_secret_flag",
        re.compile(
            # --password VALUE, --db-password VALUE; not --token-file PATH, --password-stdin.
            r"(?i)--(?![a-z0-9-]*(?:file|path|stdin|dir|name|env|type|url|length|policy)\b)"
            r"[a-z0-9-]*" + _SECRET_KEY + r"[a-z0-9-]*\s+['\"]?([^\s'\"-][^\s'\"]{3,})"
        ),
        1,
    ),
    ("bearer_token", re.compile(r"(?i)\b(?:bearer|token)\s+([A-Za-z0-9._~+/-]{20,}=*)"), 1),
    # "key": "value" in JSON (a tool's input or config): quoted, so plainly a value.
    (
        "secret_assignment",
        re.compile(r'(?i)"[A-Z0-9_.-]*' + _SECRET_KEY + r'[A-Z0-9_.-]*"\s*:\s*"([^"\s]{3,})"'),
        1,
    ),
    # DB_PASS=..., SMTP_PASS=... (.env files): PASS only as a whole word of the key.
    ("secret_assignment", re.compile(r"(?i)\b[A-Z0-9]+_PASS\s*=\s*[\"']?([^\s\"',;]{4,})"), 1),
    # KEY=value (.env files, shell, CLI flags) where the key names a secret.
    (
        "secret_assignment",
        re.compile(
            r"(?i)\b[A-Z0-9_.-]*" + _SECRET_KEY + r"[A-Z0-9_.-]*[\"']?\s*=\s*[\"']?([^\s\"',;]{4,})"
        ),
        1,
    ),
    # key: value (YAML, JSON). Prose also says "token: ..." so the value must look like a
    # credential: long, or mixing letters with digits or symbols.
    (
        "secret_assignment",
        re.compile(
            r"(?i)\b[A-Z0-9_.-]*" + _SECRET_KEY + r"[A-Z0-9_.-]*[\"']?\s*:\s*[\"']?"
            r"((?=[^\s\"',;]*[0-9!@#$%^&*+/_-])[^\s\"',;]{8,}|[^\s\"',;]{16,})"
        ),
        1,
    ),
]

_PLACEHOLDER = re.compile(r"\[REDACTED:[a-z_]+\]")

# Every pattern above needs one of these substrings. Most texts contain none, and one scan for
# them costs a fraction of running every pattern: capture runs this on every write. The scan
# runs on the lowercased text because re's IGNORECASE alternations are many times slower.
_TRIGGERS = re.compile(
    r"private key|eyj|aws_?secret|github_pat_|glpat-|xox[abposr]-|hooks\.slack|sk-|_live_"
    r"|_test_|aiza|ya29\.|npm_|pypi-|hf_|sg\.|accountkey=|sharedaccesskey=|://|bearer|token"
    r"|passw|pwd|secret|api[_-]?key|apikey|access[_-]?key|private[_-]key|credential"
    r"|_pass|-u\s|--user|authorization|mysql"
    r"|akia|asia|agpa|aida|aroa|anpa|anva|aipa|gh[pousr]_|sk[0-9a-f]{32}"
)


def redact(text: str) -> tuple[str, list[str]]:
    """Return ``text`` with every secret replaced, and the names of what was found."""
    found: list[str] = []
    if _TRIGGERS.search(text.lower()) is None:
        return text, found
    for name, pattern, group in _PATTERNS:

        def _sub(m: re.Match[str], name: str = name, group: int = group) -> str:
            value = m.group(group)
            if _PLACEHOLDER.fullmatch(value) or value.startswith("[REDACTED"):
                return m.group(0)
            found.append(name)
            start, end = m.span(group)
            whole_start = m.start(0)
            whole = m.group(0)
            return (
                whole[: start - whole_start]
                + f"[REDACTED:{name}]"
                + whole[end - whole_start :]
            )

        text = pattern.sub(_sub, text)
    return text, found
