"""The parts of a connection profile that are sent or matched: templates, JSON conditions, open
messages and application pings (pure; shared by API and worker; see :mod:`streamlease.profile`).

A *template* is text with placeholders, each replaced when the worker connects:

- ``{next_seq}`` / ``{last_seq}``: the resume point (the checkpoint + 1, the checkpoint). Before
  the stream's first delivery (checkpoint :data:`~streamlease.seqs.NOTHING_DELIVERED`)
  ``{next_seq}`` is 0, the first seq there is, and ``{last_seq}`` is -1 ("after nothing"); a
  query parameter or header whose value holds ``{last_seq}`` is then left out instead
  (:meth:`Template.leaves_out`), so the connect states no resume point and the upstream starts
  the feed from its beginning, as on a first subscription;
- ``{secret:<name>}`` / ``{secret:<name>#<key>}``: a Secrets Manager secret (or one key of a JSON
  one), read by the worker, never stored, logged or shown. In a JSON message the value is put in
  JSON-escaped, so a secret with a quote in it cannot change the message's shape.

A *condition* is a JSON object that an answer matches when it holds every key of the condition
with an equal value (nested objects the same way); an answer that is a JSON array matches when
one of its elements does (``[{"ev":"status","status":"auth_success"}]`` matches
``{"status": "auth_success"}``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from streamlease.seqs import NOTHING_DELIVERED

NEXT_SEQ: Final = "{next_seq}"
LAST_SEQ: Final = "{last_seq}"
SECRET_MARKER: Final = "secret:"  # noqa: S105 - the marker of a reference, not a secret
MAX_OPEN_MESSAGE_CHARS: Final = 4096
MAX_OPEN_MESSAGES: Final = 5
MAX_CONDITION_KEYS: Final = 10
MAX_CONDITION_DEPTH: Final = 4
MAX_CONTROL_CONDITIONS: Final = 5
DEFAULT_ANSWER_TIMEOUT_SECONDS: Final = 10
MAX_ANSWER_TIMEOUT_SECONDS: Final = 60
MIN_PING_SECONDS: Final = 1
MAX_PING_SECONDS: Final = 3600

_PATH_PART: Final = re.compile(r"^[A-Za-z0-9_$-]{1,64}$")
_SECRET_NAME: Final = re.compile(r"^[A-Za-z0-9/_+=.@:-]{1,2048}$")
_SECRET_PLACEHOLDER: Final = re.compile(r"\{secret:([^{}]+)\}")
_ANY_PLACEHOLDER: Final = re.compile(r"\{(?:secret:([^{}]+)|(next_seq)|(last_seq))\}")
SENSITIVE_WORDS: Final = (
    "token",
    "secret",
    "password",
    "passphrase",
    "signature",
    "credential",
    "apikey",
    "api_key",
    "api-key",
)
"""Parts of a name (header, JSON key, query parameter) that say its value is a credential."""
_LOGIN_WORDS: Final = frozenset({"auth", "authenticate", "authorize", "login"})
_SENSITIVE_JSON_KEYS: Final = frozenset({"key", "auth", "params"})
"""JSON keys whose literal value in a login message (one with an ``auth``/``login`` value) is
taken for a credential (Polygon's ``params``, Alpaca's ``key``)."""
_TEXT_CREDENTIAL: Final = re.compile(
    r"(?i)(" + "|".join(re.escape(w) for w in SENSITIVE_WORDS) + r")\w*\s*[=:]\s*(?!\{secret:)\w"
)


class TemplateError(ValueError):
    """A template, condition or message breaks a rule; ``field`` names the part at fault
    (relative: ``open_messages.0.send``)."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class SecretRef:
    """A reference to a Secrets Manager secret (optionally one key of a JSON secret)."""

    name: str
    """Secret name or ARN."""
    key: str | None = None

    @property
    def text(self) -> str:
        """The reference as written (``name`` or ``name#key``)."""
        return self.name if self.key is None else f"{self.name}#{self.key}"

    @classmethod
    def parse(cls, text: str) -> SecretRef:
        """``name`` or ``name#key``. Raises ``ValueError`` for anything else."""
        name, _, key = text.partition("#")
        if not _SECRET_NAME.match(name) or (key and not _PATH_PART.match(key)):
            raise ValueError(f"not a secret name: {text!r}")
        return cls(name, key or None)

    def secret_name(self) -> str:
        """The secret's name (the last part of an ARN, random suffix included)."""
        if self.name.startswith("arn:"):
            return self.name.split(":secret:", 1)[-1]
        return self.name


