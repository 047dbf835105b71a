"""Secret redaction: runs on every text before its first COMMIT, so no secret ever reaches the
database file, its WAL, the full-text index or an embedding.

A redacted secret keeps its place and says what it was: ``[REDACTED:aws_key]``. Rules are
ordered most specific first, so a JWT inside a URL is named as a JWT. Issuer formats (a
recognisable prefix and length) are redacted wherever they appear; generic shapes (``KEY=value``,
``key: value``, command-line flags) only when the value could be a credential: not a variable
reference, a placeholder, a path or a count (``max_tokens=4096``).

Rules read the text folded (.textfold): a zero-width space inside a token, fullwidth letters
or a Cyrillic letter in ``token=`` hide nothing from them. What they find is cut from the text
as it was sent, so everything but the secrets is stored character for character.

Capture runs this on every write, so one scan for trigger words (``_TRIGGERS``) spares the
rules for the many texts that hold none.

The rules are written here rather than loaded from a secret scanner's rule file: gitleaks'
rules (read for ideas) are RE2 patterns, linear by construction, and under Python's
backtracking ``re`` each would need the rewriting described above the rules, rule by rule.
Every rule has a secret it alone finds and a near miss it leaves alone in the corpus
(tests/support/corpus.py).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from ..domain.prefilter import any_word
from .textfold import fold

__all__ = ["redact"]

# Words that make a key name a secret's.
_SECRET_WORDS = (
    r"password|passwd|pwd|secret|token|api[_-]?key|apikey|access[_-]?key|private[_-]?key"
    r"|client[_-]?secret|credential|auth[_-]?key|passphrase|pre[_-]?shared[_-]?key"
    # A Wi-Fi or IPsec pre-shared key, as a word of its own (not upskill_level).
    r"|(?<![a-z])psk(?![a-z])"
)
_SECRET_WORD = f"(?:{_SECRET_WORDS})"
# What a key holding one of them holds, as a rule's needs.
_SECRET_NEEDS = tuple(_SECRET_WORDS.split("|"))


# Words that make such a key describe a secret rather than hold one: max_tokens, token_url,
# password_min_length, private_key_path, secret_name.
_ABOUT_WORDS = frozenset(
    "count counts limit length len size max min type types url uri endpoint file path dir name "
    "names id ids expiry expires expiration ttl timeout header field policy usage budget tokens "
    "prefix format version hint rotation algorithm alg ref scope scopes location source env "
    "store provider arn age".split()
)
# Values that stand for a secret without being one.
_REFERENCE = re.compile(
    r"(?i)^(?:\$\{?\w+\}?|\$\(.*|%\w+%|<[^>]*>?|\{\{.*|\[redacted.*|\*{3,}.*|x{4,}|\.{3}"
    r"|(?:os\.environ|os\.getenv|getenv|process\.env|import\.meta\.env|env|settings|config|secrets"
    r"|vault|self|this)\b.*|[A-Za-z_][\w.]*\(.*|none|null|nil|true|false|undefined|string|str"
    r"|required|optional|your[_-]\w*)$"
)
_PATH = re.compile(r"^(?:~|\.{1,2})?/[\w.@~-]+(?:/[\w.@~-]*)*$")
_CAMEL = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")


def _key_words(key: str) -> set[str]:
    return {w.lower() for part in re.split(r"[_.\-]+", key) for w in _CAMEL.findall(part)}


def _holds_secret(m: re.Match[str]) -> bool:
    """A ``key = value`` match whose key names a secret and whose value could be one."""
    value = m.group("value")
    if _ABOUT_WORDS & _key_words(m.group("key")):
        return False
    if _REFERENCE.match(value):
        return False
    return not (_PATH.match(value) and "+" not in value and "=" not in value)


def _looks_like_credential(m: re.Match[str]) -> bool:
    """For ``key: value`` (YAML, JSON, prose alike): long, or mixing letters with digits or
    symbols; prose says "the token: see auth.py" too."""
    value = m.group("value")
    if not _holds_secret(m):
        return False
    return len(value) >= 16 or bool(re.search(r"[0-9!@#$%^&*+/_-]", value))


def _is_basic_credential(m: re.Match[str]) -> bool:
    """base64 of ``user:password`` (HTTP basic auth, docker's config.json)."""
    try:
        decoded = base64.b64decode(m.group(1), validate=True).decode()
    except ValueError:  # not base64 (binascii.Error), not ASCII, not UTF-8 once decoded
        return False
    return ":" in decoded and decoded.isprintable()


def _mixed(m: re.Match[str]) -> bool:
    value = m.group(1)
    return (
        any(c.isupper() for c in value)
        and any(c.islower() for c in value)
        and any(c.isdigit() for c in value)
    )


def _not_reference(m: re.Match[str]) -> bool:
    value = m.group("value") if "value" in m.re.groupindex else m.group(1)
    return not _REFERENCE.match(value.strip("'\""))


def _credential_word(m: re.Match[str]) -> bool:
    """A word after "password" in prose: a credential only if it mixes letters with digits or
    symbols ("the password policy" is prose, "password Tr0ub4dor!" is not)."""
    value = m.group(1)
    return (
        bool(re.search(r"[A-Za-z]", value))
        and bool(re.search(r"[0-9!@#$%^&*+/_~-]", value))
        and not _REFERENCE.match(value)
        and not _PATH.match(value)
    )


# Flag words that make a --flag name where a secret is, not the secret: --token-file PATH.
_FLAG_ABOUT = re.compile(r"(?:file|path|stdin|dir|name|env|type|url|length|policy)(?![a-z0-9])")
_SECRET_IN = re.compile(_SECRET_WORD, re.IGNORECASE)


def _secret_flag(m: re.Match[str]) -> bool:
    """``--NAME VALUE`` where NAME holds a secret word and no word saying it is about one."""
    flag = m.group("key").lower()
    return (
        _SECRET_IN.search(flag) is not None
        and _FLAG_ABOUT.search(flag) is None
        and _not_reference(m)
    )


def _has_equals(m: re.Match[str]) -> bool:
    """A cookie given on the command line (``curl -b 'sid=...'``), not a cookie jar's path."""
    return "=" in m.group("value") and _not_reference(m)


def _opaque_value(m: re.Match[str]) -> bool:
    """A query parameter's value that is a key, not a name: letters and digits mixed."""
    value = m.group("value")
    return bool(re.search(r"[A-Za-z]", value)) and bool(re.search(r"[0-9]", value))


# Lowercase runs of three letters or more: words, as identifiers and paths are made of.
_WORDS = re.compile(r"[a-z]{3,}+")


def _random_key(m: re.Match[str]) -> bool:
    """Forty base64 characters alone are an AWS secret key only if they look random: upper
    and lower case and digits mixed (a git SHA-1 is lowercase hex), fewer than half of them
    in words (``getUserProfileSettingsForAccount2024Beta``, a path; in a random key that
    happens about once in 600), and not the base64 of text."""
    value = m.group(0)
    if not (
        value.isascii()
        and any(c.isupper() for c in value)
        and any(c.islower() for c in value)
        and any(c.isdigit() for c in value)
    ):
        return False
    if sum(len(w) for w in _WORDS.findall(value)) * 2 >= len(value):
        return False
    decoded = base64.b64decode(value)
    return sum(32 <= b < 127 or b in (9, 10, 13) for b in decoded) * 10 < len(decoded) * 9


# Issuer prefixes whose token is worth finding inside base64 (a token base64-encoded into a
# config file, a Kubernetes secret, an "echo ... | base64 -d").
_WRAPPED_PREFIXES = (
    "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "glpat-", "xoxb-", "xoxp-",
    "sk-ant-", "sk-proj-", "AKIA", "ASIA", "AIza", "npm_", "dckr_pat_", "sk_live_",
    "-----BEGIN",
)  # fmt: skip


def _base64_marks(prefix: bytes) -> list[str]:
    """The base64 characters ``prefix`` alone decides, at each of the three places (byte
    offsets mod 3) it can start at in the encoded bytes: a base64 text holds one of them
    wherever it holds the prefix."""
    marks = []
    for offset in range(3):
        encoded = base64.b64encode(bytes(offset) + prefix + bytes(3)).decode()
        first, end = 8 * offset, 8 * (offset + len(prefix))
        # Character i carries bits 6i..6i+6 of the bytes.
        marks.append(
            "".join(c for i, c in enumerate(encoded) if 6 * i >= first and 6 * i + 6 <= end)
        )
    return marks


_BASE64_MARKS = tuple(
    dict.fromkeys(m for prefix in _WRAPPED_PREFIXES for m in _base64_marks(prefix.encode()))
)


def _wraps_secret(m: re.Match[str]) -> bool:
    """A base64 run whose decoded text holds a secret redaction finds (redaction runs on the
    decoded text, three quarters of the run's length: the work stays linear in the text)."""
    run = m.group().rstrip("=")
    # A lone last character holds no whole byte; missing padding is put back.
    run = run[: len(run) - 1] if len(run) % 4 == 1 else run
    run += "=" * (-len(run) % 4)
    try:
        decoded = base64.b64decode(run, validate=True).decode("utf-8", "replace")
    except ValueError:  # not base64 (binascii.Error)
        return False
    return bool(redact(decoded)[1])


# A key named for what it is, holding hex: its key words that say it is no secret (a cache
# key is a digest of inputs, a public key is meant to be shared).
_NOT_SECRET_KEY = frozenset(
    "cache public pub id ids hash digest checksum sha etag commit ref idempotency primary "
    "foreign sort partition lookup object row dedup file path name url".split()
)


# Key names written as one word.
_KEY_COMPOUNDS = (
    "apikey", "secretkey", "privatekey", "accesskey", "masterkey", "signingkey",
    "encryptionkey", "hmackey", "authkey",
)  # fmt: skip


def _secret_hex_key(m: re.Match[str]) -> bool:
    """A key whose last word is "key" ("monkey" is not one), none of them saying it is no
    secret."""
    key = m.group("key")
    words = _key_words(key)
    names_a_key = "key" in words or key.lower().endswith(_KEY_COMPOUNDS)
    return names_a_key and not (_NOT_SECRET_KEY & words)


@dataclass(frozen=True, slots=True)
class _Rule:
    name: str
    pattern: re.Pattern[str]
    group: int | str = 0  # the part replaced: 0 = the whole match
    check: Callable[[re.Match[str]], bool] | None = None  # False: not a secret after all
    # Lowercase words (regexes), one of which every match of the pattern holds, and
    # characters every match holds too: a text that lacks them is not scanned with the rule
    # (see redact). Each word's scan is linear in the text, like the rule's own.
    needs: tuple[str, ...] = field(kw_only=True)
    also: tuple[str, ...] = field(default=(), kw_only=True)
    needed: re.Pattern[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "needed", any_word(self.needs))


# Every rule is linear in the text it scans, whatever the text (a client chooses it, up to
# 100,000 characters, and redaction runs on every write):
# - a token whose alphabet holds a non-word character (``-``, ``.``, ``+``...) starts only where
#   no character of its alphabet precedes (``_after``), not at ``\b``: otherwise every ``-``
#   inside one long run is a new start that scans the rest of the run again (quadratic);
# - runs are possessive (``++``, ``*+``, ``{n,}+``): what cannot be part of a match is never
#   retried a character shorter;
# - a key that must contain a secret word is matched as a whole run and the word looked for
#   inside it (a lookahead from the run's start), not as ``run* WORD run*``, which backtracks
#   over every split of the run (cubic);
# - a command's options are scanned up to the next command word only (a tempered scan), so
#   "mysql mysql mysql ..." does not rescan the line from every word.
# tests/reliability/test_security_redos.py feeds every rule the pathological families at the
# protocol's maximum length.


def _after(alphabet: str) -> str:
    """Start only where no character of ``alphabet`` (a class body) precedes."""
    return f"(?<![{alphabet}])"


def _options_of(commands: str) -> str:
    """The rest of a command line after one of ``commands``, lazily, up to the next of them."""
    return rf"(?:(?!\b(?:{commands})\b)[^\n|;&])*?"


# A value after a key: the quoted string whole (to its closing quote, or to where a clipped
# text was cut: "…" or the end), else up to whitespace or a delimiter.
_VALUE = (
    r"""(?P<value>(?<=")[^"\n…]{%d,}+(?=["…]|\Z)|(?<=')[^'\n…]{%d,}+(?=['…]|\Z)"""
    r"""|[^\s"',;&]{%d,}+)"""
)
# A command-line argument: quoted whole (a password is short; the bound keeps an unclosed
# quote from scanning the rest of the text), else up to whitespace.
_ARG = r"""(?P<value>'[^'\n]{1,256}'|"[^"\n]{1,256}"|[^\s'"`]{3,}+)"""
# A key holding one of the secret words somewhere in it: the run is matched whole.
_SECRET_KEY = r"(?=[A-Z0-9_.-]*?" + _SECRET_WORD + r")(?P<key>[A-Z0-9_.-]++)"
_TOKEN = r"A-Za-z0-9_\-"
_CLI = "mysql|mysqldump|mysqladmin|mariadb|mariadb-dump"
_HTTP_CLI = "curl|wget|https?|httpie"
_REGISTRY_CLI = r"docker|podman|buildah|skopeo|nerdctl|finch|oras|helm\s++registry"
_LDAP_CLI = "ldap(?:search|modify|add|delete|whoami|passwd|compare|modrdn|exop)"
# Samba's tools take -U user%password.
_SMB_CLI = "smbclient|rpcclient|smbcacls|smbcquotas|smbget|smbtree|net"
# htpasswd's flags, one cluster or several: -b, -nb, -bcB, -c -b.
_HTPASSWD_FLAGS = r"(?:[ \t]++-[A-Za-z]++)"
# A shell argument that is no option and no prompt (ssh-keygen -N '' sets no passphrase).
_POSITIONAL = r"[ \t]++(?![-*/])"


_RULES: list[_Rule] = [
    # ---- blocks (one match runs to the block's end, or to the end of the text)
    _Rule(
        "private_key",
        re.compile(
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----.*?"
            r"(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\Z)",
            re.S,
        ),
        needs=("private key",),
    ),
    _Rule(
        "private_key",
        re.compile(r"PuTTY-User-Key-File-\d++:.*?(?:Private-MAC:\s*+[0-9a-fA-F]++|\Z)", re.S),
        needs=("putty-user-key-file-",),
    ),
    _Rule(
        "private_key", re.compile(r"\bAGE-SECRET-KEY-1[0-9A-Z]{58}\b"), needs=("age-secret-key-1",)
    ),
    # ---- issuer formats
    _Rule(
        "jwt",
        re.compile(
            _after(_TOKEN) + r"eyJ[A-Za-z0-9_-]{8,}+\.eyJ[A-Za-z0-9_-]{8,}+\.[A-Za-z0-9_-]{8,}+"
        ),
        needs=("eyj",),
    ),
    _Rule(
        "aws_key",
        re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[0-9A-Z]{16}\b"),
        needs=("akia", "asia", "agpa", "aida", "aroa", "anpa", "anva", "aipa"),
    ),
    _Rule(
        "aws_secret",
        re.compile(
            r"(?i)\baws_?secret_?access_?key\b[\"']?\s*+[:=]\s*+[\"']?([A-Za-z0-9/+=]{40})"
            r"(?![A-Za-z0-9/+=])"
        ),
        1,
        needs=("aws_?secret",),
    ),
    _Rule(
        "aws_secret",
        re.compile(
            r"(?i)\bsecret(?:[ _-]?access)?(?:[ _-]?key)?\W{0,3}(?:is\W{1,3})?"
            r"([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"
        ),
        1,
        _mixed,
        # The pattern itself in lowercase: "secret" alone is in much prose.
        needs=(r"secret(?:[ _-]?access)?(?:[ _-]?key)?\W{0,3}(?:is\W{1,3})?[a-z0-9/+]{40}",),
    ),
    _Rule(
        "github_token",
        re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b"),
        needs=("gh[pousr]_", "github_pat_"),
    ),
    _Rule(
        "gitlab_token",
        re.compile(
            _after(_TOKEN) + r"gl(?:pat|rt|dt|cbt|ptt|ft|soat|imt|agent|oas)-[A-Za-z0-9_-]{20,}+"
        ),
        needs=("gl(?:pat|rt|dt|cbt|ptt|ft|soat|imt|agent|oas)-",),
    ),
    _Rule(
        "slack_token",
        re.compile(
            _after(_TOKEN) + r"(?:xox[abposre]-[A-Za-z0-9-]{10,}+|xapp-\d-[A-Za-z0-9-]{10,}+)"
        ),
        needs=("xox[abposre]-", "xapp-"),
    ),
    _Rule(
        "slack_webhook",
        re.compile(r"https://hooks\.slack\.com/services/[A-Za-z0-9/_-]++"),
        needs=(r"hooks\.slack",),
    ),
    _Rule(
        "discord_webhook",
        re.compile(
            r"https://(?:(?:ptb|canary)\.)?discord(?:app)?\.com/api/webhooks/\d++/([A-Za-z0-9_-]++)"
        ),
        1,
        needs=("discord",),
    ),
    _Rule(
        "anthropic_key",
        re.compile(_after(_TOKEN) + r"sk-ant-[A-Za-z0-9_-]{20,}+"),
        needs=("sk-ant-",),
    ),
    _Rule(
        "openai_key",
        re.compile(_after(_TOKEN) + r"sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}+"),
        needs=("sk-",),
    ),
    _Rule(
        "stripe_key",
        re.compile(r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}+\b"),
        needs=("_live_", "_test_"),
    ),
    _Rule(
        "stripe_webhook_secret",
        re.compile(_after("A-Za-z0-9_+/=") + r"whsec_[A-Za-z0-9+/=]{24,}+"),
        needs=("whsec_",),
    ),
    _Rule(
        "google_api_key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}(?![A-Za-z0-9_-])"), needs=("aiza",)
    ),
    _Rule(
        "google_oauth",
        re.compile(_after(_TOKEN + ".") + r"ya29\.[0-9A-Za-z_-]{20,}+"),
        needs=(r"ya29\.",),
    ),
    _Rule(
        "google_client_secret",
        re.compile(r"\bGOCSPX-[A-Za-z0-9_-]{28}(?![A-Za-z0-9_-])"),
        needs=("gocspx-",),
    ),
    _Rule("npm_token", re.compile(r"\bnpm_[A-Za-z0-9]{36}\b"), needs=("npm_",)),
    _Rule(
        "pypi_token",
        re.compile(_after(_TOKEN) + r"pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{20,}+"),
        needs=("pypi-",),
    ),
    _Rule("hf_token", re.compile(r"\bhf_[A-Za-z0-9]{30,}+\b"), needs=("hf_",)),
    _Rule(
        "docker_token",
        re.compile(_after(_TOKEN) + r"dckr_pat_[A-Za-z0-9_-]{20,}+"),
        needs=("dckr_pat_",),
    ),
    _Rule(
        "sendgrid_key",
        re.compile(_after(_TOKEN + ".") + r"SG\.[A-Za-z0-9_-]{16,}+\.[A-Za-z0-9_-]{16,}+"),
        needs=(r"sg\.",),
    ),
    _Rule("twilio_key", re.compile(r"\bSK[0-9a-fA-F]{32}\b"), needs=("sk[0-9a-f]{32}",)),
    _Rule("mailgun_key", re.compile(r"\bkey-[0-9a-f]{32}\b"), needs=("key-[0-9a-f]",)),
    _Rule("digitalocean_token", re.compile(r"\bdo[opr]_v1_[a-f0-9]{64}\b"), needs=("do[opr]_v1_",)),
    _Rule(
        "shopify_token",
        re.compile(r"\bshp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}\b"),
        needs=("shp(?:at|ca|pa|ss)_",),
    ),
    _Rule(
        "telegram_token",
        re.compile(r"(?<![0-9])[0-9]{8,10}:AA[A-Za-z0-9_-]{33}(?![A-Za-z0-9_-])"),
        needs=(":aa",),
    ),
    _Rule(
        "vault_token",
        re.compile(_after(_TOKEN + ".") + r"hv[sbr]\.[A-Za-z0-9_-]{24,}+"),
        needs=(r"hv[sbr]\.",),
    ),
    _Rule(
        "linear_key",
        re.compile(r"\blin_(?:api|oauth)_[A-Za-z0-9]{40}\b"),
        needs=("lin_(?:api|oauth)_",),
    ),
    _Rule("databricks_token", re.compile(r"\bdapi[a-f0-9]{32}(?:-\d)?\b"), needs=("dapi",)),
    _Rule("postman_key", re.compile(r"\bPMAK-[a-f0-9]{24}-[a-f0-9]{34}\b"), needs=("pmak-",)),
    _Rule(
        "terraform_token",
        re.compile(r"\b[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_=-]{60,}+"),
        needs=(r"\.atlasv1\.",),
    ),
    _Rule(
        "grafana_token",
        re.compile(
            _after("A-Za-z0-9_+/=")
            + r"(?:glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}|glc_[A-Za-z0-9+/]{32,}+={0,2})"
        ),
        needs=("glsa_", "glc_"),
    ),
    _Rule("newrelic_key", re.compile(r"\bNRAK-[A-Z0-9]{27}\b"), needs=("nrak-",)),
    _Rule(
        "sentry_token",
        re.compile(_after("A-Za-z0-9+/=_-") + r"sntry[su]_[A-Za-z0-9+/=_-]{40,}+"),
        needs=("sntry",),
    ),
    _Rule(
        "azure_client_secret",
        re.compile(
            r"(?<![A-Za-z0-9_~.-])[A-Za-z0-9_~.-]{3}[0-9]Q~[A-Za-z0-9_~.-]{31,34}(?![A-Za-z0-9_~.-])"
        ),
        needs=("q~",),
    ),
    _Rule(
        "azure_key",
        re.compile(
            r"(?i)"
            + _after("A-Za-z0-9+/=")
            + r"(?:AccountKey|SharedAccessKey)=([A-Za-z0-9+/=]{20,}+)"
        ),
        1,
        needs=("accountkey=", "sharedaccesskey="),
    ),
    _Rule("azure_sas", re.compile(r"[?&]sig=([A-Za-z0-9%+/=]{16,}+)"), 1, needs=("sig=",)),
    # kubeconfig: a client's private key, base64 of its PEM.
    _Rule(
        "private_key",
        re.compile(
            r"(?i)(?<![\w-])client-key-data[\"']?[ \t]*+:[ \t]*+[\"']?([A-Za-z0-9+/=]{16,}+)"
        ),
        1,
        needs=("client-key-data",),
    ),
    # A GCP service account's key id (its private_key is a PEM block, above).
    _Rule(
        "gcp_private_key_id",
        re.compile(r"(?i)private_key_id[\"']?[ \t]*+[:=][ \t]*+[\"']?([0-9a-f]{40})(?![0-9a-f])"),
        1,
        needs=("private_key_id",),
    ),
    # Password hashes (htpasswd, /etc/shadow, Django, LDAP): crackable offline.
    _Rule(
        "password_hash",
        re.compile(
            r"\$(?:apr1|1|5|6)\$[./A-Za-z0-9]{1,16}+\$[./A-Za-z0-9]{20,}+"
            r"|\$2[abxy]?\$\d\d\$[./A-Za-z0-9]{53}"
            r"|\$y\$[./A-Za-z0-9]{1,16}+\$[./A-Za-z0-9]{1,86}+\$[./A-Za-z0-9]{20,}+"
            r"|\$argon2(?:id|i|d)\$v=\d++\$m=\d++,t=\d++,p=\d++\$[A-Za-z0-9+/]{8,}+\$[A-Za-z0-9+/]{16,}+"
            r"|(?i:\{S?SHA(?:256|512)?\})[A-Za-z0-9+/]{20,}+={0,2}"
            r"|pbkdf2_sha(?:1|256)\$\d++\$[A-Za-z0-9]++\$[A-Za-z0-9+/=]{20,}+"
        ),
        needs=(r"\$(?:apr1|1|5|6|2[abxy]?|y|argon2)", r"\{s?sha", r"pbkdf2_sha"),
    ),
    # ?key=... in a URL (Google, Mapbox, many more): only a value mixing letters and digits.
    _Rule(
        "url_key",
        re.compile(
            r"(?i)[?&;](?:key|auth|signature|x-amz-signature|x-goog-signature)"
            r"=(?P<value>[A-Za-z0-9_~+=-]{12,}+)(?![^&#\s\"'<>])"
        ),
        "value",
        _opaque_value,
        needs=("key=", "auth=", "signature="),
    ),
    # A Cookie or Set-Cookie header: its whole value (a session is as good as a password).
    _Rule(
        "cookie",
        re.compile(r"(?i)(?<![\w-])(?:set-)?cookie[ \t]*+:[ \t]*+([^\s=;,\"'`]++=[^\r\n\"'`]++)"),
        1,
        needs=("cookie",),
    ),
    # A token of an issuer above, base64-encoded: a run holding one of the characters its
    # prefix decides, decoded and redacted in turn. The run is matched whole from its start
    # and the marks looked for inside it (a lookahead), so a long run is scanned once.
    _Rule(
        "base64_secret",
        re.compile(
            r"(?<![A-Za-z0-9+/])(?=[A-Za-z0-9+/]*?(?:"
            + "|".join(map(re.escape, _BASE64_MARKS))
            + r"))[A-Za-z0-9+/]{24,}+={0,2}"
        ),
        check=_wraps_secret,
        needs=tuple(dict.fromkeys(re.escape(m.lower()) for m in _BASE64_MARKS)),
    ),
    # KEY=..., signing_key: ..., "the encryption key is ...": a key holding 32 or more hex
    # digits (a git SHA or a digest in prose names no key; a cache key or a public key is no
    # secret).
    _Rule(
        "hex_key",
        re.compile(
            r"(?i)(?<![A-Z0-9_.-])(?P<key>[A-Z0-9_.-]++(?<=key)|[A-Z0-9]++[ ]key)"
            r"(?:[\"']?[ \t]*+[:=]|[ \t]++(?:is|was)\b)[ \t]*+[\"']?"
            r"(?P<value>[0-9A-F]{32,}+)(?![0-9A-Z])"
        ),
        "value",
        _secret_hex_key,
        needs=(r"key[\"']?[ \t]*[:=]", r"key[ \t]+(?:is|was)"),
    ),
    # ---- credentials by their place
    # scheme://user:password@host (user may be empty: redis://:pw@host): keep user and host.
    _Rule(
        "url_password",
        re.compile(_after("a-zA-Z0-9+.-") + r"[a-zA-Z][a-zA-Z0-9+.-]*+://[^\s:/@]*+:([^\s@/]++)@"),
        1,
        _not_reference,
        needs=("://",),
    ),
    _Rule(
        "basic_auth",
        # Only the word in any case: base64 is case-sensitive, and under IGNORECASE [A-Za-z]
        # takes the dotted I (which the decoding then refuses) into the value.
        re.compile(r"\b(?i:basic)\s++([A-Za-z0-9+/]{8,}+={0,2}+)(?![A-Za-z0-9+/=])"),
        1,
        _is_basic_credential,
        needs=("basic",),
    ),
    _Rule(
        "basic_auth",
        re.compile(r'"auth"\s*+:\s*+"([A-Za-z0-9+/]{8,}+={0,2}+)"'),
        1,
        _is_basic_credential,
        needs=('"auth"',),
    ),
    _Rule(
        "bearer_token",
        re.compile(r"(?i)\b(?:bearer|token)\s++([A-Za-z0-9._~+/-]{20,}+=*+)"),
        1,
        needs=("bearer", "token"),
    ),
    _Rule(
        "cli_password",
        re.compile(rf"\b(?:{_CLI})\b" + _options_of(_CLI) + r"\s-p(?!\s)" + _ARG),
        "value",
        _not_reference,
        needs=("mysql", "mariadb"),
    ),
    _Rule(
        "cli_password",
        re.compile(r"\bsshpass\s++-p\s*+" + _ARG),
        "value",
        _not_reference,
        needs=("sshpass",),
    ),
    # curl -u user:password, wget/httpie --user user:password (not docker's -u 1000:1000).
    _Rule(
        "basic_auth",
        re.compile(
            rf"\b(?:{_HTTP_CLI})\b"
            + _options_of(_HTTP_CLI)
            + r"""(?:\s-u\s*+|\s--user[\s=])['"]?[^\s:'"]*+:([^\s'"@]++)"""
        ),
        1,
        _not_reference,
        needs=("-u",),
    ),
    # docker login -p, and the clients that copied its flags (podman, helm registry, ...).
    _Rule(
        "cli_password",
        re.compile(
            rf"\b(?:{_REGISTRY_CLI})\s++login\b"
            + _options_of(_REGISTRY_CLI)
            + r"\s(?:-p|--password)(?:=|\s++)"
            + _ARG
        ),
        "value",
        _not_reference,
        needs=("login",),
    ),
    # aws configure set aws_secret_access_key VALUE (and the session token).
    _Rule(
        "aws_secret",
        re.compile(
            r"\baws\s++configure\s++set\s++(?:[\w-]++\.)*+(?:aws_secret_access_key|aws_session_token)"
            + _POSITIONAL
            + _ARG
        ),
        "value",
        _not_reference,
        needs=("configure",),
    ),
    _Rule(
        "cli_password",
        re.compile(
            r"\bredis-cli\b" + _options_of("redis-cli") + r"\s(?:-a|--pass)" + _POSITIONAL + _ARG
        ),
        "value",
        _not_reference,
        needs=("redis-cli",),
    ),
    # openssl's -pass/-passin/-passout pass:VALUE (env:, file:, fd: name where it is).
    _Rule(
        "cli_password",
        re.compile(r"(?<![\w-])-pass(?:in|out)?[ \t]++['\"]?pass:(?P<value>[^\s'\"]++)"),
        "value",
        needs=("-pass",),
    ),
    _Rule(
        "cli_password",
        re.compile(r"\bopenssl\b" + _options_of("openssl") + r"\s-k" + _POSITIONAL + _ARG),
        "value",
        _not_reference,
        needs=("openssl",),
    ),
    # ssh-keygen -N NEW -P OLD; a rule per flag (a rule takes one value of a command line).
    *(
        _Rule(
            "cli_password",
            re.compile(r"\bssh-keygen\b" + _options_of("ssh-keygen") + flag + _POSITIONAL + _ARG),
            "value",
            _not_reference,
            needs=("ssh-keygen",),
        )
        for flag in (r"\s-N", r"\s-P")
    ),
    # htpasswd -b FILE USER PASSWORD; with -n (print, no file) htpasswd -nb USER PASSWORD.
    _Rule(
        "cli_password",
        re.compile(
            r"\bhtpasswd"
            + rf"(?={_HTPASSWD_FLAGS}*?[ \t]++-[A-Za-z]*?b)"
            + rf"(?!{_HTPASSWD_FLAGS}*?[ \t]++-[A-Za-z]*?n)"
            + rf"{_HTPASSWD_FLAGS}++[ \t]++[^\s-]\S*+[ \t]++[^\s-]\S*+[ \t]++"
            + _ARG
        ),
        "value",
        _not_reference,
        needs=("htpasswd",),
    ),
    _Rule(
        "cli_password",
        re.compile(
            r"\bhtpasswd"
            + rf"(?={_HTPASSWD_FLAGS}*?[ \t]++-[A-Za-z]*?b)"
            + rf"(?={_HTPASSWD_FLAGS}*?[ \t]++-[A-Za-z]*?n)"
            + rf"{_HTPASSWD_FLAGS}++[ \t]++[^\s-]\S*+[ \t]++"
            + _ARG
        ),
        "value",
        _not_reference,
        needs=("htpasswd",),
    ),
    _Rule(
        "cli_password",
        re.compile(
            rf"\b(?:{_SMB_CLI})\b"
            + _options_of(_SMB_CLI)
            + r"""\s(?:-U|--user(?:name)?)(?:=|[ \t]*+)['"]?[^\s%'"]++%(?P<value>[^\s'"]++)"""
        ),
        "value",
        _not_reference,
        needs=("%",),
    ),
    _Rule(
        "cli_password",
        re.compile(rf"\b{_LDAP_CLI}\b" + _options_of(_LDAP_CLI) + r"\s-w[ \t]*+(?![-*])" + _ARG),
        "value",
        _not_reference,
        needs=("ldap",),
    ),
    # ldappasswd -a OLD -s NEW.
    *(
        _Rule(
            "cli_password",
            re.compile(r"\bldappasswd\b" + _options_of("ldappasswd") + flag + _POSITIONAL + _ARG),
            "value",
            _not_reference,
            needs=("ldappasswd",),
        )
        for flag in (r"\s-a", r"\s-s")
    ),
    # net use [Z:] \\server\share [PASSWORD] [/user:NAME] [PASSWORD]: either place.
    _Rule(
        "cli_password",
        re.compile(
            r"(?i)\bnet[ \t]++use\b" + _options_of("net") + r"\s/user:\S++" + _POSITIONAL + _ARG
        ),
        "value",
        _not_reference,
        needs=("/user:",),
    ),
    _Rule(
        "cli_password",
        re.compile(r"(?i)\bnet[ \t]++use(?:[ \t]++[A-Z*]:)?[ \t]++\\\\\S++" + _POSITIONAL + _ARG),
        "value",
        _not_reference,
        needs=("net",),
    ),
    # echo 'root:PASSWORD' | chpasswd, and chpasswd <<< 'root:PASSWORD'. What names the
    # argument a password comes after it: where clipping cut the line (…) before or inside
    # that, the argument is taken for one.
    _Rule(
        "cli_password",
        re.compile(
            r"\b(?:(?:echo|printf)[ \t]++(?:-[neE]++[ \t]++)?(?P<pipe>)"
            r"|chpasswd[ \t]*+<<<[ \t]*+)"
            r"""['"]?[^\s:'"|\\]{1,64}+:(?P<value>[^\s'"|\\…]++)(?:\\n)?['"]?"""
            r"(?(pipe)[ \t]*+(?:…|\|[ \t]*+(?:…|sudo[ \t]*+…|(?:sudo[ \t]++)?chpasswd\b)))"
        ),
        "value",
        _not_reference,
        needs=("echo", "printf", "chpasswd"),
    ),
    # echo PASSWORD | sudo -S ..., echo PASSWORD | passwd --stdin USER.
    _Rule(
        "cli_password",
        re.compile(
            r"\b(?:echo|printf)[ \t]++(?:-[neE]++[ \t]++)?"
            + r"""(?P<value>'[^'\n]{1,256}'|"[^"\n]{1,256}"|[^\s'"`|;&…]{3,}+)"""
            + r"[ \t]*+(?:…|\|[ \t]*+(?:…|sudo[ \t]*+(?:…|-S\b)"
            + r"|(?:sudo[ \t]++)?passwd[ \t]*+(?:…|--stdin\b)))"
        ),
        "value",
        _not_reference,
        needs=("echo", "printf"),
    ),
    # curl -b 'sid=...' / --cookie 'sid=...' (a path there is a cookie jar).
    _Rule(
        "cookie",
        re.compile(
            rf"\b(?:{_HTTP_CLI})\b"
            + _options_of(_HTTP_CLI)
            + r"\s(?:-b|--cookie)(?:=|[ \t]++)"
            + r"""(?P<value>'[^'\n]{1,4096}'|"[^"\n]{1,4096}"|[^\s'"]++)"""
        ),
        "value",
        _has_equals,
        needs=("-b", "--cookie"),
    ),
    # --password VALUE, --db-password VALUE, --token VALUE; not --token-file PATH,
    # --password-stdin (see _secret_flag).
    _Rule(
        "cli_secret_flag",
        re.compile(r"(?i)(?<![\w-])--(?P<key>[a-z0-9_-]++)(?:=|\s++)(?!-)" + _ARG),
        "value",
        _secret_flag,
        needs=("--",),
    ),
    _Rule(
        "netrc_password",
        re.compile(r"(?i)\bmachine\s++\S++\s++login\s++\S++\s++password\s++(\S++)"),
        1,
        needs=("machine",),
    ),
    # "the password is Tr0ub4dor!", or a line of a .netrc seen out of context.
    _Rule(
        "password",
        re.compile(
            r"""(?i)\b(?:password|passwd|passphrase)\s++(?:is\s++|was\s++)?([^\s'"`]{8,}+)"""
        ),
        1,
        _credential_word,
        needs=("passw", "passphrase"),
    ),
    # "key": "value" in JSON (a tool's input, a config file): quoted, so plainly a value.
    _Rule(
        "secret_assignment",
        re.compile(r'(?i)"' + _SECRET_KEY + r'"\s*+:\s*+"(?P<value>[^"\s]{3,}+)"'),
        "value",
        _holds_secret,
        needs=_SECRET_NEEDS,
        also=('"', ":"),
    ),
    # DB_PASS=..., SMTP_PASS=... (.env files): PASS only as a whole word of the key.
    _Rule(
        "secret_assignment",
        re.compile(
            r"(?i)(?<![A-Z0-9_])(?P<key>[A-Z0-9]++_PASS)[\"']?[ \t]*+=[ \t]*+[\"']?"
            + _VALUE % (4, 4, 4)
        ),
        "value",
        _holds_secret,
        needs=("_pass",),
    ),
    # KEY=value (.env files, shell, connection strings, CLI flags) where the key names a secret.
    _Rule(
        "secret_assignment",
        re.compile(
            r"(?i)(?<![A-Z0-9_.-])"
            + _SECRET_KEY
            + r"[\"']?[ \t]*+=[ \t]*+[\"']?"
            + _VALUE % (4, 4, 4)
        ),
        "value",
        _holds_secret,
        needs=_SECRET_NEEDS,
        also=("=",),
    ),
    # key: value (YAML, JSON, HTTP headers).
    _Rule(
        "secret_assignment",
        re.compile(
            r"(?i)(?<![A-Z0-9_.-])"
            + _SECRET_KEY
            + r"[\"']?[ \t]*+:[ \t]*+[\"']?"
            + _VALUE % (8, 8, 8)
        ),
        "value",
        _looks_like_credential,
        needs=_SECRET_NEEDS,
        also=(":",),
    ),
    # Last: forty base64 characters alone, once every rule that names them has run.
    _Rule(
        "aws_secret",
        # IGNORECASE: a letter re folds to ASCII (the dotted I) is one of the run, as it is
        # in the text its need is looked for in.
        re.compile(r"(?i)(?<![A-Z0-9/+=_.-])[A-Z0-9/+]{40}(?![A-Z0-9/+=_.-])"),
        check=_random_key,
        needs=(r"(?<![a-z0-9/+=_.-])[a-z0-9/+]{40}(?![a-z0-9/+=_.-])",),
    ),
]


