"""Deterministic key encoding: equal keys become equal bytes in every process.

Grouping is by these bytes, so a key groups the same way on the local runner and on Spark
executors. Supported keys: None, bool, int, float, str, bytes, Timestamp, enums, and tuples,
lists, frozensets, sets, dicts and frozen dataclasses built from them. Anything else raises
`KeyEncodingError` naming the type and the fix.

A class with a coder registered in `typecoders.registry` (`register_coder(cls, CoderClass)`)
is encoded by that coder's deterministic version, tagged with the class's name so that its
bytes never equal those of another type; a registered coder that cannot be made deterministic
makes such keys fail with its reason. `register_key_encoder(cls, fn)` is the older, direct way.

Also here: value serialisation for shipping functions and values between processes
(`dumps` / `loads`). Beam's element coders are in `element_coders` (re-exported here) and the
registry in `typecoders`.
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
from headrace.model.element_coders import (  # noqa: F401  (re-exported: the connectors' import)
    BytesCoder, Coder, StrUtf8Coder, ToBytesCoder,
)
from headrace.model.time import Timestamp
from headrace.model.typecoders import registry

_pack_q = struct.Struct(">q").pack
_pack_d = struct.Struct(">d").pack

_custom: Dict[type, Callable[[Any], bytes]] = {}


def register_key_encoder(cls: type, encode: Callable[[Any], bytes]) -> None:
    """Registers a deterministic byte encoding for keys of type `cls` (equal keys, equal bytes)."""
    _custom[cls] = encode


def custom_key_encoders() -> Dict[type, Callable[[Any], bytes]]:
    """Every `register_key_encoder` registration (a runner ships these to its worker processes)."""
    return dict(_custom)


def install_key_encoders(encoders: Dict[type, Callable[[Any], bytes]]) -> None:
    """Adds the registrations of `custom_key_encoders()` made in another process (a worker's)."""
    _custom.update(encoders)


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
    elif t is tuple or t is list:
        out += b"t" if t is tuple else b"l"
        out += _pack_q(len(key))
        for item in key:
            _encode_into(item, out)
    elif t in _custom:
        b = _custom[t](key)
        name = f"{t.__module__}.{t.__qualname__}".encode()
        out += b"c" + _pack_q(len(name)) + name + _pack_q(len(b)) + b
    elif t in registry.custom_types:
        _encode_registered(t, key, out)
    elif isinstance(key, tuple):
        out += b"t" + _pack_q(len(key))
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
    elif dataclasses.is_dataclass(key) and getattr(t, "__dataclass_params__").frozen:
        name = f"{t.__module__}.{t.__qualname__}".encode()
        out += b"D" + _pack_q(len(name)) + name
        _encode_into(tuple(getattr(key, f.name) for f in dataclasses.fields(key)), out)
    else:
        raise KeyEncodingError(
            f"a grouping key of type {t.__module__}.{t.__qualname__} ({_repr(key)}) cannot be "
            "encoded deterministically, so equal keys might not group together; use keys made of "
            "str, int, float, bytes, bool, None, tuples, frozen dataclasses or enums, or register "
            "a deterministic coder for the class: "
            "headrace.coders.registry.register_coder(KeyClass, KeyCoder)")


def _encode_registered(t: type, key: Any, out: bytearray) -> None:
    """A key of a class with a registered coder: "C", the class's name, the coder's bytes."""
    coder, why = registry.key_coder_of(t)
    if coder is None:
        raise KeyEncodingError(
            f"a grouping key of type {t.__module__}.{t.__qualname__} ({_repr(key)}) cannot be "
            f"encoded deterministically: {why}")
    try:
        b = coder.encode(key)
    except Exception as exc:
        raise KeyEncodingError(
            f"the registered coder {coder!r} failed to encode the grouping key {_repr(key)} of "
            f"type {t.__module__}.{t.__qualname__}: {type(exc).__name__}: {exc}") from exc
    name = f"{t.__module__}.{t.__qualname__}".encode()
    out += b"C" + _pack_q(len(name)) + name + _pack_q(len(b)) + b


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