@dataclass(frozen=True)
class Template:
    """Text with ``{next_seq}``, ``{last_seq}`` and ``{secret:...}`` placeholders. ``json``:
    the text is a JSON document (secrets go in JSON-escaped)."""

    text: str
    json: bool = False

    @property
    def secrets(self) -> tuple[SecretRef, ...]:
        """The secrets this template needs, in order. Raises ``ValueError`` for a bad one."""
        return tuple(SecretRef.parse(m) for m in _SECRET_PLACEHOLDER.findall(self.text))

    @property
    def resumes(self) -> bool:
        """Whether it carries the resume point."""
        return NEXT_SEQ in self.text or LAST_SEQ in self.text

    def leaves_out(self, last_seq: int) -> bool:
        """Whether a query parameter or header of this value is left out of a connect that
        resumes after ``last_seq``: it needs ``{last_seq}`` and nothing was delivered."""
        return last_seq == NOTHING_DELIVERED and LAST_SEQ in self.text

    def render(self, resolved: Mapping[str, str], last_seq: int) -> str:
        """The text with every placeholder replaced (``resolved``: reference text → value;
        ``last_seq``: the checkpoint the connection resumes after, or
        :data:`~streamlease.seqs.NOTHING_DELIVERED`), in one pass: a secret's value is never
        read for placeholders."""

        def value(match: re.Match[str]) -> str:
            ref, next_seq, _ = match.groups()
            if ref is None:
                return str(last_seq + 1 if next_seq else last_seq)
            secret = resolved[SecretRef.parse(ref).text]
            return json.dumps(secret)[1:-1] if self.json else secret

        return _ANY_PLACEHOLDER.sub(value, self.text)


@dataclass(frozen=True)
class Condition:
    """A JSON condition an answer matches (see the module docstring)."""

    expected: Mapping[str, Any]

    def matches(self, document: Any) -> bool:
        """Whether ``document`` (parsed JSON) matches."""
        if isinstance(document, list):
            return any(_holds(item, self.expected) for item in document)
        return _holds(document, self.expected)

    def matches_text(self, data: bytes | str) -> bool:
        """Whether a message's payload is JSON that matches (anything else does not)."""
        try:
            document = json.loads(data)
        except ValueError:
            return False
        return self.matches(document)


def _holds(document: Any, expected: Mapping[str, Any]) -> bool:
    if not isinstance(document, dict):
        return False
    for key, want in expected.items():
        if key not in document:
            return False
        got = document[key]
        if isinstance(want, dict):
            if not _holds(got, want):
                return False
        elif type(got) is not type(want) or got != want:
            return False
    return True


def parse_condition(raw: Any, field: str) -> Condition:
    """A condition as given (a JSON object of up to :data:`MAX_CONDITION_KEYS` keys per level,
    :data:`MAX_CONDITION_DEPTH` levels, scalar or object values). Raises
    :class:`TemplateError`."""
    _check_condition(raw, field, 1)
    return Condition(raw)


def _check_condition(raw: Any, field: str, depth: int) -> None:
    if (
        not isinstance(raw, Mapping)
        or not 0 < len(raw) <= MAX_CONDITION_KEYS
        or depth > MAX_CONDITION_DEPTH
    ):
        raise TemplateError(
            f"a condition is a JSON object of 1 to {MAX_CONDITION_KEYS} keys, at most "
            f"{MAX_CONDITION_DEPTH} levels deep",
            field,
        )
    for key, value in raw.items():
        if isinstance(value, Mapping):
            _check_condition(value, field, depth + 1)
        elif isinstance(value, float) or (
            not isinstance(value, str | int | bool) and value is not None
        ):
            raise TemplateError(
                f"condition values are text, whole numbers, true/false, null or objects ({key!r})",
                field,
            )


@dataclass(frozen=True)
class OpenMessage:
    """One message sent after every (re)connect; with ``expect``, the next one waits for an
    answer matching it (``refuse``: an answer that means no), at most ``timeout_seconds``."""

    send: Template
    expect: Condition | None = None
    refuse: Condition | None = None
    timeout_seconds: int = DEFAULT_ANSWER_TIMEOUT_SECONDS

    def to_item(self) -> str | dict[str, Any]:
        """The stored form: the text alone when nothing is awaited."""
        if self.expect is None:
            return self.send.text
        out: dict[str, Any] = {"send": self.send.text, "expect": dict(self.expect.expected)}
        if self.refuse is not None:
            out["refuse"] = dict(self.refuse.expected)
        if self.timeout_seconds != DEFAULT_ANSWER_TIMEOUT_SECONDS:
            out["timeout_seconds"] = self.timeout_seconds
        return out


@dataclass(frozen=True)
class AppPing:
    """A message the upstream wants every ``interval_seconds`` as proof of life."""

    send: Template
    interval_seconds: int

    def to_item(self) -> dict[str, Any]:
        """The stored form."""
        return {"send": self.send.text, "interval_seconds": self.interval_seconds}


