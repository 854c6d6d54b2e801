"""Unit tests of headrace.coders: Beam's coders (byte formats from Beam's standard_coders.yaml,
round trips, determinism), the registry, and keys of registered classes (encode_key)."""

from __future__ import annotations

import dataclasses
import decimal
import enum
import json
import math
import typing

import pytest

from headrace import coders
from headrace.errors import KeyEncodingError
from headrace.model.time import Timestamp

# ---- Beam's reference encodings (standard_coders.yaml): bytes -> value ----------------------

VARINT = {b"\x00": 0, b"\x01": 1, b"\x0a": 10, b"\xc8\x01": 200, b"\xe8\x07": 1000,
          b"\xa9\x46": 9001, b"\xff" * 9 + b"\x01": -1}
DOUBLE = {b"\x00" * 8: 0.0, b"\x3f\xb9\x99\x99\x99\x99\x99\x9a": 0.1,
          b"\xbf\xb9\x99\x99\x99\x99\x99\x9a": -0.1, b"\x7f\xf0" + b"\x00" * 6: math.inf,
          b"\x00\x00\x00\x00\x00\x00\x00\x01": 4.9e-324}


@pytest.mark.parametrize("encoded,value", list(VARINT.items()))
def test_varint_matches_beams_reference_bytes(encoded, value):
    c = coders.VarIntCoder()
    assert c.encode(value) == encoded
    assert c.decode(encoded) == value
    assert c.encode_nested(value) == encoded  # the same in both contexts


@pytest.mark.parametrize("encoded,value", list(DOUBLE.items()))
def test_float_matches_beams_reference_bytes(encoded, value):
    assert coders.FloatCoder().encode(value) == encoded
    assert coders.FloatCoder().decode(encoded) == value


def test_float_nan_and_negative_zero():
    c = coders.FloatCoder()
    assert c.encode(-0.0) == b"\x80" + b"\x00" * 7
    assert math.isnan(c.decode(b"\x7f\xf8" + b"\x00" * 6))


def test_bytes_and_str_outer_and_nested_as_beam():
    assert coders.BytesCoder().encode(b"ab\0c") == b"ab\0c"
    assert coders.BytesCoder().encode_nested(b"abc") == b"\x03abc"
    long = b"x" * 200
    assert coders.BytesCoder().encode_nested(long) == b"\xc8\x01" + long
    assert coders.StrUtf8Coder().encode("\u00ff") == b"\xc3\xbf"
    assert coders.StrUtf8Coder().encode_nested("光线") == b"\x06" + "光线".encode("utf-8")
    assert coders.StrUtf8Coder().decode_nested(b"\x02\xc3\xbf") == "\u00ff"


def test_bool_as_beam():
    assert coders.BooleanCoder().encode(False) == b"\x00"
    assert coders.BooleanCoder().encode(True) == b"\x01"
    assert coders.BooleanCoder().decode(b"\x01") is True


def test_kv_tuple_coder_as_beam():
    kv = coders.TupleCoder([coders.BytesCoder(), coders.VarIntCoder()])
    assert kv.encode((b"abc", 0)) == b"\x03abc\x00"
    assert kv.encode((b"ab\0c", 10)) == b"\x04ab\0c\x0a"
    bb = coders.TupleCoder([coders.BytesCoder(), coders.BytesCoder()])
    assert bb.encode((b"abc", b"def")) == b"\x03abcdef"  # the value in the outer context
    assert bb.encode_nested((b"abc", b"def")) == b"\x03abc\x03def"
    assert bb.decode(b"\x04ab\0cde\0f") == (b"ab\0c", b"de\0f")


def test_iterable_coder_as_beam():
    c = coders.IterableCoder(coders.VarIntCoder())
    assert c.encode([1, 10, 200, 1000]) == b"\x00\x00\x00\x04\x01\x0a\xc8\x01\xe8\x07"
    assert c.encode([]) == b"\x00\x00\x00\x00"
    assert coders.IterableCoder(coders.BytesCoder()).decode(
        b"\x00\x00\x00\x02\x04ab\0c\x04de\0f") == [b"ab\0c", b"de\0f"]
    assert c.encode(iter([0])) == b"\x00\x00\x00\x01\x00"  # any iterable, not only lists


# ---- round trips and determinism ------------------------------------------------------------

