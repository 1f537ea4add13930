"""Secrets never leave the worker as text: one function, ``redact``, scrubs a string before it goes
into a log line, an activity's error, a task's status or an event.

It replaces with ``***``:

- credentials in URLs: ``https://user:pass@host`` becomes ``https://user:***@host``, and a lone
  token in the userinfo (``https://TOKEN@host``) becomes ``https://***@host``;
- ``password=...`` (also ``passwd``, ``pwd``) in libpq DSNs and URL queries;
- credentials after ``Bearer`` / ``Basic`` (an ``Authorization`` header quoted in an error);
- API keys by their published shapes (OpenAI ``sk-...``, E2B ``e2b_...``);
- the literal values of the secrets the worker was configured with, registered once at worker
  start (``register_config_secrets``): ``OPENAI_API_KEY``, ``E2B_API_KEY``, ``TEMPORAL_API_KEY``,
  the business DSN and its password, the codec token, the encryption keys, and the password of
  any configured URL (``OPENAI_BASE_URL``, the business API's URL), decoded and encoded alike.

Literals shorter than ``MIN_SECRET_CHARS`` are not registered (they would blank out ordinary words);
the patterns above still catch them where they sit in a URL or DSN.

Where it is applied: the structlog chain (``telemetry.logs``), the activity boundary
(``activities.errors.activity_boundary``: the message, details and causes of every error an activity
raises) with the model-provider errors (``activities.agent.provider_errors``), the model name a
turn reports (``activities.agent.models``), which reaches usage, status and events, and wherever
the worker hands data to a reader: event data (the sink, ``activities.events``, and the live tap,
``activities.stores.live_events``), every entry of a turn's live stream (``TurnStream.emit``: tokens,
tool calls, read tool results), the final answer (``agent.turn``: the task's result, status and
``final-output.txt``), and a command record's argv, stdout and stderr (``sandbox.exec``: evidence
and status; the output artifacts and what the model reads keep the text as it was). A streamed
token's trailing partial word waits for the next delta (up to 256 characters), so a secret split
across deltas is masked whole; one holding whitespace and split at it is not.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from pydantic import SecretStr

__all__ = [
    "MASK",
    "MIN_SECRET_CHARS",
    "config_secrets",
    "redact",
    "redact_value",
    "register_config_secrets",
    "register_secrets",
]

MASK = "***"
MIN_SECRET_CHARS = 6

_URL_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^\s/?#@'\"<>]+)@")
_DSN_PASSWORD = re.compile(
    r"(?i)\b(?P<key>password|passwd|pwd)(?P<eq>\s*=\s*)(?P<value>'(?:[^'\\]|\\.)*'|[^\s&;,'\"]+)"
)
_AUTH_SCHEME = re.compile(r"(?i)\b(?P<scheme>bearer|basic)(?P<space>\s+)(?P<value>[A-Za-z0-9._~+/=-]{6,})")
_KEY_SHAPES = re.compile(r"\b(?:sk-[A-Za-z0-9_-]{16,}|e2b_[A-Za-z0-9]{16,})")
# What each pattern above cannot match without: a text with none of these (most are: event fields,
# phases, tool names) is passed by one search instead of four substitutions.
_MAY_HOLD = re.compile(r"(?i)://|pass|pwd|bearer|basic|sk-|e2b_")

_literals: tuple[str, ...] = ()  # longest first, so a secret containing another is masked whole


def register_secrets(*values: str | SecretStr | None) -> None:
    """Mask these literal values wherever ``redact`` sees them from now on (process-wide)."""
    global _literals
    found = set(_literals)
    for value in values:
        text = value.get_secret_value() if isinstance(value, SecretStr) else value
        if text and len(text.strip()) >= MIN_SECRET_CHARS:
            found.add(text.strip())
    _literals = tuple(sorted(found, key=len, reverse=True))


def redact(text: str) -> str:
    """``text`` with credentials in URLs, DSN passwords, bearer tokens, key-shaped strings and the
    registered secrets replaced by ``***``."""
    if not text:
        return text
    for literal in _literals:
        if literal in text:
            text = text.replace(literal, MASK)
    if not _MAY_HOLD.search(text):
        return text
    text = _URL_USERINFO.sub(_mask_userinfo, text)
    text = _DSN_PASSWORD.sub(lambda m: f"{m['key']}{m['eq']}{MASK}", text)
    text = _AUTH_SCHEME.sub(lambda m: f"{m['scheme']}{m['space']}{MASK}", text)
    return _KEY_SHAPES.sub(MASK, text)


def redact_value(value: Any) -> Any:
    """``value`` with every string in it (dict keys and values, list items) passed through ``redact``."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, Mapping):
        return {redact_value(k): redact_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(redact_value(v) for v in value)
    return value


def config_secrets(config: Any, env: Mapping[str, str]) -> list[str]:
    """The secret values a worker's config and environment hold: every ``SecretStr`` field, the
    passwords inside configured URLs and DSNs, the encryption keys, and ``TEMPORAL_API_KEY``."""
    values: list[str] = []
    urls: list[str] = []
    fields = [getattr(config, name, None) for name in type(config).model_fields]
    # Nested settings too: each model provider's key and base URL (``providers``).
    for nested in (getattr(config, "providers", None) or {}).values():
        fields.extend(getattr(nested, name, None) for name in type(nested).model_fields)
    for field in fields:
        if isinstance(field, SecretStr):
            values.append(field.get_secret_value())
            urls.append(field.get_secret_value())
        elif isinstance(field, str) and "://" in field:
            urls.append(field)
    for url in urls:
        values.extend(_url_credentials(url))
        values.extend(m["value"].strip("'") for m in _DSN_PASSWORD.finditer(url))
    keys = getattr(config, "encryption_keys", None)
    if isinstance(keys, SecretStr):
        values.extend(entry.rpartition(":")[2] for entry in keys.get_secret_value().split(","))
    for name in ("TEMPORAL_API_KEY", "OPENAI_API_KEY", "E2B_API_KEY"):
        if env.get(name):
            values.append(env[name])
    return values


def register_config_secrets(config: Any, env: Mapping[str, str]) -> None:
    """Register ``config_secrets(config, env)``: called once where a worker starts."""
    register_secrets(*config_secrets(config, env))


def _url_credentials(url: str) -> Iterable[str]:
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return []
    secret = parts.password if parts.password is not None else parts.username
    if not secret:
        return []
    return {secret, unquote(secret), quote(unquote(secret), safe="")}


def _mask_userinfo(match: re.Match[str]) -> str:
    user, colon, _password = match["userinfo"].partition(":")
    return f"{match['scheme']}{user}:{MASK}@" if colon else f"{match['scheme']}{MASK}@"