def parse_open_message(raw: Any, field: str) -> OpenMessage:
    """One open message as given: its text, or ``{"send", "expect", "refuse",
    "timeout_seconds"}``. Raises :class:`TemplateError` (also for a literal credential)."""
    if isinstance(raw, str):
        return OpenMessage(message_template(raw, field))
    if not isinstance(raw, Mapping) or "send" not in raw:
        raise TemplateError("an open message is its text, or an object with send", field)
    unknown = sorted(set(raw) - {"send", "expect", "refuse", "timeout_seconds"})
    if unknown:
        raise TemplateError(f"unknown open message field {unknown[0]!r}", f"{field}.{unknown[0]}")
    if "refuse" in raw and "expect" not in raw:
        raise TemplateError("refuse needs expect: an answer is awaited only then", field)
    timeout = raw.get("timeout_seconds", DEFAULT_ANSWER_TIMEOUT_SECONDS)
    if isinstance(timeout, bool) or not isinstance(timeout, int) or not 0 < timeout <= 60:
        raise TemplateError(
            f"timeout_seconds is a whole number from 1 to {MAX_ANSWER_TIMEOUT_SECONDS}",
            f"{field}.timeout_seconds",
        )
    return OpenMessage(
        message_template(raw["send"], f"{field}.send"),
        None if "expect" not in raw else parse_condition(raw["expect"], f"{field}.expect"),
        None if "refuse" not in raw else parse_condition(raw["refuse"], f"{field}.refuse"),
        timeout,
    )


def parse_ping(raw: Any, field: str) -> AppPing:
    """``{"send": <template>, "interval_seconds": N}``. Raises :class:`TemplateError`."""
    if not isinstance(raw, Mapping) or set(raw) != {"send", "interval_seconds"}:
        raise TemplateError("ping is an object with send and interval_seconds", field)
    interval = raw["interval_seconds"]
    if (
        isinstance(interval, bool)
        or not isinstance(interval, int)
        or not MIN_PING_SECONDS <= interval <= MAX_PING_SECONDS
    ):
        raise TemplateError(
            f"interval_seconds is a whole number from {MIN_PING_SECONDS} to {MAX_PING_SECONDS}",
            f"{field}.interval_seconds",
        )
    send = message_template(raw["send"], f"{field}.send")
    if send.secrets or send.resumes:
        raise TemplateError("a ping is plain text: no placeholders", f"{field}.send")
    return AppPing(send, interval)


def message_template(raw: Any, field: str) -> Template:
    """A message to send: text of 1 to :data:`MAX_OPEN_MESSAGE_CHARS` characters whose
    placeholders are well formed and that holds no literal credential. Raises
    :class:`TemplateError`."""
    if not isinstance(raw, str) or not 0 < len(raw) <= MAX_OPEN_MESSAGE_CHARS:
        raise TemplateError(f"a message is text of 1 to {MAX_OPEN_MESSAGE_CHARS} characters", field)
    template = Template(raw, json=_as_json(raw) is not None)
    try:
        template.secrets  # noqa: B018 - parses every reference
    except ValueError as exc:
        raise TemplateError(str(exc), field) from None
    culprit = literal_credential(raw)
    if culprit is not None:
        raise TemplateError(
            f"{culprit} carries a credential: write it as {{secret:<name>}} (a Secrets Manager "
            "secret), never the value itself",
            field,
        )
    return template


def _as_json(text: str) -> Any:
    """The message parsed as JSON with its placeholders filled by stand-ins, or None."""
    stripped = text.lstrip()
    if not stripped.startswith(("{", "[")):
        return None
    filled = text.replace(NEXT_SEQ, "1").replace(LAST_SEQ, "0")
    filled = _SECRET_PLACEHOLDER.sub(lambda _: "\ue000secret\ue000", filled)
    try:
        return json.loads(filled)
    except ValueError:
        return None


def literal_credential(text: str) -> str | None:
    """What in a message looks like a credential written out (a JSON key, or the text), or
    None. A value that is a ``{secret:...}`` reference, or a resume placeholder, is fine."""
    document = _as_json(text)
    if document is None:
        return "the message" if _TEXT_CREDENTIAL.search(text) else None
    return _json_credential(document, login=False)


def _json_credential(document: Any, *, login: bool) -> str | None:
    if isinstance(document, list):
        for item in document:
            culprit = _json_credential(item, login=login)
            if culprit is not None:
                return culprit
        return None
    if not isinstance(document, dict):
        return None
    login = login or any(
        isinstance(v, str) and v.lower() in _LOGIN_WORDS for v in document.values()
    )
    for key, value in document.items():
        lowered = str(key).lower()
        if isinstance(value, dict | list):
            culprit = _json_credential(value, login=login)
            if culprit is not None:
                return culprit
            continue
        if not isinstance(value, str) or "\ue000secret\ue000" in value or not value:
            continue
        if is_sensitive_name(lowered) or (
            login and lowered in _SENSITIVE_JSON_KEYS and value.lower() not in _LOGIN_WORDS
        ):
            return f"key {key!r}"
    return None


def is_sensitive_name(lowered: str) -> bool:
    """Whether a (lower-case) name says its value is a credential."""
    return any(word in lowered for word in SENSITIVE_WORDS)