# Every rule above needs one of its needs, so a text that holds none of them all is not
# scanned at all. Most texts hold none, and one scan for them (see .prefilter) costs a
# fraction of running every rule. The scan runs on the lowercased text because re's
# IGNORECASE alternations are many times slower.
_TRIGGER_WORDS = tuple(dict.fromkeys(need for rule in _RULES for need in rule.needs))
_TRIGGERS = any_word(_TRIGGER_WORDS)


# The letters outside ASCII that re's IGNORECASE matches to ASCII ones (the Kelvin sign to
# k, dotless and dotted I to i, long s to s), as those: the text a rule's needs are looked
# for in, so a case-insensitive rule is skipped only where it could not match.
_ASCII_FOLDS = str.maketrans({"\u0130": "i", "\u0131": "i", "\u017f": "s", "\u212a": "k"})


def redact(text: str) -> tuple[str, list[str]]:
    """Return ``text`` with every secret replaced, and the names of what was found.

    The rules read the text folded (.textfold: NFKC, invisible characters dropped, look-alike
    letters made Latin), and each rule reads it with what the rules before it replaced
    already replaced. What they find is cut from ``text`` itself: everything else is kept
    as it was sent, character for character."""
    found: list[str] = []
    work = fold(text)
    folded = _folded(work.text)
    if _TRIGGERS.search(folded) is None:
        return text, found
    # Where folding changed the text, the original spans replaced: (start, end, -order,
    # placeholder). Elsewhere the rules' own replacements are those of the original.
    mapped = work.starts is not None
    cuts: list[tuple[int, int, int, str]] = []
    for rule in _RULES:
        if rule.needed.search(folded) is None or not all(c in folded for c in rule.also):
            continue
        spans: list[tuple[int, int, str]] = []
        for m in rule.pattern.finditer(work.text):
            if m.group(rule.group).startswith("[REDACTED"):
                continue
            if rule.check is not None and not rule.check(m):
                continue
            found.append(rule.name)
            start, end = m.span(rule.group)
            spans.append((start, end, f"[REDACTED:{rule.name}]"))
            if mapped:
                cuts.append((*work.span(start, end), -len(cuts), spans[-1][2]))
        if spans:
            work = work.replace(spans)
            folded = _folded(work.text)
    return (_cut(text, cuts) if mapped else work.text), found


def _cut(text: str, cuts: list[tuple[int, int, int, str]]) -> str:
    """``text`` with each span replaced. A later rule's span holds any earlier one it
    touches (what replaced a span stands for all of it): the outer one, or where two spans
    are one, the later one, is what the text shows."""
    out: list[str] = []
    done = 0
    for start, end, _order, placeholder in sorted(cuts, key=lambda c: (c[0], -c[1], c[2])):
        if start < done:
            # Inside the span just replaced (or, past a character that folded to several,
            # overlapping it): its end is the further of the two.
            if end > done:
                done = end
            continue
        out += (text[done:start], placeholder)
        done = end
    out.append(text[done:])
    return "".join(out)


def _folded(text: str) -> str:
    """``text`` as rules' needs are looked for in it: lowercase, and (outside ASCII) with
    the letters re folds to ASCII ones folded so (str.lower keeps the dotless i and the long
    s, and makes the dotted capital I two characters)."""
    return text.lower() if text.isascii() else text.translate(_ASCII_FOLDS).lower()
