"""Deterministic key encoding: equal keys become equal bytes in every process.

Grouping is by these bytes, so a key groups the same way on the local runner and on Spark
executors. Supported keys: None, bool, int, float, str, bytes, Timestamp, enums, and tuples,
lists, frozensets, sets, dicts and frozen dataclasses built from them. Anything else raises
`KeyEncodingError` naming the type and the fix.

Also here: value serialisation for shipping functions and values between processes
(`dumps` / `loads`), and Beam's element coders (`Coder`, `StrUtf8Coder`, `BytesCoder`,
`ToBytesCoder`), which connectors use to turn records into bytes and back.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import pickle
import struct
from typing import Any, Callable, Dict

import cloudpickle

from headrace.errors import KeyEncodingError
from headrace.model.time import Timestamp

_pack_q = struct.Struct(">q").pack
_pack_d = struct.Struct(">d").pack

_custom: Dict[type, Callable[[Any], bytes]] = {}


def register_key_encoder(cls: type, encode: Callable[[Any], bytes]) -> None:
    """Registers a deterministic byte encoding for keys of type `cls` (equal keys, equal bytes)."""
    _custom[cls] = encode


def encode_key(key: Any) -> bytes:
    """Encodes a grouping key to deterministic bytes, or raises KeyEncodingError."""
    t = type(key)
    if t is str:
        s: str = key  # (t is str: mypy does not narrow `key` through `t`)
        return b"s" + s.encode("utf-8", "surrogatepass")
    if t is int:
        return b"i" + (_pack_q(key) if -(2**63) <= key < 2**63 else str(key).encode())
    if t is bytes:
        b: bytes = key
        return b"b" + b
    out = bytearray()
    _encode_into(key, out)
    return bytes(out)


def _encode_into(key: Any, out: bytearray) -> None:
    t = type(key)
    if t is str:
        b = key.encode("utf-8", "surrogatepass")
        out += b"s" + _pack_q(len(b)) + b
    elif t is int:
        if -(2**63) <= key < 2**63:
            out += b"i" + _pack_q(key)
        else:
            b = str(key).encode()
            out += b"I" + _pack_q(len(b)) + b
    elif t is bytes:
        out += b"b" + _pack_q(len(key)) + key
    elif key is None:
        out += b"n"
    elif t is bool:
        out += b"T" if key else b"F"
    elif t is float:
        if key == 0.0:
            key = 0.0  # -0.0 == 0.0 must group together
        out += b"f" + (b"nan" if math.isnan(key) else _pack_d(key))
    elif t is tuple or t is list or isinstance(key, tuple):
        out += b"t" if t is not list else b"l"
        out += _pack_q(len(key))
        for item in key:
            _encode_into(item, out)
    elif t is Timestamp:
        out += b"@" + _pack_q(key.micros)
    elif t in (frozenset, set):
        parts = sorted(_encoded(item) for item in key)
        out += b"S" + _pack_q(len(parts))
        for p in parts:
            out += _pack_q(len(p)) + p
    elif t is dict:
        items = sorted((_encoded(k), _encoded(v)) for k, v in key.items())
        out += b"d" + _pack_q(len(items))
        for kb, vb in items:
            out += _pack_q(len(kb)) + kb + _pack_q(len(vb)) + vb
    elif isinstance(key, enum.Enum):
        name = f"{t.__module__}.{t.__qualname__}.{key.name}".encode()
        out += b"e" + _pack_q(len(name)) + name
    elif t in _custom:
        b = _custom[t](key)
        name = f"{t.__module__}.{t.__qualname__}".encode()
        out += b"c" + _pack_q(len(name)) + name + _pack_q(len(b)) + b
    elif dataclasses.is_dataclass(key) and getattr(t, "__dataclass_params__").frozen:
        name = f"{t.__module__}.{t.__qualname__}".encode()
        out += b"D" + _pack_q(len(name)) + name
        _encode_into(tuple(getattr(key, f.name) for f in dataclasses.fields(key)), out)
    else:
        raise KeyEncodingError(
            f"a grouping key of type {t.__module__}.{t.__qualname__} ({_repr(key)}) cannot be "
            "encoded deterministically, so equal keys might not group together; use keys made of "
            "str, int, float, bytes, bool, None, tuples, frozen dataclasses or enums, or call "
            "headrace.coders.register_key_encoder(type, fn)")


def _encoded(x: Any) -> bytes:
    out = bytearray()
    _encode_into(x, out)
    return bytes(out)


def _repr(x: Any) -> str:
    r = repr(x)
    return r if len(r) < 80 else r[:77] + "..."


def dumps(value: Any) -> bytes:
    """Serialises a value or function (cloudpickle, so lambdas and closures travel)."""
    data: bytes = cloudpickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    return data


def loads(data: bytes) -> Any:
    """Inverse of `dumps`."""
    return pickle.loads(data)


# ---- element coders (Beam's `coders.Coder`): how a connector turns values into bytes and back


class Coder:
    """Turns values into bytes (`encode`) and back (`decode`); subclass it for your own format.

    Text connectors use a coder per line: `ReadFromText(coder=...)` decodes each line's bytes
    (without its newline unless `strip_trailing_newlines=False`), `WriteToText(coder=...)`
    writes the bytes `encode(element)` returns followed by a newline. A JSON lines coder is
    `encode = lambda v: json.dumps(v).encode('utf-8')`, `decode = json.loads`.
    """

    def encode(self, value: Any) -> bytes:
        """The bytes of `value`."""
        raise NotImplementedError(f"{type(self).__name__} does not implement encode(value) -> bytes")

    def decode(self, encoded: bytes) -> Any:
        """The value encoded in `encoded`."""
        raise NotImplementedError(f"{type(self).__name__} does not implement decode(bytes)")

    def is_deterministic(self) -> bool:
        """Whether equal values always encode to equal bytes (False unless a coder says so)."""
        return False

    def to_type_hint(self) -> Any:
        """The type of the values `decode` returns, or None when unknown."""
        return None

    def estimate_size(self, value: Any) -> int:
        """The size of `value` encoded, in bytes."""
        return len(self.encode(value))

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.__dict__ == other.__dict__

    def __hash__(self) -> int:
        return hash(type(self))

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class StrUtf8Coder(Coder):
    """str as UTF-8 bytes (ReadFromText's default)."""

    def encode(self, value: Any) -> bytes:
        """The UTF-8 bytes of the str `value`."""
        s: str = value
        return s.encode("utf-8")

    def decode(self, encoded: bytes) -> str:
        """The str of UTF-8 `encoded`."""
        return encoded.decode("utf-8")

    def is_deterministic(self) -> bool:
        """True: a str has one UTF-8 encoding."""
        return True

    def to_type_hint(self) -> Any:
        """str."""
        return str


class BytesCoder(Coder):
    """bytes as themselves."""

    def encode(self, value: Any) -> bytes:
        """`value` itself (it must be bytes)."""
        if not isinstance(value, bytes):
            raise TypeError(f"BytesCoder encodes bytes, got {type(value).__name__} {_repr(value)}")
        return value

    def decode(self, encoded: bytes) -> bytes:
        """`encoded` itself."""
        return bytes(encoded)

    def is_deterministic(self) -> bool:
        """True."""
        return True

    def to_type_hint(self) -> Any:
        """bytes."""
        return bytes


class ToBytesCoder(Coder):
    """Writes bytes as they are and anything else as the UTF-8 of `str(value)` (WriteToText's default).

    It cannot decode (`str(value)` loses the type), as in Beam.
    """

    def encode(self, value: Any) -> bytes:
        """`value` if bytes, else `str(value)` in UTF-8."""
        return value if isinstance(value, bytes) else str(value).encode("utf-8")

    def decode(self, encoded: bytes) -> Any:
        """Not possible: raises NotImplementedError (use StrUtf8Coder or BytesCoder to read)."""
        raise NotImplementedError(
            "ToBytesCoder cannot decode (str(value) does not say what value was); read with "
            "StrUtf8Coder or BytesCoder, or a Coder of your own")

    def is_deterministic(self) -> bool:
        """True."""
        return True
