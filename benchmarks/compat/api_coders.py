"""Beam's coders as a ported program uses them: a user class with a registered deterministic
coder (`coders.registry.register_coder`) as a GroupByKey, CombinePerKey and Distinct key (the
key type named by `with_output_types`, as Beam needs); `ReadFromText(coder=)` and
`WriteToText(coder=)` with the JSON coder of Beam's docs (the written file read back from a
DoFn); the bytes of Beam's standard coders (`VarIntCoder`, `StrUtf8Coder`, `BytesCoder`,
`BooleanCoder`, `FloatCoder`, `SinglePrecisionFloatCoder`, `TupleCoder`, `IterableCoder`,
`ListCoder`, `NullableCoder`, `LengthPrefixCoder`, `MapCoder`, `TimestampCoder`,
`BigIntegerCoder`, `FastPrimitivesCoder` on primitives, nested and outer contexts) printed as hex
from inside a Map, with their round trips and `is_deterministic()`."""

import json
import os
import struct
import tempfile
import typing

from _sdk import FileSystems, ReadFromText, Timestamp, WriteToText, beam, coders


class Player:
    """A user class used as a grouping key: equal by (team, name)."""

    def __init__(self, team, name):
        self.team = team
        self.name = name

    def __eq__(self, other):
        return isinstance(other, Player) and (self.team, self.name) == (other.team, other.name)

    def __hash__(self):
        return hash((self.team, self.name))

    def __repr__(self):
        return f"Player({self.team}/{self.name})"


class PlayerCoder(coders.Coder):
    """A deterministic coder of Player: 'team:name' in UTF-8."""

    def encode(self, p):
        return f"{p.team}:{p.name}".encode("utf-8")

    def decode(self, b):
        team, name = b.decode("utf-8").split(":", 1)
        return Player(team, name)

    def is_deterministic(self):
        return True


class JsonCoder(coders.Coder):
    """A JSON coder interpreting each line as a JSON value (Beam's cookbook coder)."""

    def encode(self, x):
        return json.dumps(x, sort_keys=True).encode("utf-8")

    def decode(self, x):
        return json.loads(x)


coders.registry.register_coder(Player, PlayerCoder)

TEAMS = ["ants", "bees", "cats", "dogs", "eels"]


def make_inputs(dir):
    """1,500 JSON match records, one per line."""
    with open(os.path.join(dir, "matches.jsonl"), "w") as f:
        for i in range(1500):
            rec = {
                "team": TEAMS[i % 5],
                "player": f"p{(i * 7) % 23}",
                "goals": (i * 13) % 4,
                "minute": (i * 11) % 90,
                "tags": [f"t{i % 3}"] if i % 4 else [],
            }
            f.write(json.dumps(rec) + "\n")


def _hex(b):
    """Bytes as lower-case hex."""
    return b.hex()


_INTS = [0, 1, -1, 63, 64, 127, 128, 300, -300, 2**31 - 1, -(2**31), 2**62, -(2**63), 2**63 - 1]
_STRS = ["", "a", "hello world", "héllo", "日本語", "tab\tnewline\n", "x" * 130]
_FLOATS = [0.0, -0.0, 1.0, -1.5, 3.141592653589793, 1e300, -2.5e-300, float("inf")]


def _standard_coder_lines(i):
    """The i-th group of 'coder value hex' lines (evaluated inside a Map)."""
    c = coders
    groups = [
        [("varint", x, c.VarIntCoder()) for x in _INTS],
        [("str_utf8", x, c.StrUtf8Coder()) for x in _STRS],
        [("bytes", x, c.BytesCoder()) for x in [b"", b"\x00\xff", b"abc" * 50]],
        [("bool", x, c.BooleanCoder()) for x in [True, False]],
        [("float", x, c.FloatCoder()) for x in _FLOATS],
        [("single_float", x, c.SinglePrecisionFloatCoder()) for x in [0.0, 1.5, -2.25, 1024.0]],
        [
            ("tuple", x, c.TupleCoder([c.VarIntCoder(), c.StrUtf8Coder()]))
            for x in [(1, "a"), (-5, ""), (300, "héllo")]
        ],
        [
            ("tuple_bytes_float", x, c.TupleCoder([c.BytesCoder(), c.FloatCoder(), c.BooleanCoder()]))
            for x in [(b"k", 2.5, True), (b"", -1.0, False)]
        ],
        [("iterable", x, c.IterableCoder(c.VarIntCoder())) for x in [[], [1, 2, 3], list(range(200))]],
        [("list_str", x, c.ListCoder(c.StrUtf8Coder())) for x in [[], ["a", "bc", ""]]],
        [("nullable", x, c.NullableCoder(c.VarIntCoder())) for x in [None, 0, 150]],
        [("length_prefix", x, c.coders.LengthPrefixCoder(c.StrUtf8Coder())) for x in ["", "abc"]],
        [("map", x, c.MapCoder(c.StrUtf8Coder(), c.VarIntCoder())) for x in [{}, {"a": 1, "b": 300}]],
        [
            ("timestamp", x, c.TimestampCoder())
            for x in [Timestamp(0), Timestamp(micros=1500), Timestamp(-10)]
        ],
        [("big_integer", x, c.BigIntegerCoder()) for x in [0, 1, -1, 255, 2**70, -(2**70)]],
        [
            ("fast_primitives", x, c.FastPrimitivesCoder())
            for x in [
                None,
                0,
                -7,
                2**40,
                1.25,
                "s",
                "héllo",
                b"b",
                True,
                False,
                (1, "a"),
                [1, [2, 3]],
                (),
                {"k": 1},
                ("nested", (None, 2.0, b"x")),
                {7},
                {1, 2, 3},
                {"k": [1, {2}]},
            ]
        ],
        [
            ("deterministic_fast", x, c.FastPrimitivesCoder().as_deterministic_coder("step"))
            for x in [None, 5, "a", (1, 2), [3, "b"], {3, 1, 2}, {"b": 1, "a": 2}]
        ],
        [("player", x, PlayerCoder()) for x in [Player("ants", "p1"), Player("bees", "p22")]],
        [("json", x, JsonCoder()) for x in [{"b": 1, "a": [1, 2]}, [None, True], "s", 3.5]],
    ]
    lines = []
    for name, value, coder in groups[i]:
        outer = coder.encode(value)
        back = coder.decode(outer)
        if isinstance(value, float) and value != value:
            same = back != back
        elif name == "single_float":
            same = back == struct.unpack(">f", struct.pack(">f", value))[0]
        else:
            same = back == value
        lines.append(
            f"coder {name} {value!r} outer={_hex(outer)} roundtrip={same}"
            f" deterministic={coder.is_deterministic()}"
        )
    return lines