ROUND_TRIPS = [
    (coders.BytesCoder(), b"\x00\xff"), (coders.StrUtf8Coder(), "héllo"),
    (coders.VarIntCoder(), -(2**63)), (coders.VarIntCoder(), 2**63 - 1),
    (coders.FloatCoder(), 1.5), (coders.SinglePrecisionFloatCoder(), 0.5),
    (coders.BooleanCoder(), False), (coders.TimestampCoder(), Timestamp(micros=-1_501_000)),
    (coders.BigIntegerCoder(), -(10**30)), (coders.DecimalCoder(), decimal.Decimal("-12.340")),
    (coders.SingletonCoder("only"), "only"),
    (coders.NullableCoder(coders.StrUtf8Coder()), None),
    (coders.NullableCoder(coders.StrUtf8Coder()), "x"),
    (coders.LengthPrefixCoder(coders.StrUtf8Coder()), "abc"),
    (coders.TupleCoder([coders.StrUtf8Coder(), coders.VarIntCoder(), coders.FloatCoder()]), ("a", 1, 2.0)),
    (coders.TupleSequenceCoder(coders.VarIntCoder()), (1, 2, 3)),
    (coders.ListCoder(coders.StrUtf8Coder()), ["a", "", "c"]),
    (coders.IterableCoder(coders.TupleCoder([coders.StrUtf8Coder(), coders.VarIntCoder()])), [("a", 1)]),
    (coders.MapCoder(coders.StrUtf8Coder(), coders.VarIntCoder()), {"a": 1, "b": 2}),
    (coders.PickleCoder(), {"any": [1, object.__name__]}),
    (coders.Base64PickleCoder(), (1, "x")),
    (coders.FastPrimitivesCoder(),
     [None, True, 3, -2**70, 1.25, "s", b"b", (1, [2]), {"k": {1, 2}}, frozenset({"f"}), Timestamp(3)]),
]


@pytest.mark.parametrize("coder,value", ROUND_TRIPS, ids=[repr(c) for c, _ in ROUND_TRIPS])
def test_round_trip_outer_and_nested(coder, value):
    assert coder.decode(coder.encode(value)) == value
    assert coder.decode_nested(coder.encode_nested(value)) == value
    assert coder.estimate_size(value) == len(coder.encode(value))


def test_nested_values_can_be_read_back_to_back():
    # a nested encoding knows its own end, so a tuple of variable-length parts decodes
    c = coders.TupleCoder([coders.StrUtf8Coder(), coders.StrUtf8Coder(), coders.StrUtf8Coder()])
    assert c.decode(c.encode(("ab", "", "c"))) == ("ab", "", "c")


def test_timestamp_coder_is_beams_shifted_big_endian_millis():
    # Beam 2.77's TimestampCoderImpl (Java's InstantCoder): millis rounded down, + 2**63
    c = coders.TimestampCoder()
    assert c.encode(Timestamp(micros=258_999)) == bytes.fromhex("8000000000000102")
    assert c.encode(Timestamp(0)) == bytes.fromhex("8000000000000000")
    assert c.encode(Timestamp(-10)) == bytes.fromhex("7fffffffffffd8f0")
    assert c.decode(c.encode(Timestamp(micros=1500))) == Timestamp(micros=1000)
    assert c.decode(c.encode(Timestamp(-10))) == Timestamp(-10)


def test_fast_primitives_str_and_bytes_have_a_length_only_when_nested():
    # Beam's FastPrimitivesCoderImpl: stream.write(value, nested)
    c = coders.FastPrimitivesCoder()
    assert c.encode("héllo") == bytes.fromhex("0468c3a96c6c6f")
    assert c.encode(b"b") == bytes.fromhex("0362")
    assert c.encode(("a", b"x")) == bytes.fromhex("0602040161030178")
    assert c.encode_nested("s") == bytes.fromhex("040173")
    assert c.decode(c.encode("")) == "" and c.decode(c.encode(b"")) == b""
    det = c.as_deterministic_coder("G")
    assert det.encode("a") == bytes.fromhex("0461") and det.decode(bytes.fromhex("0461")) == "a"



def test_fast_primitives_sets_are_beams():
    # Beam: SET_TYPE, the count, the items (sorted by their bytes when deterministic); headrace
    # added a frozen-flag byte. A frozenset (pickled by Beam) has headrace's own tag.
    c = coders.FastPrimitivesCoder()
    assert c.encode({7}) == bytes.fromhex("08010107")
    assert c.as_deterministic_coder("G").encode({3, 1, 2}) == bytes.fromhex("0803010101020103")
    assert c.decode(c.encode({"a", "b"})) == {"a", "b"}
    assert type(c.decode(c.encode(frozenset({1})))) is frozenset
    assert c.decode(c.encode({"k": {1, 2}})) == {"k": {1, 2}}


