"""Beam's element coders: how a value becomes bytes and back.

A `Coder` has Beam's public API: `encode` / `decode` (the value alone, "outer" context),
`encode_nested` / `decode_nested` (the value inside a larger encoding, so its end must be
findable), `is_deterministic`, `as_deterministic_coder(step_label, error_message=None)`,
`estimate_size`, `to_type_hint`, `from_type_hint`, `is_kv_coder` / `key_coder` /
`value_coder`. A user's coder subclasses `Coder` and defines `encode` and `decode` (and
`is_deterministic` returning True when equal values always give equal bytes); nested, its
bytes are prefixed by their length, as in Beam. Objects that are not `Coder`s but have
`encode` and `decode` (Beam's duck-typed coders, such as its docs' JsonCoder) are accepted as
components of the composite coders.

The byte formats of the built-ins are those of Beam's standard coders: VarIntCoder a signed
64-bit varint, FloatCoder a big-endian double, BooleanCoder one byte, Bytes/StrUtf8Coder
the bytes (nested: varint length first), TupleCoder its components (all nested but the last,
which takes the tuple's context), Iterable/ListCoder a big-endian int32 count and the nested
elements, MapCoder a count and nested (key, value)s, NullableCoder a 0/1 byte and the value,
LengthPrefixCoder a varint length and the value, TimestampCoder big-endian int64
microseconds. FastPrimitivesCoder tags each value with its type (Beam's tags for None, int,
float, bytes, str, list, tuple, dict, set, bool) and pickles other types.
"""

from __future__ import annotations

import base64
import dataclasses
import decimal
import enum
import pickle
import struct
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from headrace.model.time import Timestamp

_double = struct.Struct(">d")
_single = struct.Struct(">f")
_int32 = struct.Struct(">i")
_int64 = struct.Struct(">q")
_uint64 = struct.Struct(">Q")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def write_varint(out: bytearray, value: int) -> None:
    """Appends `value` (a signed 64-bit int, negatives as two's complement) as a varint."""
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"{value} is outside the signed 64-bit range VarIntCoder encodes")
    if value < 0:
        value += 1 << 64
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def read_varint(data: bytes, pos: int) -> Tuple[int, int]:
    """The signed 64-bit varint at `pos` and the position after it."""
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint: the encoded bytes end inside it")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise ValueError("malformed varint: longer than 10 bytes")
    if result >= 1 << 63:
        result -= 1 << 64
    return result, pos


def _take(data: bytes, pos: int, n: int) -> bytes:
    if n < 0 or pos + n > len(data):
        raise ValueError(f"truncated encoding: {n} bytes expected at offset {pos}, "
                         f"{len(data) - pos} left")
    return data[pos:pos + n]


def _short(value: Any) -> str:
    r = repr(value)
    return r if len(r) < 80 else r[:77] + "..."


class Coder:
    """Turns values into bytes (`encode`) and back (`decode`); subclass it for your own format.

    Text connectors use a coder per line: `ReadFromText(coder=...)` decodes each line's bytes,
    `WriteToText(coder=...)` writes the bytes `encode(element)` returns followed by a newline.
    Registered for a class with `coders.registry.register_coder(cls, CoderClass)`, a coder
    whose `is_deterministic()` is True makes instances of the class usable as grouping keys.
    """

    def encode(self, value: Any) -> bytes:
        """The bytes of `value`."""
        raise NotImplementedError(f"{type(self).__name__} does not implement encode(value) -> bytes")

    def decode(self, encoded: bytes) -> Any:
        """The value encoded in `encoded`."""
        raise NotImplementedError(f"{type(self).__name__} does not implement decode(bytes)")

    def encode_nested(self, value: Any) -> bytes:
        """The bytes of `value` inside a larger encoding (its end can be found)."""
        out = bytearray()
        self._encode_to(value, out, True)
        return bytes(out)

    def decode_nested(self, encoded: bytes) -> Any:
        """The value of `encode_nested`'s bytes."""
        value, pos = self._decode_from(bytes(encoded), 0, True)
        if pos != len(encoded):
            raise ValueError(f"{self!r}.decode_nested: {len(encoded) - pos} bytes left over")
        return value

    def is_deterministic(self) -> bool:
        """Whether equal values always encode to equal bytes (False unless a coder says so).

        A grouping key's coder must be deterministic, or equal keys may not group together.
        """
        return False

    def as_deterministic_coder(self, step_label: str, error_message: Optional[str] = None) -> "Coder":
        """A deterministic version of this coder, or ValueError (`error_message` if given)."""
        if self.is_deterministic():
            return self
        raise ValueError(error_message or f"{self!r} cannot be made deterministic for {step_label!r}.")

    def estimate_size(self, value: Any) -> int:
        """The size of `value` encoded, in bytes."""
        return len(self.encode(value))

    def to_type_hint(self) -> Any:
        """The type of the values `decode` returns, or None when unknown."""
        return None

    @classmethod
    def from_type_hint(cls, typehint: Any, registry: Any) -> "Coder":
        """The coder of this class for `typehint` (Beam's registry calls this): `cls()`."""
        return cls()

    def is_kv_coder(self) -> bool:
        """Whether this coder codes (key, value) pairs."""
        return False

    def key_coder(self) -> "Coder":
        """The coder of the keys of a key-value coder."""
        raise ValueError(f"Not a KV coder: {self!r}.")

    def value_coder(self) -> "Coder":
        """The coder of the values of a key-value coder."""
        raise ValueError(f"Not a KV coder: {self!r}.")

    # ---- the stream form the composite coders use (a user's coder need not override it)

    def _encode_to(self, value: Any, out: bytearray, nested: bool) -> None:
        b = self.encode(value)
        if nested:
            write_varint(out, len(b))
        out += b

    def _decode_from(self, data: bytes, pos: int, nested: bool) -> Tuple[Any, int]:
        if nested:
            n, pos = read_varint(data, pos)
            return self.decode(_take(data, pos, n)), pos + n
        return self.decode(data[pos:]), len(data)

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.__dict__ == other.__dict__

    def __hash__(self) -> int:
        return hash(type(self))

    def __repr__(self) -> str:
        return type(self).__name__


