"""Payload encryption: a Temporal payload codec (AES-256-GCM) with key ids, so keys can rotate.

Every payload the worker and its clients send (workflow and activity inputs and results, signals,
updates, queries, heartbeat details, failure details) is serialized whole and encrypted before it
leaves the process; the Temporal server stores only ciphertext. An encrypted payload::

    metadata: {"encoding": "binary/encrypted", "encryption-key-id": "<key id>"}
    data:     12-byte random nonce || AES-256-GCM(serialized Payload proto) || 16-byte tag

It is the format of Temporal's encryption samples, so their codec servers can read it too.

Encoding always uses the current key; decoding picks the key the payload names, so histories written
under earlier keys stay readable for as long as those keys are configured. Payloads that are not
encrypted pass through unchanged.

``data_converter`` also moves failure messages and stack traces into the encrypted part of a failure
(an error message can quote a task's input). What stays readable on the server: search attributes
(they are indexed), workflow, activity, signal and update names, ids and task queues.

::

    EncryptionError          root: every error this module raises on purpose
    ├── KeySpecError         a key, key id or ``KID:BASE64KEY`` list is malformed (also a ``ValueError``)
    └── DecryptionError      a payload names an unknown key id, or fails authentication
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import os
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from agent_worker.schemas.payloads import DATA_CONVERTER
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from google.protobuf.message import DecodeError
from temporalio.api.common.v1 import Payload
from temporalio.converter import DataConverter, DefaultFailureConverterWithEncodedAttributes, PayloadCodec

if TYPE_CHECKING:
    from agent_worker.schemas.config import WorkerConfig

ENCODING = b"binary/encrypted"
KEY_ID_METADATA = "encryption-key-id"
KEY_BYTES = 32
NONCE_BYTES = 12
TAG_BYTES = 16
# The settings' names in the environment (WorkerConfig.encryption_keys / encryption_key_id), for messages.
ENV_KEYS = "AGENT_WORKER_ENCRYPTION_KEYS"
ENV_KEY_ID = "AGENT_WORKER_ENCRYPTION_KEY_ID"
# Key ids travel in payload metadata and in the ``KID:KEY,...`` list: keep them plain.
KEY_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


class EncryptionError(Exception):
    """Root of this module's errors."""


class KeySpecError(EncryptionError, ValueError):
    """Raised when a key, key id or key list is malformed; the message never contains key material."""


class DecryptionError(EncryptionError):
    """Raised when an encrypted payload cannot be decrypted: its key id is unknown here, or the
    ciphertext (or its nonce, tag or key id) was altered, or it was encrypted with another key."""

    def __init__(self, message: str, *, key_id: str) -> None:
        super().__init__(message)
        self.key_id = key_id


class EncryptionCodec(PayloadCodec):
    """AES-256-GCM over whole payloads, with several keys for rotation.

    Args:
        keys: Key id to 32-byte key. Keep every key that may still appear in open histories.
        current: The key id new payloads are encrypted with.

    Raises:
        KeySpecError: no keys, a key of the wrong size, a malformed key id, or ``current`` not in ``keys``.
    """

    def __init__(self, keys: Mapping[str, bytes], current: str) -> None:
        if not keys:
            raise KeySpecError("no encryption keys given")
        for key_id, key in keys.items():
            _check_key_id(key_id)
            if len(key) != KEY_BYTES:
                raise KeySpecError(f"encryption key {key_id!r}: {len(key)} bytes, AES-256 needs {KEY_BYTES}")
        if current not in keys:
            raise KeySpecError(f"current encryption key id {current!r} is not among the keys ({_ids(keys)})")
        # Only cipher objects are kept, so the raw keys cannot end up in a repr or a log line.
        self._ciphers = {key_id: AESGCM(bytes(key)) for key_id, key in keys.items()}
        self._current = current

    @property
    def current(self) -> str:
        """The key id new payloads are encrypted with."""
        return self._current

    @property
    def key_ids(self) -> list[str]:
        """Every key id this codec can decrypt."""
        return sorted(self._ciphers)

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Encrypt each payload, whole, with the current key."""
        return [self.encrypt(p) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Decrypt each encrypted payload with the key it names; pass others through.

        Raises:
            DecryptionError: naming the key id, when it is unknown or authentication fails.
        """
        return [self.decrypt(p) for p in payloads]

    def encrypt(self, payload: Payload) -> Payload:
        """One payload, encrypted with the current key (a fresh random nonce each time)."""
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._ciphers[self._current].encrypt(nonce, payload.SerializeToString(), None)
        return Payload(
            metadata={"encoding": ENCODING, KEY_ID_METADATA: self._current.encode()},
            data=nonce + sealed,
        )

    def decrypt(self, payload: Payload) -> Payload:
        """One payload decrypted, or returned as is when it is not encrypted.

        Raises:
            DecryptionError: naming the key id, when it is unknown or authentication fails.
        """
        if payload.metadata.get("encoding") != ENCODING:
            return payload
        raw_id = payload.metadata.get(KEY_ID_METADATA, b"")
        key_id = raw_id.decode("utf-8", errors="replace")
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise DecryptionError(
                f"payload encrypted with key id {key_id!r}, which this codec does not have "
                f"(known: {', '.join(self.key_ids)}); add that key to decrypt it",
                key_id=key_id,
            )
        if len(payload.data) < NONCE_BYTES + TAG_BYTES:
            raise DecryptionError(
                f"payload encrypted with key id {key_id!r} is truncated ({len(payload.data)} bytes)",
                key_id=key_id,
            )
        try:
            plain = cipher.decrypt(payload.data[:NONCE_BYTES], payload.data[NONCE_BYTES:], None)
            return Payload.FromString(plain)
        except InvalidTag:
            raise DecryptionError(
                f"payload encrypted with key id {key_id!r} failed authentication: it was altered, or "
                "encrypted with a different key under that id",
                key_id=key_id,
            ) from None
        except DecodeError:
            raise DecryptionError(
                f"payload encrypted with key id {key_id!r} decrypted to something that is not a payload",
                key_id=key_id,
            ) from None


