"""Deterministic key encoding and value serialisation (see `headrace.model.coders`)."""

from headrace.model.coders import dumps, encode_key, loads, register_key_encoder

__all__ = ["dumps", "encode_key", "loads", "register_key_encoder"]