class _DuckCoder(Coder):
    """An object with `encode` / `decode` that is not a Coder (a component of a composite)."""

    def __init__(self, coder: Any) -> None:
        self.coder = coder

    def encode(self, value: Any) -> bytes:
        data: bytes = self.coder.encode(value)
        return data

    def decode(self, encoded: bytes) -> Any:
        return self.coder.decode(encoded)

    def is_deterministic(self) -> bool:
        fn = getattr(self.coder, "is_deterministic", None)
        return bool(fn()) if callable(fn) else False

    def __repr__(self) -> str:
        return repr(self.coder)


def as_coder(coder: Any) -> Coder:
    """`coder` as a Coder: itself, or a wrapper around an object with encode / decode."""
    if isinstance(coder, Coder):
        return coder
    if isinstance(coder, type) or not (callable(getattr(coder, "encode", None))
                                       and callable(getattr(coder, "decode", None))):
        raise TypeError(f"a coder instance with encode() and decode() is needed, got {_short(coder)}")
    return _DuckCoder(coder)


class FastCoder(Coder):
    """A coder defined by its stream form: `encode` / `decode` are the outer context of it."""

    def encode(self, value: Any) -> bytes:
        """The bytes of `value`."""
        out = bytearray()
        self._encode_to(value, out, False)
        return bytes(out)

    def decode(self, encoded: bytes) -> Any:
        """The value encoded in `encoded`."""
        data = bytes(encoded)
        value, pos = self._decode_from(data, 0, False)
        if pos != len(data):
            raise ValueError(f"{self!r}.decode: {len(data) - pos} bytes left over")
        return value

    def _encode_to(self, value: Any, out: bytearray, nested: bool) -> None:
        raise NotImplementedError

    def _decode_from(self, data: bytes, pos: int, nested: bool) -> Tuple[Any, int]:
        raise NotImplementedError


class _Simple(FastCoder):
    """A coder without parameters that is deterministic."""

    def is_deterministic(self) -> bool:
        """True."""
        return True


# ---- primitives ---------------------------------------------------------------------------


class BytesCoder(_Simple):
    """bytes as themselves."""

    def _encode_to(self, value: Any, out: bytearray, nested: bool) -> None:
        if not isinstance(value, (bytes, bytearray)):
            raise TypeError(f"BytesCoder encodes bytes, got {type(value).__name__} {_short(value)}")
        if nested:
            write_varint(out, len(value))
        out += value

    def _decode_from(self, data: bytes, pos: int, nested: bool) -> Tuple[Any, int]:
        if not nested:
            return data[pos:], len(data)
        n, pos = read_varint(data, pos)
        return _take(data, pos, n), pos + n

    def to_type_hint(self) -> Any:
        """bytes."""
        return bytes


class StrUtf8Coder(_Simple):
    """str as UTF-8 bytes (ReadFromText's default)."""

    def _encode_to(self, value: Any, out: bytearray, nested: bool) -> None:
        if not isinstance(value, str):
            raise TypeError(f"StrUtf8Coder encodes str, got {type(value).__name__} {_short(value)}")
        b = value.encode("utf-8")
        if nested:
            write_varint(out, len(b))
        out += b

    def _decode_from(self, data: bytes, pos: int, nested: bool) -> Tuple[Any, int]:
        if not nested:
            return data[pos:].decode("utf-8"), len(data)
        n, pos = read_varint(data, pos)
        return _take(data, pos, n).decode("utf-8"), pos + n

    def to_type_hint(self) -> Any:
        """str."""
        return str


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


