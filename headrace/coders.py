"""Beam's `coders` module: element coders, the coder registry, deterministic key encoding.

`Coder` is the base class of a user's coder (`encode(value) -> bytes`, `decode(bytes)`,
`is_deterministic()`); the built-ins have Beam's names and byte formats (see
`headrace.model.element_coders`). `registry` is Beam's `coders.registry`:
`registry.register_coder(MyClass, MyCoder)` makes `MyCoder` the coder of `MyClass` type hints
and, when it is deterministic, lets `MyClass` instances be grouping keys on every runner;
`registry.get_coder(type_hint)` is the coder a type hint chooses (see
`headrace.model.typecoders`). `encode_key` is the deterministic key encoding groupings use.
"""

import sys as _sys

from headrace.model import typecoders
from headrace.model.coders import dumps, encode_key, loads, register_key_encoder
from headrace.model.element_coders import (
    Base64PickleCoder, BigIntegerCoder, BooleanCoder, BytesCoder, Coder, DecimalCoder,
    DeterministicFastPrimitivesCoder, DeterministicMapCoder, FastCoder, FastPrimitivesCoder,
    FloatCoder, IterableCoder, LengthPrefixCoder, ListCoder, MapCoder, NullableCoder, PickleCoder,
    SinglePrecisionFloatCoder, SingletonCoder, StrUtf8Coder, TimestampCoder, ToBytesCoder,
    TupleCoder, TupleSequenceCoder, VarIntCoder,
)
from headrace.model.typecoders import CoderRegistry, registry

#: Beam's old name of ToBytesCoder.
ToStringCoder = ToBytesCoder

#: Beam's module paths under `coders`: `apache_beam.coders.coders` (the coder classes, here
#: this module itself) and `apache_beam.coders.typecoders` (the registry), so that
#: `from headrace.coders.coders import LengthPrefixCoder` works as Beam's import does.
coders = _sys.modules[__name__]
_sys.modules[__name__ + ".coders"] = coders
_sys.modules[__name__ + ".typecoders"] = typecoders

__all__ = [
    "Base64PickleCoder", "BigIntegerCoder", "BooleanCoder", "BytesCoder", "Coder", "CoderRegistry",
    "DecimalCoder", "DeterministicFastPrimitivesCoder", "DeterministicMapCoder", "FastCoder",
    "FastPrimitivesCoder", "FloatCoder", "IterableCoder", "LengthPrefixCoder", "ListCoder",
    "MapCoder", "NullableCoder", "PickleCoder", "SinglePrecisionFloatCoder", "SingletonCoder",
    "StrUtf8Coder", "TimestampCoder", "ToBytesCoder", "ToStringCoder", "TupleCoder",
    "TupleSequenceCoder", "VarIntCoder", "dumps", "encode_key", "loads", "register_key_encoder",
    "registry",
]