_NUM_GROUPS = 19


def _nested_lines(i):
    """Nested encodings: each coder as the first component of a TupleCoder (Beam's nested context)."""
    c = coders
    cases = [
        ("varint", c.VarIntCoder(), _INTS),
        ("str_utf8", c.StrUtf8Coder(), _STRS),
        ("bytes", c.BytesCoder(), [b"", b"xyz"]),
        ("iterable", c.IterableCoder(c.StrUtf8Coder()), [[], ["a", "b"]]),
        ("player", PlayerCoder(), [Player("cats", "p3")]),
        ("fast_primitives", c.FastPrimitivesCoder(), [None, 3, "s", (1, "a"), [b"x"]]),
    ]
    name, coder, values = cases[i]
    pair = c.TupleCoder([coder, c.VarIntCoder()])
    return [f"nested {name} {v!r} {_hex(pair.encode((v, 1)))}" for v in values]


class _ReadBack(beam.DoFn):
    """Opens each file WriteToText wrote and emits its lines (sorted), tagged."""

    def process(self, path):
        with FileSystems.open(path) as f:
            data = f.read().decode("utf-8")
        for line in sorted(data.splitlines()):
            yield f"written {line}"


def build(p, inputs):
    """The registered key coder, the JSON coder on text IO, and the standard coders' bytes."""
    outs = []
    records = p | "ReadJson" >> ReadFromText(os.path.join(inputs, "matches.jsonl"), coder=JsonCoder())
    keyed = records | "ByPlayer" >> beam.Map(
        lambda r: (Player(r["team"], r["player"]), r["goals"])
    ).with_output_types(typing.Tuple[Player, int])
    outs.append(
        keyed
        | "Goals" >> beam.CombinePerKey(sum)
        | "fmt_goals" >> beam.MapTuple(lambda pl, g: f"goals {pl!r} {g}")
    )
    outs.append(
        keyed
        | "GBK" >> beam.GroupByKey()
        | "fmt_gbk" >> beam.MapTuple(lambda pl, gs: f"games {pl!r} {len(list(gs))} {sorted(gs)}")
    )
    outs.append(
        keyed
        | "PlayersOnly" >> beam.Keys().with_output_types(Player)
        | "Distinct" >> beam.Distinct()
        | "fmt_distinct" >> beam.Map(lambda pl: f"player {pl!r}")
    )
    outs.append(
        records
        | "Tags" >> beam.FlatMap(lambda r: r["tags"])
        | "TagCount" >> beam.combiners.Count.PerElement()
        | "fmt_tags" >> beam.MapTuple(lambda t, n: f"tag {t} {n}")
    )

    # WriteToText with the JSON coder, read back from a DoFn
    out_dir = tempfile.mkdtemp(prefix="api_coders_")
    summaries = (
        keyed
        | "Summ"
        >> beam.CombinePerKey(
            beam.combiners.TupleCombineFn(sum, max, beam.combiners.CountCombineFn()).with_common_input()
        )
        | "ToDict"
        >> beam.MapTuple(
            lambda pl, t: {"team": pl.team, "player": pl.name, "goals": t[0], "best": t[1], "games": t[2]}
        )
    )
    outs.append(
        summaries
        | "WriteJson"
        >> WriteToText(os.path.join(out_dir, "summary"), file_name_suffix=".json", coder=JsonCoder())
        | "ReadBack" >> beam.ParDo(_ReadBack())
    )

    # the standard coders' bytes, computed inside Maps
    outs.append(
        p
        | "Groups" >> beam.Create(list(range(_NUM_GROUPS)))
        | "Encode" >> beam.FlatMap(_standard_coder_lines)
    )
    outs.append(
        p | "NestedGroups" >> beam.Create(list(range(6))) | "EncodeNested" >> beam.FlatMap(_nested_lines)
    )
    outs.append(
        p
        | "Registry" >> beam.Create([int, str, bytes, float, bool, Player])
        | "LookUp"
        >> beam.Map(lambda t: f"registry {t.__name__} {type(coders.registry.get_coder(t)).__name__}")
    )
    return outs | beam.Flatten()