class BooleanCoder(_Simple):
    """bool as one byte, 0 or 1."""

    def _encode_to(self, value: Any, out: bytearray, nested: bool) -> None:
        if not isinstance(value, bool):
            raise TypeError(f"BooleanCoder encodes bool, got {type(value).__name__} {_short(value)}")
        out.append(1 if value else 0)

    def _decode_from(self, data: bytes, pos: int, nested: bool) -> Tuple[Any, int]:
        b = _take(data, pos, 1)[0]
        if b > 1:
            raise ValueError(f"BooleanCoder: byte {b} is neither 0 nor 1")
        return b == 1, pos + 1

    def to_type_hint(self) -> Any:
        """bool."""
        return bool


class VarIntCoder(_Simple):
    """int (signed 64-bit) as a variable-length integer, Beam's `beam:coder:varint:v1`."""

    def _encode_to(self, value: Any, out: bytearray, nested: bool) -> None:
        if not isinstance(value, int):
            raise TypeError(f"VarIntCoder encodes int, got {type(value).__name__} {_short(value)}")
        write_varint(out, int(value))

    def _decode_from(self, data: bytes, pos: int, nested: bool) -> Tuple[Any, int]:
        return read_varint(data, pos)

    def to_type_hint(self) -> Any:
        """int."""
        return int


class FloatCoder(_Simple):
    """float as a big-endian IEEE 754 double (8 bytes)."""

    def _encode_to(self, value: Any, out: bytearray, nested: bool) -> None:
        out += _double.pack(value)

    def _decode_from(self, data: bytes, pos: int, nested: bool) -> Tuple[Any, int]:
        return _double.unpack(_take(data, pos, 8))[0], pos + 8

    def estimate_size(self, value: Any) -> int:
        """8."""
        return 8

    def to_type_hint(self) -> Any:
        """float."""
        return float


class SinglePrecisionFloatCoder(_Simple):
    """float as a big-endian IEEE 754 single (4 bytes; precision is lost)."""

    def _encode_to(self, value: Any, out: bytearray, nested: bool) -> None:
        out += _single.pack(value)

    def _decode_from(self, data: bytes, pos: int, nested: bool) -> Tuple[Any, int]:
        return _single.unpack(_take(data, pos, 4))[0], pos + 4

    def to_type_hint(self) -> Any:
        """float."""
        return float


