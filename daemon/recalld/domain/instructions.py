"""Instruction-shaped text: what in a stored text reads as an order to the agent that will
read it, rather than as a note about the project.

:func:`instruction_signals` names what it finds, one stable name per kind (:data:`SIGNALS`,
in this order):

- ``override``: "ignore/disregard/forget ... previous/your/the above ... instructions/
  prompts/rules", "new instructions:", and the same in a few other languages;
- ``role_marker``: a chat turn or role marker: ``<|im_start|>``, ``[INST]``, ``<<SYS>>``,
  ``<system>``, a line that starts ``system:`` / ``assistant:`` / ``### System`` (also in
  other languages: ``система:``, ``système:``, ``sistema:``, ``系统:``...), or ``SYSTEM:`` in
  capitals anywhere;
- ``addresses_assistant``: words aimed at the assistant reading the text: "you are now
  ...", "from now on you", "act as", "pretend to be", "note to the AI", "if you are an AI",
  "the assistant must ...", "do not tell the user", "reveal the system prompt";
- ``pipe_to_shell``: a download (or a decoded blob) run by a shell: ``curl ... | sh``,
  ``wget -qO- ... | sudo bash``, ``bash <(curl ...)``, ``sh -c "$(curl ...)"``,
  ``iex (iwr ...)``, ``base64 -d | sh``;
- ``hidden_characters``: characters that show nothing or reorder what is shown: zero-width
  characters beside Latin text, bidirectional controls (U+202A-202E, U+2066-2069), tag
  characters (U+E0000-E007F);
- ``exfiltration``: "exfiltrate", or sending secrets (keys, tokens, credentials, an .env
  file) to somewhere; ``env | curl``, ``cat ~/.ssh/id_rsa | nc``;
- ``forged_structure``: text imitating the context hooks' block: a line starting
  ``- [mem_...`` (an id line) or one of the block's headings alone on a line.

What it reads is the text as a reader sees it, so spelling tricks do not hide an order:
each character is folded (NFKC: fullwidth and mathematical letters are ASCII ones; accents
dropped; characters that show nothing dropped; Cyrillic, Greek and Armenian look-alikes
made Latin, see ``glyphs``), letters spaced or dotted apart are joined (``s.y.s.t.e.m``,
``i g n o r e``), punctuation inside a word is dropped (``ig-nore``). Every pass and every
pattern is linear in the text: folding is one pass, the patterns use possessive runs,
windows of a bounded number of words and command scans that stop at the next command, so
the whole text is scanned, without a cap (tests/reliability/test_security_redos.py holds
every family of the scorer's pieces to that). One scan for the words each signal needs
spares the patterns for most texts.

What it cannot catch: an order phrased as ordinary advice ("the release step is to run
./scripts/release.sh"), one in a language or an encoding it has no words for, one split
across records. Its answer is a signal for the policy, not a proof.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from functools import lru_cache
from typing import get_args

from recall_client.protocol import InstructionSignal

from .glyphs import CONFUSABLES, invisible
from .prefilter import any_word

__all__ = ["SIGNALS", "instruction_signals"]

# The protocol names them (recall_client.protocol.InstructionSignal: memory hits carry them).
SIGNALS: tuple[str, ...] = get_args(InstructionSignal)

# ---- reading the text as it is seen


@lru_cache(maxsize=8192)
def _fold_char(ch: str, lower: bool) -> str:
    """``ch`` as it reads: nothing if it shows nothing; else its compatibility form with
    accents dropped, lowercased first when asked (look-alikes are mapped after case, so a
    capital Cyrillic letter and its small one fold alike), look-alikes made Latin."""
    if invisible(ch):
        return ""
    bare = "".join(c for c in unicodedata.normalize("NFKD", ch) if not unicodedata.combining(c))
    folded = unicodedata.normalize("NFKC", bare)
    return (folded.lower() if lower else folded).translate(CONFUSABLES)


_NON_ASCII = re.compile(r"[^\x00-\x7f]+")
_LETTER = r"[^\W\d_]"
# Three or more letters, each alone, the same one to three spacing or punctuation characters
# apart: "s y s t e m", "s.y.s.t.e.m", "i-g-n-o-r-e" (the same, so "i.g.n.o.r.e a.l.l" stays
# two words). Each repetition fails within a few characters, so a run is scanned once.
_SPACED = re.compile(
    rf"(?<!{_LETTER}){_LETTER}([ \t.\-_*\u00b7,/|+~]{{1,3}}){_LETTER}(?!{_LETTER})"
    rf"(?:\1{_LETTER}(?!{_LETTER}))+"
)
_NOT_LETTER = re.compile(rf"(?:(?!{_LETTER}).)+")
# Punctuation inside a word: "ig-nore", "in_structions", "pre.vious".
_IN_WORD = re.compile(rf"(?<={_LETTER})[-_.'\u2019*~^`|/\\]++(?={_LETTER})")


def _fold_chars(text: str, lower: bool) -> str:
    """Each character of ``text`` folded (see _fold_char)."""
    if text.isascii():
        return text.lower() if lower else text
    out: list[str] = []
    done = 0
    for run in _NON_ASCII.finditer(text):
        start, end = run.span()
        ascii_part = text[done:start]
        out.append(ascii_part.lower() if lower else ascii_part)
        out.extend(_fold_char(ch, lower) for ch in text[start:end])
        done = end
    tail = text[done:]
    out.append(tail.lower() if lower else tail)
    return "".join(out)


def _join_spaced(folded: str) -> str:
    return _SPACED.sub(lambda m: _NOT_LETTER.sub("", m.group()), folded)


def _fold(text: str, lower: bool) -> str:
    """``text`` as the patterns read it: folded, letters spaced apart joined."""
    return _join_spaced(_fold_chars(text, lower))


# Between two words of a phrase: any run of spacing and punctuation.
_S = r"[\W_]++"


def _word(text: str) -> str:
    """A literal of a pattern, folded as the text it is looked for in is (lowercase)."""
    return re.escape(_IN_WORD.sub("", _fold(text, lower=True))).replace("\\ ", _S)


def _words(*texts: str) -> str:
    return "|".join(_word(t) for t in texts)


# ---- what each signal looks for


# Up to n more words between two words of a phrase (a bounded window: the scan from one
# word reads at most n words further).
def _gap(n: int) -> str:
    return rf"(?:{_S}\w++){{0,{n}}}?{_S}"


# Who an order to the reader names. Not "agent", "model", "bot" or "cursor" alone: notes
# speak of ssh agents, data models, chat bots and database cursors.
_ADDRESSEES = _words(
    "ai", "assistant", "assistants", "llm", "llms", "language model", "ai model", "ai agent",
    "ai agents", "coding agent", "claude", "chatgpt", "copilot", "codex", "gemini",
)  # fmt: skip

# Override: a verb of dropping, then what is dropped: the earlier instructions.
_DROP = _words(
    # Stems: "ignor" is also ignoring, ignoriere, ignora, ignorez, ignoruj.
    "ignor", "disregard", "forget", "forgot", "overrid", "overrul", "bypass", "discard", "neglect",
    "vergiss", "oubli", "olvida", "esquece", "игнор", "проигнор", "забудь",
)  # fmt: skip
_EARLIER = _words(
    "previous", "prior", "above", "earlier", "preceding", "foregoing", "former", "original",
    "all", "any", "every", "your", "system", "safety", "initial", "existing",
    "vorherigen", "bisherigen", "alle", "anteriores", "todas", "precedentes", "toutes",
    "precedenti", "tutte", "anteriori", "предыдущие", "все", "прежние",
)  # fmt: skip
_ORDERS = _words(
    "instruction", "prompt", "guideline", "directive", "guidance", "rule", "constraint",
    "context", "polic", "anweisung", "instruccion", "istruzion", "instrucao", "instrucoes",
    "instrukcj", "инструкци", "указани", "правил",
)  # fmt: skip
_AFTER = _words("above", "before", "previously", "so far", "until now", "earlier")

_OVERRIDE = [
    re.compile(rf"\b(?:{_DROP})\w{{0,8}}+{_gap(6)}(?:{_EARLIER})\w{{0,4}}+{_gap(2)}(?:{_ORDERS})"),
    re.compile(rf"\b(?:{_DROP})\w{{0,8}}+{_gap(3)}(?:{_ORDERS})\w{{0,6}}+{_gap(2)}(?:{_AFTER})\b"),
    re.compile(
        rf"\b(?:new|updated|real|actual|revised|true){_S}(?:system{_S})?instructions?[ \t]*+:"
    ),
    # Scripts without spaces between words: a short span of characters.
    re.compile(
        rf"(?:{_words('忽略', '无视', '無視', '忘记', '忘掉', '忽視', '無視して')})"
        rf"[^\n]{{0,12}}?(?:{_words('指令', '指示', '提示', '说明', '規則', '规则', '命令')})"
    ),
]

# Role markers. The role words a turn is named by, in the languages people write notes in.
_ROLE_WORDS = (
    "system", "assistant", "human",
    "система", "système", "sistema", "sistem", "systeem", "rendszer", "järjestelmä",
    "σύστημα", "系统", "系統", "システム", "시스템", "hệ thống", "نظام", "מערכת", "सिस्टम",
    "assistent", "assistente", "asistente", "asystent", "asistan", "ассистент", "помощник",
    "助手", "助理", "アシスタント", "어시스턴트", "المساعد", "עוזר",
)  # fmt: skip
_ROLES = _words(*_ROLE_WORDS)
# The same in capitals, for a marker in the middle of a line (cased scripts only: "操作系统:"
# is "operating system:").
_ROLES_UPPER = "|".join(
    re.escape(_fold(w.upper(), lower=False)) for w in _ROLE_WORDS if w.upper() != w.lower()
)
_ROLE_MARKER_LOW = re.compile(
    # Chat templates' control tokens, anywhere.
    r"<\|[a-z_]{2,30}\|>|\[/?inst\]|<</?sys>>|</?(?:system|assistant|human|im_start|im_end)>"
    r"|<(?:start|end)_of_turn>"
    # A role in brackets with words after it on its line: "[system]: ...", "[system] You".
    r"|[\[(](?:system|sys|assistant)[\])][ \t]*+(?=[^\s])"
    # A line that opens with a role word and a colon ("system:", "> Assistant:", fullwidth "系统:").
    rf"|^[ \t>*#_-]*+[\[(<*]?(?:{_ROLES})[\])>*]?[ \t]*+:"
    # A markdown heading that is a role: "### System", "### Instruction:".
    r"|^[ \t]*+#{1,6}[ \t]*+(?:system(?:[ \t]++prompt)?|assistant|human)[ \t]*+:?[ \t]*+$"
    r"|^[ \t]*+#{1,6}[ \t]*+(?:instructions?|response)[ \t]*+:",
    re.MULTILINE,
)
_ROLE_MARKER_CASED = re.compile(rf"(?<!{_LETTER})(?:{_ROLES_UPPER})[ \t]*+:(?!//)")

# "You are now" in other languages.
_YOU_ARE_NOW = (
    "ты теперь", "вы теперь", "tu es maintenant", "vous êtes maintenant", "du bist jetzt",
    "du bist nun", "ahora eres", "ora sei", "agora você é", "你现在是", "あなたは今",
)  # fmt: skip
_MODALS = (
    "must", "should", "shall", "need", "has", "is", "never", "always", "do", "dont", "forget",
    "ignore",
)  # fmt: skip
_ADDRESSES = [
    re.compile(
        rf"\b(?:you{_S}are|youre|you{_S}re|u{_S}r){_S}now{_S}"
        rf"(?:an?|the|my|dan|free|unrestricted|jailbroken|acting|operating|root|admin"
        rf"|(?:in|entering){_S}(?:\w++{_S})?mode)\b"
    ),
    re.compile(rf"\bfrom{_S}now{_S}on{_S}(?:\w++{_S}){{0,1}}?(?:you|{_ADDRESSEES})\b"),
    re.compile(rf"\b(?:pretend|roleplay|role{_S}play){_S}(?:to{_S}be|you{_S}are|that{_S}you)\b"),
    re.compile(
        rf"\b(?:you(?:{_S}(?:will|must|should|shall|now|to|can))?|please|now)[ \t]*+act{_S}as\b"
    ),
    re.compile(rf"(?:^|[.!?:;,])[ \t]*+act{_S}as\b", re.MULTILINE),
    re.compile(rf"\bas{_S}an?{_S}(?:{_ADDRESSEES}){_gap(2)}you\b"),
    re.compile(
        rf"\b(?:note|message|instructions?|attention|reminder|memo|hint|warning){_S}(?:to|for)"
        rf"{_S}(?:(?:the|any|all|every){_S})?(?:{_ADDRESSEES})\b"
    ),
    re.compile(rf"\b(?:dear|attention|hey|hello|hi){_S}(?:{_ADDRESSEES})\b"),
    re.compile(rf"\b(?:{_ADDRESSEES}|agents?|models?){_gap(3)}reading{_S}this\b"),
    re.compile(rf"\bwhen{_S}you{_S}read{_S}this\b"),
    re.compile(rf"\bif{_S}you{_S}are{_S}an?{_S}(?:{_ADDRESSEES}|agent)\b"),
    re.compile(
        rf"\b(?:the{_S})?(?:{_ADDRESSEES})[\W_]{{0,3}}+(?:must|should|shall|needs?{_S}to"
        rf"|has{_S}to|is{_S}required{_S}to|never|always|do{_S}not|dont|forget|ignore)\b"
    ),
    re.compile(
        rf"\b(?:do{_S}not|dont|never|without)"
        rf"{_S}(?:tell|inform|notify|mention|ask|alert|warn)\w{{0,3}}+{_gap(2)}(?:the{_S})?user\b"
    ),
    re.compile(
        rf"\b(?:reveal|print|show|output|repeat|leak|dump|disclose){_gap(2)}"
        rf"(?:system{_S}prompt|hidden{_S}(?:prompt|instructions)|initial{_S}instructions)"
    ),
    re.compile(_words(*_YOU_ARE_NOW)),
]  # fmt: skip

_FETCH = r"curl|wget|fetch|iwr|irm|invoke-webrequest|invoke-restmethod|aria2c|httpie|xh"
_SOURCE = rf"{_FETCH}|base64"
# What runs what it reads: a shell (not "sh -c '...'", which runs its argument), or an
# interpreter given nothing but "-" (not "python3 -m json.tool", "perl -pe ...": filters).
_SHELL = (
    r"(?:sudo[ \t]++(?:-\S++[ \t]++)*+)?(?:(?:/usr)?/bin/)?(?:env[ \t]++)?"
    r"(?:(?:(?:ba|z|k|da|fi|c|tc|a|mk)?sh|iex|invoke-expression|pwsh|powershell)\b(?![ \t]++-c\b)"
    r"|(?:python[0-9.]*+|perl|ruby|node|php|bun|deno|lua|osascript)\b(?:[ \t]++-)?[ \t]*+"
    r"(?=$|[;&|)`'\"]))"
)
_PIPE_TO_SHELL = re.compile(
    # A download piped (through at most two more commands) into a shell. The scan from a
    # download reads up to the next one only: "curl curl curl ..." is read once.
    rf"\b(?:{_FETCH}|base64[ \t]++(?:-d|--decode|-D))\b"
    rf"(?:(?!\b(?:{_SOURCE})\b)[^\n|])*+\|(?:[^\n|]*+\|){{0,2}}?[ \t]*+{_SHELL}"
    # Process substitution, command substitution run by a shell, eval of a download.
    rf"|(?:\b(?:(?:ba|z|k|da)?sh|source)|(?<![\w.])\.)[ \t]*+<\([ \t]*+(?:{_FETCH})\b"
    rf"|\b(?:(?:ba|z|k|da)?sh|python[0-9.]*+|perl|ruby|node)[ \t]++-c[ \t]++[\"']?\$\([ \t]*+"
    rf"(?:{_FETCH})\b"
    rf"|\beval[ \t]++[\"']?(?:\$\(|`)[ \t]*+(?:{_FETCH})\b"
    # PowerShell: iex (iwr ...), iex (New-Object Net.WebClient).DownloadString(...).
    r"|\b(?:iex|invoke-expression)\b[ \t]*+\(?[ \t]*+(?:\(?[ \t]*+new-object[ \t]++"
    rf"(?:system\.)?net\.webclient\)?\.downloadstring|(?:{_FETCH})\b)",
    re.MULTILINE,
)

_HIDDEN = re.compile(
    # Zero-width joiners and direction marks belong in some scripts (emoji sequences,
    # Persian, Hebrew): hidden only beside ASCII text.
    "[\u200b\u202a-\u202e\u2060-\u2064\u2066-\u2069\u180e\U000e0000-\U000e007f]"
    "|(?<=[\x00-\x7f])[\u200c-\u200f]|[\u200c-\u200f](?=[\x00-\x7f])"
    # A byte order mark anywhere but first.
    "|(?<=.)\ufeff",
    re.DOTALL,
)

_SECRETS = _words(
    "secret", "secrets", "token", "tokens", "credential", "credentials", "creds", "api key",
    "api keys", "apikey", "password", "passwords", "passphrase", "private key", "private keys",
    "ssh key", "ssh keys", "idrsa", "env file", "env files", "dotenv", "environment variables",
    "env vars", "cookies", "session cookie", "keychain", "seed phrase", "wallet",
)  # fmt: skip
_EXFILTRATION = [
    re.compile(r"\bexfiltrat"),
    re.compile(
        rf"\b(?:send|post|upload|e?mail|forward|transmit|leak)\w{{0,3}}+{_gap(5)}"
        # Somewhere: "send the token in the Authorization header" is how a client works.
        rf"(?:{_SECRETS})\b(?:{_S}\w++){{0,6}}?{_S}to{_S}\w"
    ),
]
# Secrets dumped into a network command on one line.
_DUMP_TO_NETWORK = re.compile(
    r"\b(?:env|printenv|set|cat[ \t]++[^\n|;&]{1,200}+)[ \t]*+\|[ \t]*+"
    r"(?:curl|wget|nc|ncat|netcat|socat|telnet)\b"
)
_SECRET_FILE = re.compile(
    r"\.env\b|id_(?:rsa|ed25519|ecdsa|dsa)\b(?!\.pub)|\.ssh/|\.aws/|\.netrc|\.npmrc|\.pypirc"
    r"|\.git-credentials|\.docker/config|/etc/shadow|\.kube/config"
)

_HEADINGS = _words(
    "current facts", "relevant memories", "unresolved failures of the last session",
    "memories citing files changed since the last session",
)  # fmt: skip
_FORGED_STRUCTURE = re.compile(
    r"^[ \t>]*+[-*•][ \t]*+\[(?:mem|ep|exp|les|ctx)_"
    rf"|^[ \t>#*]*+(?:{_HEADINGS})[ \t]*+:[ \t]*+$",
    re.MULTILINE,
)


def _dumps_secrets(low: str) -> bool:
    for m in _DUMP_TO_NETWORK.finditer(low):
        head = m.group()
        if not head.startswith("cat") or _SECRET_FILE.search(head):
            return True
    return False


def _found(patterns: list[re.Pattern[str]], text: str) -> bool:
    return any(p.search(text) for p in patterns)


# ---- sparing the patterns
#
# Every match of a signal's patterns holds one of the signal's needs: a word of it in the
# text squashed (folded, lowercase, every character but letters and digits dropped, so a
# phrase is its words run together and no spacing or punctuation trick hides it), or a
# mark of it in the folded text. One scan of the squashed text for all of them spares the
# patterns for the many texts that hold none; tests/ingest/test_instructions.py checks
# the needs against the patterns.
_NOT_ALNUM = re.compile(r"[\W_]+")
_ASCII_NOT_ALNUM = str.maketrans(
    "", "", "".join(c for c in map(chr, range(128)) if not c.isalnum())
)


def _squash(folded: str) -> str:
    if folded.isascii():
        return folded.translate(_ASCII_NOT_ALNUM)
    return _NOT_ALNUM.sub("", folded)


def _squashed(*texts: str) -> tuple[str, ...]:
    return tuple(_squash(_fold(t, lower=True)) for t in texts)


_ADDRESSEE_NAMES = ("assistant", "llm", "language", "claude", "chatgpt", "copilot", "codex",
                    "gemini", "coding")  # fmt: skip
_NEEDS: dict[str, tuple[str, ...]] = {
    "override": (
        "ignor", "disregard", "forget", "forgot", "overrid", "overrul", "bypass", "discard",
        "neglect", "vergiss", "oubli", "olvida", "esquece", "instruction",
        *_squashed("игнор", "проигнор", "забудь", "忽略", "无视", "無視", "忘记", "忘掉", "忽視"),
    ),
    "role_marker": (
        "inst", "sys", "assistant", "human", "imstart", "imend", "ofturn", "instruction",
        "response", *_squashed(*_ROLE_WORDS),
    ),
    "addresses_assistant": (
        "renow", "urnow", "fromnowon", "pretend", "roleplay", "actas", "asa", "readingthis",
        "youreadthis", "youarea", "systemprompt", "hiddenprompt",
        "hiddeninstructions", "initialinstructions", "aimodel", "aiagent", *_ADDRESSEE_NAMES,
        *(f"{w}{to}" for w in ("note", "message", "instruction", "instructions", "attention",
                               "reminder", "memo", "hint", "warning") for to in ("to", "for")),
        *(f"{w}ai" for w in ("dear", "attention", "hey", "hello", "hi")),
        *(f"ai{m}" for m in _MODALS), *_squashed(*_YOU_ARE_NOW),
        *(f"{no}{verb}" for no in ("not", "dont", "never", "without")
          for verb in ("tell", "inform", "notify", "mention", "ask", "alert", "warn")),
    ),
    "pipe_to_shell": ("iex", "invokeexpression"),
    "exfiltration": (
        "exfiltrat", "send", "post", "upload", "mail", "forward", "transmit", "leak",
    ),
    "forged_structure": (
        "currentfacts", "relevantmemories", "unresolvedfailuresofthelastsession",
        "memoriescitingfiles",
    ),
}  # fmt: skip
# The marks, looked for in the folded text.
_MARKS: dict[str, tuple[str, ...]] = {
    "role_marker": ("<|",),
    "pipe_to_shell": ("|", "<(", "$(", "`"),
    "exfiltration": ("|",),
    "forged_structure": ("[",),
}
# One scan for every need (words grouped by first character, see .prefilter), then, where
# one is found, a scan per signal.
_ANY_NEED = any_word([re.escape(w) for w in dict.fromkeys(w for ws in _NEEDS.values() for w in ws)])
_SIGNAL_NEEDS = {
    name: any_word([re.escape(w) for w in dict.fromkeys(needs)]) for name, needs in _NEEDS.items()
}
# Every mark holds one of these.
_MARK = re.compile(r"[|\[`]|[<$]\(")


def _wanted(folded: str) -> set[str]:
    """The signals whose needs the folded text holds (its squashed form a word, or itself
    a mark)."""
    wanted: set[str] = set()
    if _MARK.search(folded) is not None:
        wanted = {name for name, marks in _MARKS.items() if any(m in folded for m in marks)}
    squashed = _squash(folded)
    if _ANY_NEED.search(squashed) is not None:
        wanted.update(
            name
            for name, needs in _SIGNAL_NEEDS.items()
            if name not in wanted and needs.search(squashed) is not None
        )
    return wanted


def instruction_signals(text: str) -> tuple[str, ...]:
    """Names of the instruction-shaped signals found in text, in a fixed order; () when none."""
    hidden = not text.isascii() and _HIDDEN.search(text) is not None
    folded = _fold_chars(text, lower=True)
    wanted = _wanted(folded)
    if not wanted:
        return ("hidden_characters",) if hidden else ()
    low = _join_spaced(folded)
    words = _IN_WORD.sub("", low)
    found = {name for name in wanted if _CHECKS[name](text, low, words)}
    if hidden:
        found.add("hidden_characters")
    return tuple(name for name in SIGNALS if name in found)


def _role_marker(text: str, low: str, words: str) -> bool:
    if _ROLE_MARKER_LOW.search(low) is not None:
        return True
    return ":" in low and _ROLE_MARKER_CASED.search(_fold(text, lower=False)) is not None


# Each signal but hidden_characters (read from the text as sent): found in (text, the
# folded text, its words).
_CHECKS: dict[str, Callable[[str, str, str], bool]] = {
    "override": lambda _text, _low, words: _found(_OVERRIDE, words),
    "role_marker": _role_marker,
    "addresses_assistant": lambda _text, _low, words: _found(_ADDRESSES, words),
    "pipe_to_shell": lambda _text, low, _words: _PIPE_TO_SHELL.search(low) is not None,
    "exfiltration": lambda _text, low, words: _found(_EXFILTRATION, words) or _dumps_secrets(low),
    "forged_structure": lambda _text, low, _words: _FORGED_STRUCTURE.search(low) is not None,
}
