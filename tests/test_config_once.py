"""Configuration is read once at the edge and passed in: the codec and the codec server take the
encryption keys, key id and token from a ``WorkerConfig``, not from the environment."""

from __future__ import annotations

import asyncio
import base64

import pytest
from agent_worker.schemas.config import WorkerConfig
from agent_worker.security.codec import KEY_ID_METADATA, EncryptionCodec, KeySpecError, converter_for
from agent_worker.security.codec_server import serve
from temporalio.api.common.v1 import Payload

KEY = base64.b64encode(b"k" * 32).decode()
OTHER = base64.b64encode(b"o" * 32).decode()


def test_the_converter_encrypts_with_the_configs_current_key_and_ignores_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`converter_for(config)` uses `encryption_keys` / `encryption_key_id` of the config it is
    given; `AGENT_WORKER_ENCRYPTION_*` in the environment does not change it."""
    monkeypatch.setenv("AGENT_WORKER_ENCRYPTION_KEYS", f"env:{KEY}")
    monkeypatch.setenv("AGENT_WORKER_ENCRYPTION_KEY_ID", "env")
    config = WorkerConfig(encryption_keys=f"a:{KEY},b:{OTHER}", encryption_key_id="b")
    codec = converter_for(config).payload_codec
    assert isinstance(codec, EncryptionCodec) and codec.key_ids == ["a", "b"]
    [sealed] = asyncio.run(codec.encode([Payload(data=b"secret")]))
    assert sealed.metadata[KEY_ID_METADATA] == b"b" and b"secret" not in sealed.data
    assert converter_for(WorkerConfig()).payload_codec is None  # no keys: plain JSON
    with pytest.raises(KeySpecError, match="AGENT_WORKER_ENCRYPTION_KEY_ID"):
        converter_for(WorkerConfig(encryption_keys=f"a:{KEY},b:{OTHER}"))  # which one is current?


def test_the_codec_server_takes_its_keys_and_token_from_the_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without keys in the config the codec server refuses to start, whatever the environment holds;
    with keys but no `codec_token` it refuses a non-loopback address, naming the setting."""
    monkeypatch.setenv("AGENT_WORKER_ENCRYPTION_KEYS", f"env:{KEY}")
    monkeypatch.setenv("AGENT_WORKER_CODEC_TOKEN", "from-env")
    refusals: list[str] = []

    def fail(message: str) -> int:
        refusals.append(message)
        return 2

    assert serve(WorkerConfig(), host="127.0.0.1", port=0, fail=fail) == 2
    assert "AGENT_WORKER_ENCRYPTION_KEYS is not set" in refusals[-1]
    assert serve(WorkerConfig(encryption_keys=f"a:{KEY}"), host="0.0.0.0", port=0, fail=fail) == 2
    assert "without AGENT_WORKER_CODEC_TOKEN" in refusals[-1]
