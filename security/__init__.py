"""Security: payload encryption (a Temporal payload codec and its codec server) and signed approvals."""

from agent_worker.security.codec import (
    DecryptionError,
    EncryptionCodec,
    EncryptionError,
    KeySpecError,
    converter_for,
    converter_from_env,
    data_converter,
    new_key,
    parse_keys,
)

__all__ = [
    "DecryptionError",
    "EncryptionCodec",
    "EncryptionError",
    "KeySpecError",
    "converter_for",
    "converter_from_env",
    "data_converter",
    "new_key",
    "parse_keys",
]