def test_determinism_is_beams():
    deterministic = [coders.BytesCoder(), coders.StrUtf8Coder(), coders.VarIntCoder(),
                     coders.FloatCoder(), coders.BooleanCoder(), coders.ToBytesCoder(),
                     coders.TimestampCoder(), coders.SingletonCoder(1),
                     coders.TupleCoder([coders.StrUtf8Coder(), coders.VarIntCoder()]),
                     coders.IterableCoder(coders.VarIntCoder()), coders.ListCoder(coders.FloatCoder()),
                     coders.NullableCoder(coders.VarIntCoder())]
    not_deterministic = [coders.PickleCoder(), coders.Base64PickleCoder(), coders.FastPrimitivesCoder(),
                         coders.MapCoder(coders.StrUtf8Coder(), coders.VarIntCoder()),
                         coders.TupleCoder([coders.StrUtf8Coder(), coders.PickleCoder()]),
                         coders.IterableCoder(coders.PickleCoder()), coders.Coder()]
    assert [c.is_deterministic() for c in deterministic] == [True] * len(deterministic)
    assert [c.is_deterministic() for c in not_deterministic] == [False] * len(not_deterministic)


def test_as_deterministic_coder():
    s = coders.StrUtf8Coder()
    assert s.as_deterministic_coder("step") is s
    det = coders.FastPrimitivesCoder().as_deterministic_coder("Group")
    assert det.is_deterministic()
    # dicts and sets encode in one order whatever their insertion order
    assert det.encode({"b": 1, "a": 2}) == det.encode({"a": 2, "b": 1})
    assert det.encode({3, 1, 2}) == det.encode({2, 3, 1})
    assert det.decode(det.encode({"b": 1, "a": 2})) == {"a": 2, "b": 1}
    m = coders.MapCoder(coders.StrUtf8Coder(), coders.VarIntCoder()).as_deterministic_coder("G")
    assert m.is_deterministic() and m.encode({"b": 1, "a": 2}) == m.encode({"a": 2, "b": 1})
    with pytest.raises(TypeError, match="'Group'"):
        det.encode(object())
    with pytest.raises(ValueError, match="cannot be made deterministic for 'MyStep'"):
        coders.Coder().as_deterministic_coder("MyStep")
    with pytest.raises(ValueError, match="my message"):
        coders.Coder().as_deterministic_coder("MyStep", "my message")


class Color(enum.Enum):
    RED = 1
    BLUE = 2


@dataclasses.dataclass(frozen=True)
class Frozen:
    a: int
    b: str


def test_deterministic_fast_primitives_takes_enums_and_frozen_dataclasses():
    det = coders.FastPrimitivesCoder().as_deterministic_coder("G")
    for v in (Color.BLUE, Frozen(1, "x"), (Frozen(2, "y"), Color.RED)):
        assert det.decode(det.encode(v)) == v


def test_kv_accessors():
    kv = coders.TupleCoder([coders.StrUtf8Coder(), coders.VarIntCoder()])
    assert kv.is_kv_coder() and kv.key_coder() == coders.StrUtf8Coder()
    assert kv.value_coder() == coders.VarIntCoder()
    assert not coders.StrUtf8Coder().is_kv_coder()
    with pytest.raises(ValueError, match="Not a KV coder"):
        coders.StrUtf8Coder().key_coder()


def test_wrong_values_are_refused_with_the_coder_named():
    with pytest.raises(TypeError, match="VarIntCoder encodes int"):
        coders.VarIntCoder().encode("1")
    with pytest.raises(ValueError, match="64-bit"):
        coders.VarIntCoder().encode(2**63)
    with pytest.raises(TypeError, match="tuples of 2"):
        coders.TupleCoder([coders.VarIntCoder(), coders.VarIntCoder()]).encode((1, 2, 3))
    with pytest.raises(NotImplementedError, match="ToBytesCoder cannot decode"):
        coders.ToBytesCoder().decode(b"x")


# ---- user coders, as in Beam's docs ---------------------------------------------------------


class JsonCoder:
    """Beam's docs example: a duck-typed coder (not a Coder subclass)."""

    def encode(self, x):
        return json.dumps(x).encode("utf-8")

    def decode(self, x):
        return json.loads(x)


class Player:
    def __init__(self, team, name):
        self.team, self.name = team, name

    def __eq__(self, other):
        return isinstance(other, Player) and (self.team, self.name) == (other.team, other.name)

    def __hash__(self):
        return hash((self.team, self.name))


class PlayerCoder(coders.Coder):
    """Beam's programming-guide example coder."""

    def encode(self, player):
        return f"{player.team}:{player.name}".encode("utf-8")

    def decode(self, s):
        return Player(*s.decode("utf-8").split(":"))

    def is_deterministic(self):
        return True


def test_user_coders_nest_in_composites_with_a_length_prefix():
    c = coders.TupleCoder([JsonCoder(), PlayerCoder(), coders.VarIntCoder()])
    value = ({"a": [1, 2]}, Player("red", "ann"), 7)
    encoded = c.encode(value)
    assert encoded.startswith(bytes([len(b'{"a": [1, 2]}')]) + b'{"a": [1, 2]}')
    assert c.decode(encoded) == value
    assert c.is_deterministic() is False  # JsonCoder does not say it is