def parse_keys(spec: str) -> dict[str, bytes]:
    """Keys from ``kid1:BASE64KEY,kid2:BASE64KEY`` (as in ``AGENT_WORKER_ENCRYPTION_KEYS``).

    Raises:
        KeySpecError: naming the bad entry by position and key id (never echoing key material).
    """
    keys: dict[str, bytes] = {}
    entries = [e.strip() for e in spec.split(",")]
    if not any(entries):
        raise KeySpecError("no encryption keys given; expected 'KEY_ID:BASE64KEY[,KEY_ID:BASE64KEY...]'")
    for position, entry in enumerate(entries, start=1):
        if not entry:
            continue
        key_id, sep, encoded = (part.strip() for part in entry.partition(":"))
        where = f"encryption key entry {position}"
        if not sep or not key_id or not encoded:
            raise KeySpecError(f"{where}: expected 'KEY_ID:BASE64KEY'")
        where += f" ({key_id!r})"
        _check_key_id(key_id, where)
        if key_id in keys:
            raise KeySpecError(f"{where}: key id repeated")
        key = _b64decode(encoded)
        if key is None:
            raise KeySpecError(f"{where}: key is not valid base64")
        if len(key) != KEY_BYTES:
            raise KeySpecError(f"{where}: key is {len(key)} bytes, AES-256 needs {KEY_BYTES}")
        keys[key_id] = key
    return keys


def data_converter(keys: Mapping[str, bytes] | None, current: str | None) -> DataConverter:
    """The project's data converter: pydantic JSON; with keys, payloads and failure messages encrypted.

    Args:
        keys: Key id to key, or ``None`` (or empty) for no encryption.
        current: The key id to encrypt with; may be left out when there is exactly one key.

    Raises:
        KeySpecError: the keys are malformed, ``current`` is unknown or ambiguous, or a key id is
            given without keys (which would otherwise silently store plaintext).
    """
    if not keys:
        if current:
            raise KeySpecError(f"encryption key id {current!r} given, but no encryption keys")
        return DATA_CONVERTER
    if current is None:
        if len(keys) > 1:
            raise KeySpecError(f"several encryption keys ({_ids(keys)}): say which one is current")
        [current] = keys
    return dataclasses.replace(
        DATA_CONVERTER,
        payload_codec=EncryptionCodec(keys, current),
        failure_converter_class=DefaultFailureConverterWithEncodedAttributes,
    )


def converter_for(config: WorkerConfig) -> DataConverter:
    """The data converter the config's ``encryption_keys`` / ``encryption_key_id`` ask for (plain
    pydantic JSON when no keys are set). Clients and workers must agree on it.

    Raises:
        KeySpecError: naming the settings (``AGENT_WORKER_ENCRYPTION_KEYS`` /
            ``AGENT_WORKER_ENCRYPTION_KEY_ID``), when the keys or key id are malformed.
    """
    spec = config.encryption_keys.get_secret_value().strip() if config.encryption_keys else ""
    current = (config.encryption_key_id or "").strip() or None
    try:
        return data_converter(parse_keys(spec) if spec else None, current)
    except KeySpecError as err:
        raise KeySpecError(f"{ENV_KEYS} / {ENV_KEY_ID}: {err}") from None


def converter_from_env(env: Mapping[str, str]) -> DataConverter:
    """``converter_for`` a config holding only ``AGENT_WORKER_ENCRYPTION_KEYS`` /
    ``AGENT_WORKER_ENCRYPTION_KEY_ID`` from ``env``: for a client that has no ``WorkerConfig`` (a
    process with one passes it to ``converter_for`` instead).

    Raises:
        KeySpecError: naming the variable, when the keys or key id are malformed.
    """
    from agent_worker.schemas.config import WorkerConfig

    return converter_for(
        WorkerConfig(encryption_keys=env.get(ENV_KEYS) or None, encryption_key_id=env.get(ENV_KEY_ID) or None)
    )


def new_key() -> str:
    """A fresh random 32-byte key, base64-encoded (the ``BASE64KEY`` of a key list entry)."""
    return base64.b64encode(os.urandom(KEY_BYTES)).decode("ascii")


def _check_key_id(key_id: str, where: str | None = None) -> None:
    if not KEY_ID_PATTERN.fullmatch(key_id):
        raise KeySpecError(
            f"{where or f'encryption key id {key_id!r}'}: key ids are 1-64 letters, digits, '.', '_' "
            "or '-', starting with a letter or digit"
        )


def _b64decode(encoded: str) -> bytes | None:
    """Standard or URL-safe base64, padding optional; ``None`` when it is neither."""
    text = encoded.replace("-", "+").replace("_", "/")
    text += "=" * (-len(text) % 4)
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None


def _ids(keys: Mapping[str, bytes]) -> str:
    return ", ".join(sorted(keys))
