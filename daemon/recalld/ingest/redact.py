"""Secret redaction: runs on every text before its first COMMIT, so no secret ever reaches the
database file, its WAL, the full-text index or an embedding.

A redacted secret keeps its place and says what it was: ``[REDACTED:aws_key]``. Rules are
ordered most specific first, so a JWT inside a URL is named as a JWT. Issuer formats (a
recognisable prefix and length) are redacted wherever they appear; generic shapes (``KEY=value``,
``key: value``, command-line flags) only when the value could be a credential: not a variable
reference, a placeholder, a path or a count (``max_tokens=4096``).

Capture runs this on every write, so one scan for trigger words (``_TRIGGERS``) spares the
rules for the many texts that hold none.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from .prefilter import any_word

__all__ = ["redact"]

# Words that make a key name a secret's.
_SECRET_WORDS = (
    r"password|passwd|pwd|secret|token|api[_-]?key|apikey|access[_-]?key|private[_-]?key"
    r"|client[_-]?secret|credential|auth[_-]?key"
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
    except (binascii.Error, UnicodeDecodeError):
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
# tests/test_redaction_linear.py feeds every rule the pathological families at the
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
        re.compile(r"(?i)\bbasic\s++([A-Za-z0-9+/]{8,}+={0,2}+)(?![A-Za-z0-9+/=])"),
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
]


# Every rule above needs one of these substrings. Most texts contain none, and one scan for
# them (see .prefilter) costs a fraction of running every rule. The scan runs on the
# lowercased text because re's IGNORECASE alternations are many times slower. A new rule adds
# its trigger here.
_TRIGGER_WORDS = (
    "private key", "putty-user-key", "age-secret-key", "eyj", "aws_?secret", "secret",
    "github_pat_", "gh[pousr]_", "gl(?:pat|rt|dt|cbt|ptt|ft|soat|imt|agent|oas)-",
    "xox[abposre]-", "xapp-", r"hooks\.slack", "discord", "sk-", "_live_", "_test_",
    "whsec_", "aiza", r"ya29\.", "gocspx-", "npm_", "pypi-", "hf_", "dckr_pat_", r"sg\.",
    "sk[0-9a-f]{32}", "key-[0-9a-f]", "do[opr]_v1_", "shp(?:at|ca|pa|ss)_", ":aa",
    r"hv[sbr]\.", "lin_(?:api|oauth)_", "dapi", "pmak-", r"\.atlasv1\.", "glsa_", "glc_",
    "nrak-", "sntry", "q~", "accountkey=", "sharedaccesskey=", "sig=", "://", "basic",
    '"auth"', "bearer", "token", "passw", "passphrase", "pwd", "_pass", "--pass",
    "api[_-]?key", "apikey", "access[_-]?key", "private[_-]?key", "auth[_-]?key",
    "credential", "-u", "--user", "mysql", "mariadb", "sshpass", "akia", "asia", "agpa",
    "aida", "aroa", "anpa", "anva", "aipa",
)  # fmt: skip
_TRIGGERS = any_word(_TRIGGER_WORDS)


# The letters outside ASCII that re's IGNORECASE matches to ASCII ones (the Kelvin sign to
# k, dotless and dotted I to i, long s to s), as those: the text a rule's needs are looked
# for in, so a case-insensitive rule is skipped only where it could not match.
_ASCII_FOLDS = str.maketrans({"\u0130": "i", "\u0131": "i", "\u017f": "s", "\u212a": "k"})


def redact(text: str) -> tuple[str, list[str]]:
    """Return ``text`` with every secret replaced, and the names of what was found."""
    found: list[str] = []
    low = text.lower()
    if _TRIGGERS.search(low) is None:
        return text, found
    folded = _folded(text, low)
    for rule in _RULES:
        if rule.needed.search(folded) is None or not all(c in folded for c in rule.also):
            continue

        def _sub(m: re.Match[str], rule: _Rule = rule) -> str:
            value = m.group(rule.group)
            if value.startswith("[REDACTED"):
                return m.group(0)
            if rule.check is not None and not rule.check(m):
                return m.group(0)
            found.append(rule.name)
            start, end = m.span(rule.group)
            whole = m.group(0)
            offset = m.start(0)
            return whole[: start - offset] + f"[REDACTED:{rule.name}]" + whole[end - offset :]

        replaced = len(found)
        text = rule.pattern.sub(_sub, text)
        if len(found) != replaced:
            folded = _folded(text, text.lower())
    return text, found


def _folded(text: str, low: str) -> str:
    """``text`` as rules' needs are looked for in it: lowercase, and (outside ASCII) with
    the letters re folds to ASCII ones folded so (str.lower keeps the dotless i and the long
    s, and makes the dotted capital I two characters)."""
    return low if text.isascii() else text.translate(_ASCII_FOLDS).lower()