class TimestampCoder(_Simple):
    """Timestamps in Beam's (and Beam Java's InstantCoder's) format: the milliseconds (rounded
    down) as a big-endian int64 with the sign bit flipped, so the bytes sort as the times do.
    Sub-millisecond digits are lost, as in Beam."""

    def _encode_to(self, value: Any, out: bytearray, nested: bool) -> None:
        if not isinstance(value, Timestamp):
            raise TypeError(f"TimestampCoder encodes Timestamp, got {type(value).__name__} {_short(value)}")
        out += _uint64.pack(value.micros // 1000 - _INT64_MIN)

    def _decode_from(self, data: bytes, pos: int, nested: bool) -> Tuple[Any, int]:
        millis = _uint64.unpack(_take(data, pos, 8))[0] + _INT64_MIN
        return Timestamp(micros=millis * 1000), pos + 8

    def to_type_hint(self) -> Any:
        """Timestamp."""
        return Timestamp


class BigIntegerCoder(_Simple):
    """int of any size as its minimal two's-complement big-endian bytes (Java's BigInteger)."""

    def _encode_to(self, value: Any, out: bytearray, nested: bool) -> None:
        if not isinstance(value, int):
            raise TypeError(f"BigIntegerCoder encodes int, got {type(value).__name__} {_short(value)}")
        BytesCoder()._encode_to(_big_bytes(int(value)), out, nested)

    def _decode_from(self, data: bytes, pos: int, nested: bool) -> Tuple[Any, int]:
        raw, pos = BytesCoder()._decode_from(data, pos, nested)
        return int.from_bytes(raw, "big", signed=True), pos

    def to_type_hint(self) -> Any:
        """int."""
        return int


def _big_bytes(value: int) -> bytes:
    return value.to_bytes(value.bit_length() // 8 + 1, "big", signed=True)


class DecimalCoder(_Simple):
    """decimal.Decimal as its scale (a varint) and unscaled value (BigIntegerCoder), as Beam."""

    def _encode_to(self, value: Any, out: bytearray, nested: bool) -> None:
        if not isinstance(value, decimal.Decimal):
            raise TypeError(f"DecimalCoder encodes decimal.Decimal, got {type(value).__name__}")
        sign, digits, exponent = value.as_tuple()
        if not isinstance(exponent, int):
            raise ValueError(f"DecimalCoder cannot encode {value} (not finite)")
        unscaled = int("".join(map(str, digits)) or "0") * (-1 if sign else 1)
        write_varint(out, -exponent)
        BigIntegerCoder()._encode_to(unscaled, out, nested)

    def _decode_from(self, data: bytes, pos: int, nested: bool) -> Tuple[Any, int]:
        scale, pos = read_varint(data, pos)
        unscaled, pos = BigIntegerCoder()._decode_from(data, pos, nested)
        return decimal.Decimal(unscaled).scaleb(-scale), pos

    def to_type_hint(self) -> Any:
        """decimal.Decimal."""
        return decimal.Decimal


class SingletonCoder(FastCoder):
    """Always the one value it was made with; its encoding is empty."""

    def __init__(self, value: Any) -> None:
        self._value = value

    def _encode_to(self, value: Any, out: bytearray, nested: bool) -> None:
        pass

    def _decode_from(self, data: bytes, pos: int, nested: bool) -> Tuple[Any, int]:
        return self._value, pos

    def is_deterministic(self) -> bool:
        """True."""
        return True

    def __hash__(self) -> int:
        return hash((type(self), repr(self._value)))


# ---- composites ---------------------------------------------------------------------------


class NullableCoder(FastCoder):
    """None, or a value of `value_coder` (a 0 / 1 byte first)."""

    def __init__(self, value_coder: Any) -> None:
        self._value_coder = as_coder(value_coder)

    def _encode_to(self, value: Any, out: bytearray, nested: bool) -> None:
        if value is None:
            out.append(0)
        else:
            out.append(1)
            self._value_coder._encode_to(value, out, nested)

    def _decode_from(self, data: bytes, pos: int, nested: bool) -> Tuple[Any, int]:
        flag = _take(data, pos, 1)[0]
        if flag == 0:
            return None, pos + 1
        return self._value_coder._decode_from(data, pos + 1, nested)

    def is_deterministic(self) -> bool:
        """Whether the value coder is."""
        return self._value_coder.is_deterministic()

    def as_deterministic_coder(self, step_label: str, error_message: Optional[str] = None) -> Coder:
        """A NullableCoder of the value coder's deterministic version."""
        if self.is_deterministic():
            return self
        return NullableCoder(self._value_coder.as_deterministic_coder(step_label, error_message))

    def to_type_hint(self) -> Any:
        """Optional of the value coder's type."""
        return Optional[self._value_coder.to_type_hint()]

    def value_coder(self) -> Coder:
        """The coder of the non-None values."""
        return self._value_coder

    def __hash__(self) -> int:
        return hash((type(self), self._value_coder))

    def __repr__(self) -> str:
        return f"NullableCoder[{self._value_coder!r}]"


class LengthPrefixCoder(FastCoder):
    """A value of `value_coder` preceded by its length (a varint)."""

    def __init__(self, value_coder: Any) -> None:
        self._value_coder = as_coder(value_coder)

    def _encode_to(self, value: Any, out: bytearray, nested: bool) -> None:
        b = self._value_coder.encode(value)
        write_varint(out, len(b))
        out += b

    def _decode_from(self, data: bytes, pos: int, nested: bool) -> Tuple[Any, int]:
        n, pos = read_varint(data, pos)
        return self._value_coder.decode(_take(data, pos, n)), pos + n

    def is_deterministic(self) -> bool:
        """Whether the value coder is."""
        return self._value_coder.is_deterministic()

    def value_coder(self) -> Coder:
        """The coder of the value."""
        return self._value_coder

    def to_type_hint(self) -> Any:
        """The value coder's type."""
        return self._value_coder.to_type_hint()

    def __hash__(self) -> int:
        return hash((type(self), self._value_coder))

    def __repr__(self) -> str:
        return f"LengthPrefixCoder[{self._value_coder!r}]"


class TupleCoder(FastCoder):
    """A tuple of fixed length, each component with its own coder; two components are Beam's KV."""

    def __init__(self, components: Iterable[Any]) -> None:
        self._coders: Tuple[Coder, ...] = tuple(as_coder(c) for c in components)

    def _encode_to(self, value: Any, out: bytearray, nested: bool) -> None:
        coders = self._coders
        if not isinstance(value, (tuple, list)) or len(value) != len(coders):
            raise TypeError(f"{self!r} encodes tuples of {len(coders)} values, got {_short(value)}")
        last = len(coders) - 1
        for i, (c, v) in enumerate(zip(coders, value)):
            c._encode_to(v, out, nested or i < last)

    def _decode_from(self, data: bytes, pos: int, nested: bool) -> Tuple[Any, int]:
        values = []
        last = len(self._coders) - 1
        for i, c in enumerate(self._coders):
            v, pos = c._decode_from(data, pos, nested or i < last)
            values.append(v)
        return tuple(values), pos

    def coders(self) -> Tuple[Coder, ...]:
        """The component coders."""
        return self._coders

    def is_deterministic(self) -> bool:
        """Whether every component coder is."""
        return all(c.is_deterministic() for c in self._coders)

    def as_deterministic_coder(self, step_label: str, error_message: Optional[str] = None) -> Coder:
        """A TupleCoder of the components' deterministic versions."""
        if self.is_deterministic():
            return self
        return TupleCoder([c.as_deterministic_coder(step_label, error_message) for c in self._coders])

    def to_type_hint(self) -> Any:
        """Tuple of the components' types."""
        return Tuple[tuple(c.to_type_hint() or Any for c in self._coders)]

    @classmethod
    def from_type_hint(cls, typehint: Any, registry: Any) -> Coder:
        """A TupleCoder of the registry's coders for the tuple hint's components."""
        return cls([registry.get_coder(t) for t in getattr(typehint, "__args__", ())])

    def is_kv_coder(self) -> bool:
        """True for two components."""
        return len(self._coders) == 2

    def key_coder(self) -> Coder:
        """The first component's coder."""
        if len(self._coders) != 2:
            raise ValueError("TupleCoder does not have exactly 2 components.")
        return self._coders[0]

    def value_coder(self) -> Coder:
        """The second component's coder."""
        if len(self._coders) != 2:
            raise ValueError("TupleCoder does not have exactly 2 components.")
        return self._coders[1]

    def __hash__(self) -> int:
        return hash(self._coders)

    def __repr__(self) -> str:
        return f"TupleCoder[{', '.join(repr(c) for c in self._coders)}]"


class _SequenceCoder(FastCoder):
    """A count (big-endian int32) and the nested elements; `_build` makes the decoded value."""

    _build: Callable[[List[Any]], Any] = list

    def __init__(self, elem_coder: Any) -> None:
        self._elem_coder = as_coder(elem_coder)

    def _encode_to(self, value: Any, out: bytearray, nested: bool) -> None:
        if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
            raise TypeError(f"{self!r} encodes iterables, got {type(value).__name__} {_short(value)}")
        items = value if isinstance(value, (list, tuple)) else list(value)
        out += _int32.pack(len(items))
        c = self._elem_coder
        for v in items:
            c._encode_to(v, out, True)

    def _decode_from(self, data: bytes, pos: int, nested: bool) -> Tuple[Any, int]:
        (n,), pos = _int32.unpack(_take(data, pos, 4)), pos + 4
        if n < 0:
            raise ValueError(f"{self!r}: chunked (unknown-length) iterables are not supported")
        items = []
        c = self._elem_coder
        for _ in range(n):
            v, pos = c._decode_from(data, pos, True)
            items.append(v)
        return type(self)._build(items), pos

    def is_deterministic(self) -> bool:
        """Whether the element coder is."""
        return self._elem_coder.is_deterministic()

    def as_deterministic_coder(self, step_label: str, error_message: Optional[str] = None) -> Coder:
        """The same kind of coder over the element coder's deterministic version."""
        if self.is_deterministic():
            return self
        return type(self)(self._elem_coder.as_deterministic_coder(step_label, error_message))

    @classmethod
    def from_type_hint(cls, typehint: Any, registry: Any) -> Coder:
        """This coder over the registry's coder for the hint's element type."""
        args = getattr(typehint, "__args__", None) or (Any,)
        return cls(registry.get_coder(args[0]))

    def value_coder(self) -> Coder:
        """The element coder."""
        return self._elem_coder

    def __hash__(self) -> int:
        return hash((type(self), self._elem_coder))

    def __repr__(self) -> str:
        return f"{type(self).__name__}[{self._elem_coder!r}]"


class IterableCoder(_SequenceCoder):
    """An iterable of elements of one coder (decoded as a list)."""

    def to_type_hint(self) -> Any:
        """Iterable of the element type."""
        return Iterable[self._elem_coder.to_type_hint() or Any]  # type: ignore[misc]


class ListCoder(_SequenceCoder):
    """A list of elements of one coder."""

    def to_type_hint(self) -> Any:
        """List of the element type."""
        return List[self._elem_coder.to_type_hint() or Any]  # type: ignore[misc]


class TupleSequenceCoder(_SequenceCoder):
    """A tuple of any length whose elements share one coder (`Tuple[T, ...]`)."""

    _build = tuple

    def to_type_hint(self) -> Any:
        """Tuple[element type, ...]."""
        return Tuple[self._elem_coder.to_type_hint() or Any, ...]


class MapCoder(FastCoder):
    """A dict: a count (big-endian int32) and each key and value nested, in the dict's order."""

    _sort = False

    def __init__(self, key_coder: Any, value_coder: Any) -> None:
        self._key_coder = as_coder(key_coder)
        self._value_coder = as_coder(value_coder)

    def _encode_to(self, value: Any, out: bytearray, nested: bool) -> None:
        if not isinstance(value, dict):
            raise TypeError(f"{self!r} encodes dicts, got {type(value).__name__} {_short(value)}")
        out += _int32.pack(len(value))
        kc, vc = self._key_coder, self._value_coder
        if not self._sort:
            for k, v in value.items():
                kc._encode_to(k, out, True)
                vc._encode_to(v, out, True)
            return
        for kb, v in sorted((kc.encode_nested(k), v) for k, v in value.items()):
            out += kb
            vc._encode_to(v, out, True)

    def _decode_from(self, data: bytes, pos: int, nested: bool) -> Tuple[Any, int]:
        (n,), pos = _int32.unpack(_take(data, pos, 4)), pos + 4
        result = {}
        kc, vc = self._key_coder, self._value_coder
        for _ in range(n):
            k, pos = kc._decode_from(data, pos, True)
            v, pos = vc._decode_from(data, pos, True)
            result[k] = v
        return result, pos

    def is_deterministic(self) -> bool:
        """False: a dict's order is not determined by its contents."""
        return False

    def as_deterministic_coder(self, step_label: str, error_message: Optional[str] = None) -> Coder:
        """A DeterministicMapCoder (entries sorted by key bytes) of deterministic components."""
        return DeterministicMapCoder(self._key_coder.as_deterministic_coder(step_label, error_message),
                                     self._value_coder.as_deterministic_coder(step_label, error_message))

    @classmethod
    def from_type_hint(cls, typehint: Any, registry: Any) -> Coder:
        """A MapCoder of the registry's coders for the key and value types."""
        args = getattr(typehint, "__args__", None) or (Any, Any)
        return cls(registry.get_coder(args[0]), registry.get_coder(args[1]))

    def to_type_hint(self) -> Any:
        """Dict of the key and value types."""
        return Dict[self._key_coder.to_type_hint() or Any,  # type: ignore[misc]
                    self._value_coder.to_type_hint() or Any]

    def __hash__(self) -> int:
        return hash((type(self), self._key_coder, self._value_coder))

    def __repr__(self) -> str:
        return f"{type(self).__name__}[{self._key_coder!r}, {self._value_coder!r}]"


class DeterministicMapCoder(MapCoder):
    """A dict with its entries sorted by their encoded keys (deterministic)."""

    _sort = True

    def is_deterministic(self) -> bool:
        """True."""
        return True

    def as_deterministic_coder(self, step_label: str, error_message: Optional[str] = None) -> Coder:
        """Itself."""
        return self


# ---- pickling -----------------------------------------------------------------------------


class _AnyValueCoder(FastCoder):
    """A coder of any value: one may be a pair, whose key and value it codes itself."""

    def is_kv_coder(self) -> bool:
        """True: a value may be a pair."""
        return True

    def key_coder(self) -> Coder:
        """Itself."""
        return self

    def value_coder(self) -> Coder:
        """Itself."""
        return self

    def to_type_hint(self) -> Any:
        """Any."""
        return Any


class PickleCoder(_AnyValueCoder):
    """Any picklable value, with Python's pickle (not deterministic)."""

    def _encode_to(self, value: Any, out: bytearray, nested: bool) -> None:
        b = pickle.dumps(value, pickle.HIGHEST_PROTOCOL)
        if nested:
            write_varint(out, len(b))
        out += b

    def _decode_from(self, data: bytes, pos: int, nested: bool) -> Tuple[Any, int]:
        if not nested:
            return pickle.loads(data[pos:]), len(data)
        n, pos = read_varint(data, pos)
        return pickle.loads(_take(data, pos, n)), pos + n

    def as_deterministic_coder(self, step_label: str, error_message: Optional[str] = None) -> Coder:
        """A FastPrimitivesCoder that fails on values it cannot encode deterministically."""
        return DeterministicFastPrimitivesCoder(FastPrimitivesCoder(self), step_label)


class Base64PickleCoder(Coder):
    """Any picklable value, pickled and then base64-encoded (not deterministic)."""

    def encode(self, value: Any) -> bytes:
        """base64 of the pickle of `value`."""
        return base64.b64encode(pickle.dumps(value, pickle.HIGHEST_PROTOCOL))

    def decode(self, encoded: bytes) -> Any:
        """The value of base64-pickled `encoded`."""
        return pickle.loads(base64.b64decode(encoded))

    def to_type_hint(self) -> Any:
        """Any."""
        return Any


# Beam's FastPrimitivesCoder type tags
_NONE, _INT, _FLOAT, _BYTES, _STR, _LIST, _TUPLE, _DICT, _SET, _BOOL = 0, 1, 2, 3, 4, 5, 6, 7, 8, 9
_FROZENSET, _BIGINT, _ENUM, _DATACLASS, _UNKNOWN = 0xF9, 0xFA, 0xFB, 0xFC, 0xFF


class FastPrimitivesCoder(_AnyValueCoder):
    """None, bool, int, float, str, bytes and lists, tuples, dicts, sets of them, each tagged
    with its type; other values go to `fallback_coder` (PickleCoder by default)."""

    def __init__(self, fallback_coder: Any = None) -> None:
        self._fallback_coder = as_coder(fallback_coder) if fallback_coder is not None else PickleCoder()

    def _encode_to(self, value: Any, out: bytearray, nested: bool) -> None:
        _fp_encode(value, out, nested, self._fallback_coder, None)

    def _decode_from(self, data: bytes, pos: int, nested: bool) -> Tuple[Any, int]:
        return _fp_decode(data, pos, nested, self._fallback_coder)

    def is_deterministic(self) -> bool:
        """Whether the fallback coder is (PickleCoder is not)."""
        return self._fallback_coder.is_deterministic()

    def as_deterministic_coder(self, step_label: str, error_message: Optional[str] = None) -> Coder:
        """Itself if deterministic, else a DeterministicFastPrimitivesCoder for `step_label`."""
        if self.is_deterministic():
            return self
        return DeterministicFastPrimitivesCoder(self, step_label)

    def __hash__(self) -> int:
        return hash((type(self), self._fallback_coder))

    def __repr__(self) -> str:
        return "FastPrimitivesCoder"


class DeterministicFastPrimitivesCoder(_AnyValueCoder):
    """FastPrimitivesCoder with dicts and sets sorted, enums by name and frozen dataclasses by
    field; any other value of no fixed encoding raises TypeError naming the step."""

    def __init__(self, coder: FastPrimitivesCoder, step_label: str) -> None:
        self._underlying_coder = coder
        self._step_label = step_label

    def _encode_to(self, value: Any, out: bytearray, nested: bool) -> None:
        _fp_encode(value, out, nested, self._underlying_coder._fallback_coder, self._step_label)

    def _decode_from(self, data: bytes, pos: int, nested: bool) -> Tuple[Any, int]:
        return _fp_decode(data, pos, nested, self._underlying_coder._fallback_coder)

    def is_deterministic(self) -> bool:
        """True."""
        return True

    def __hash__(self) -> int:
        return hash((type(self), self._step_label))

    def __repr__(self) -> str:
        return f"DeterministicFastPrimitivesCoder[{self._step_label!r}]"


def _fp_encode(value: Any, out: bytearray, nested: bool, fallback: Coder,
               deterministic_for: Optional[str]) -> None:
    t = type(value)
    if value is None:
        out.append(_NONE)
    elif t is bool:
        out.append(_BOOL)
        out.append(1 if value else 0)
    elif t is int and _INT64_MIN <= value <= _INT64_MAX:
        out.append(_INT)
        write_varint(out, value)
    elif t is int:
        out.append(_BIGINT)
        BigIntegerCoder()._encode_to(value, out, True)
    elif t is float:
        out.append(_FLOAT)
        out += _double.pack(value)
    elif t is str or t is bytes:
        # as Beam: the length only when nested (outer, the bytes run to the end)
        b = value.encode("utf-8") if t is str else value
        out.append(_STR if t is str else _BYTES)
        if nested:
            write_varint(out, len(b))
        out += b
    elif t is list or t is tuple:
        out.append(_LIST if t is list else _TUPLE)
        write_varint(out, len(value))
        for item in value:
            _fp_encode(item, out, True, fallback, deterministic_for)
    elif t is dict:
        out.append(_DICT)
        write_varint(out, len(value))
        if deterministic_for is None:
            for k, v in value.items():
                _fp_encode(k, out, True, fallback, None)
                _fp_encode(v, out, True, fallback, None)
        else:
            for kb, vb in sorted((_fp_bytes(k, fallback, deterministic_for),
                                  _fp_bytes(v, fallback, deterministic_for)) for k, v in value.items()):
                out += kb
                out += vb
    elif t is set or t is frozenset:
        out.append(_SET if t is set else _FROZENSET)  # a set as Beam's; frozenset headrace's tag
        write_varint(out, len(value))
        parts = [_fp_bytes(v, fallback, deterministic_for) for v in value]
        for p in sorted(parts) if deterministic_for is not None else parts:
            out += p
    elif deterministic_for is None or fallback.is_deterministic():
        out.append(_UNKNOWN)
        fallback._encode_to(value, out, True)
    elif isinstance(value, enum.Enum):
        out.append(_ENUM)
        _fp_encode(pickle.dumps(t, pickle.HIGHEST_PROTOCOL), out, True, fallback, None)
        _fp_encode(value.name, out, True, fallback, None)
    elif dataclasses.is_dataclass(value) and getattr(t, "__dataclass_params__").frozen:
        out.append(_DATACLASS)
        _fp_encode(pickle.dumps(t, pickle.HIGHEST_PROTOCOL), out, True, fallback, None)
        _fp_encode(tuple(getattr(value, f.name) for f in dataclasses.fields(value)), out, True,
                   fallback, deterministic_for)
    else:
        raise TypeError(
            f"Unable to deterministically encode {_short(value)} of type {t.__module__}."
            f"{t.__qualname__} for {deterministic_for!r}: register a deterministic coder for it "
            "(coders.registry.register_coder(type, CoderClass)) or use keys made of str, int, "
            "float, bytes, bool, None, tuples, frozen dataclasses or enums")


def _fp_bytes(value: Any, fallback: Coder, deterministic_for: Optional[str]) -> bytes:
    out = bytearray()
    _fp_encode(value, out, True, fallback, deterministic_for)
    return bytes(out)


def _fp_decode(data: bytes, pos: int, nested: bool, fallback: Coder) -> Tuple[Any, int]:
    tag = _take(data, pos, 1)[0]
    pos += 1
    if tag == _NONE:
        return None, pos
    if tag == _BOOL:
        return _take(data, pos, 1)[0] == 1, pos + 1
    if tag == _INT:
        return read_varint(data, pos)
    if tag == _BIGINT:
        return BigIntegerCoder()._decode_from(data, pos, True)
    if tag == _FLOAT:
        return _double.unpack(_take(data, pos, 8))[0], pos + 8
    if tag in (_STR, _BYTES):
        if nested:
            n, pos = read_varint(data, pos)
        else:
            n = len(data) - pos
        raw = _take(data, pos, n)
        return (raw.decode("utf-8") if tag == _STR else raw), pos + n
    if tag in (_LIST, _TUPLE, _SET, _FROZENSET, _DICT):
        n, pos = read_varint(data, pos)
        items: List[Any] = []
        for _ in range(n * 2 if tag == _DICT else n):
            v, pos = _fp_decode(data, pos, True, fallback)
            items.append(v)
        if tag == _DICT:
            return dict(zip(items[::2], items[1::2])), pos
        if tag in (_SET, _FROZENSET):
            return (set(items) if tag == _SET else frozenset(items)), pos
        return (items if tag == _LIST else tuple(items)), pos
    if tag in (_ENUM, _DATACLASS):
        type_bytes, pos = _fp_decode(data, pos, True, fallback)
        cls = pickle.loads(type_bytes)
        payload, pos = _fp_decode(data, pos, True, fallback)
        if tag == _ENUM:
            return cls[payload], pos
        obj = object.__new__(cls)
        for f, v in zip(dataclasses.fields(cls), payload):
            object.__setattr__(obj, f.name, v)
        return obj, pos
    if tag == _UNKNOWN:
        return fallback._decode_from(data, pos, True)
    raise ValueError(f"FastPrimitivesCoder: unknown type tag {tag} at offset {pos - 1}")


#: Beam's public coder names provided here (the facade `headrace.coders` exports these).
__all__ = [
    "Base64PickleCoder", "BigIntegerCoder", "BooleanCoder", "BytesCoder", "Coder", "DecimalCoder",
    "DeterministicFastPrimitivesCoder", "DeterministicMapCoder", "FastCoder", "FastPrimitivesCoder",
    "FloatCoder", "IterableCoder", "LengthPrefixCoder", "ListCoder", "MapCoder", "NullableCoder",
    "PickleCoder", "SinglePrecisionFloatCoder", "SingletonCoder", "StrUtf8Coder", "TimestampCoder",
    "ToBytesCoder", "TupleCoder", "TupleSequenceCoder", "VarIntCoder", "as_coder",
]