# ---- the registry -----------------------------------------------------------------------------


def test_registry_chooses_coders_from_type_hints():
    r = coders.CoderRegistry()
    assert r.get_coder(int) == coders.VarIntCoder()
    assert r.get_coder(str) == coders.StrUtf8Coder()
    assert r.get_coder(float) == coders.FloatCoder()
    assert r.get_coder(bytes) == coders.BytesCoder()
    assert r.get_coder(bool) == coders.BooleanCoder()
    assert r.get_coder(typing.Tuple[str, int]) == coders.TupleCoder([coders.StrUtf8Coder(),
                                                                     coders.VarIntCoder()])
    assert r.get_coder(tuple[int, ...]) == coders.TupleSequenceCoder(coders.VarIntCoder())
    assert r.get_coder(typing.List[str]) == coders.ListCoder(coders.StrUtf8Coder())
    assert r.get_coder(typing.Iterable[int]) == coders.IterableCoder(coders.VarIntCoder())
    assert r.get_coder(typing.Dict[str, float]) == coders.MapCoder(coders.StrUtf8Coder(),
                                                                   coders.FloatCoder())
    assert r.get_coder(typing.Optional[int]) == coders.NullableCoder(coders.VarIntCoder())
    for unknown in (typing.Any, None, object, Player, typing.Union[int, str]):
        assert r.get_coder(unknown) == coders.FastPrimitivesCoder()


def test_register_coder_needs_a_class_and_is_used_for_the_type():
    r = coders.CoderRegistry()
    with pytest.raises(TypeError, match="coder class"):
        r.register_coder(Player, PlayerCoder())
    r.register_coder(Player, PlayerCoder)
    assert r.get_coder(Player) == PlayerCoder()
    assert r.get_coder(typing.Tuple[Player, int]).coders()[0] == PlayerCoder()
    assert r.get_custom_type_coder_tuples([Player, int]) == [(Player, PlayerCoder)]
    assert r.custom_types == [Player]


def test_verify_deterministic_names_the_operation():
    r = coders.CoderRegistry()
    assert r.verify_deterministic(coders.StrUtf8Coder(), "GroupByKey 'G'") == coders.StrUtf8Coder()
    with pytest.raises(ValueError, match="for GroupByKey 'G' is not deterministic"):
        r.verify_deterministic(JsonCoderSubclass(), "GroupByKey 'G'")


class JsonCoderSubclass(coders.Coder):
    def encode(self, x):
        return json.dumps(x).encode()

    def decode(self, b):
        return json.loads(b)


def test_fallback_coder_can_be_replaced():
    r = coders.CoderRegistry()
    r.register_fallback_coder(coders.PickleCoder)
    assert r.get_coder(Player) == coders.PickleCoder()


# ---- keys of registered classes -----------------------------------------------------------------


class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y


class PointCoder(coders.Coder):
    def encode(self, p):
        return coders.VarIntCoder().encode(p.x) + b"," + coders.VarIntCoder().encode(p.y)

    def decode(self, b):
        x, y = b.split(b",")
        return Point(coders.VarIntCoder().decode(x), coders.VarIntCoder().decode(y))

    def is_deterministic(self):
        return True


class Opaque:
    pass


class OpaqueCoder(coders.Coder):
    def encode(self, v):
        return b"o"

    def decode(self, b):
        return Opaque()


@pytest.fixture
def registered():
    before = (dict(coders.registry._coders), list(coders.registry.custom_types))
    coders.registry.register_coder(Point, PointCoder)
    coders.registry.register_coder(Opaque, OpaqueCoder)
    yield
    coders.registry._coders, coders.registry.custom_types = before
    coders.registry._key_coders.clear()


def test_a_registered_deterministic_coder_makes_a_class_a_key(registered):
    a, b = coders.encode_key(Point(1, 2)), coders.encode_key(Point(1, 2))
    assert a == b
    assert coders.encode_key(Point(2, 1)) != a
    assert coders.encode_key((Point(1, 2), "x")) == coders.encode_key((Point(1, 2), "x"))
    # tagged with the class: never equal to a built-in key with the same payload
    payload = PointCoder().encode(Point(1, 2))
    assert a != coders.encode_key(payload) and payload in a
    assert b"Point" in a


def test_a_non_deterministic_registered_coder_refuses_keys_with_its_reason(registered):
    with pytest.raises(KeyEncodingError, match="OpaqueCoder.*not deterministic"):
        coders.encode_key(Opaque())


def test_an_unregistered_class_is_refused_with_the_fix():
    with pytest.raises(KeyEncodingError, match="register_coder"):
        coders.encode_key(Player("a", "b"))
