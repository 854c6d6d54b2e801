"""Beam's `coders` module: element coders for connectors, deterministic key encoding, value serialisation.

`Coder` is the base class of a user's coder (`encode(value) -> bytes`, `decode(bytes)`);
`StrUtf8Coder`, `BytesCoder` and `ToBytesCoder` are Beam's built-ins of the same names.
See `headrace.model.coders`.
"""

from headrace.model.coders import (
    BytesCoder, Coder, StrUtf8Coder, ToBytesCoder, dumps, encode_key, loads, register_key_encoder,
)

__all__ = ["BytesCoder", "Coder", "StrUtf8Coder", "ToBytesCoder", "dumps", "encode_key", "loads",
           "register_key_encoder"]
