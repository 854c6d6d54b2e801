"""Coders and type hints in pipelines, on every runner.

A user class with a registered deterministic coder is a grouping key (GroupByKey,
CombinePerKey, CoGroupByKey, Distinct; on Spark, a shuffle on the coder's bytes) and comes back
as the user's objects; a registered coder that is not deterministic is refused naming the step.
Text IO with Beam's coders. Type hints (decorators, annotations, `.with_*_types`) set element
types, which choose coders, and a step whose declared input disagrees with its input's element
type fails at construction naming both steps, unless --no_pipeline_type_check.
Expected outputs are computed with plain Python from the inputs.
"""

from __future__ import annotations

import collections
import typing

import pytest

import headrace as beam
from headrace import coders, typehints
from headrace.transforms import window
from headrace.errors import PipelineConstructionError, PipelineExecutionError
from headrace.testing.test_stream import TestStream
from headrace.testing.util import assert_that, equal_to
from headrace.typehints import TypeCheckError


class Player:
    """Beam's programming-guide example class (with value equality, for the assertions)."""

    def __init__(self, team, name):
        self.team, self.name = team, name

    def __eq__(self, other):
        return isinstance(other, Player) and (self.team, self.name) == (other.team, other.name)

    def __hash__(self):
        return hash((self.team, self.name))

    def __repr__(self):
        return f"Player({self.team!r}, {self.name!r})"


class PlayerCoder(coders.Coder):
    """Beam's programming-guide example coder, deterministic."""

    def encode(self, player):
        return f"{player.team}:{player.name}".encode("utf-8")

    def decode(self, s):
        return Player(*s.decode("utf-8").split(":"))

    def is_deterministic(self):
        return True


coders.registry.register_coder(Player, PlayerCoder)  # at import, as Beam programs do


class Badge:
    """Registered only inside a test (the runner must ship the registration to its workers)."""

    def __init__(self, code):
        self.code = code

    def __eq__(self, other):
        return isinstance(other, Badge) and self.code == other.code

    def __hash__(self):
        return hash(self.code)

    def __repr__(self):
        return f"Badge({self.code!r})"


class BadgeCoder(coders.Coder):
    def encode(self, badge):
        return coders.VarIntCoder().encode(badge.code)

    def decode(self, b):
        return Badge(coders.VarIntCoder().decode(b))

    def is_deterministic(self):
        return True


class Loose:
    """A class whose registered coder is not deterministic."""

    def __init__(self, v):
        self.v = v


class LooseCoder(coders.Coder):
    def encode(self, x):
        return coders.PickleCoder().encode(x.v)

    def decode(self, b):
        return Loose(coders.PickleCoder().decode(b))


coders.registry.register_coder(Loose, LooseCoder)

PLAYERS = [Player("red", "ann"), Player("blue", "bob"), Player("red", "cid"), Player("red", "ann")]
SCORES = [(Player("red", "ann"), 3), (Player("blue", "bob"), 5), (Player("red", "ann"), 4),
          (Player("red", "cid"), 1), (Player("blue", "bob"), 2), (Player("red", "ann"), 10)]


def _grouped(pairs):
    out = collections.defaultdict(list)
    for k, v in pairs:
        out[k].append(v)
    return out


def test_group_by_key_on_a_registered_class(make_pipeline):
    expected = {k: sorted(vs) for k, vs in _grouped(SCORES).items()}
    with make_pipeline(bundle_size=2) as p:
        out = (p | beam.Create(SCORES) | beam.GroupByKey()
               | beam.MapTuple(lambda k, vs: (type(k).__name__, k, sorted(vs))))
        assert_that(out, equal_to([("Player", k, vs) for k, vs in expected.items()]))


def test_combine_per_key_on_a_class_registered_after_import(make_pipeline):
    # registered here, not when the module is imported: a runner with worker processes
    # must carry the registration there (the keys are shuffled by the coder's bytes)
    before = (dict(coders.registry._coders), list(coders.registry.custom_types))
    coders.registry.register_coder(Badge, BadgeCoder)
    try:
        data = [(Badge(i % 5), i) for i in range(40)]
        sums = collections.Counter()
        for k, v in data:
            sums[k] += v
        with make_pipeline(bundle_size=3) as p:
            out = p | beam.Create(data) | beam.CombinePerKey(sum)
            assert_that(out, equal_to(list(sums.items())))
    finally:
        coders.registry._coders, coders.registry.custom_types = before
        coders.registry._key_coders.clear()


class Medal(Badge):
    """Registered inside a streaming test, for good (a captured streaming test's query runs
    after its body returns, so the registration must outlive it)."""


class MedalCoder(BadgeCoder):
    def decode(self, b):
        return Medal(coders.VarIntCoder().decode(b))


def test_a_stream_keyed_by_a_class_registered_after_import(make_pipeline):
    # on the Spark runner a TestStream pipeline is a streaming query: its stages and its
    # stateful operator run in worker processes, which must get the registration too
    coders.registry.register_coder(Medal, MedalCoder)
    data = [(Medal(i % 4), i) for i in range(24)]
    sums = collections.Counter()
    for k, v in data:
        sums[k] += v
    tv = [beam.window.TimestampedValue(e, e[1]) for e in data]
    stream = (TestStream().add_elements(tv[:12]).advance_watermark_to(5)
              .add_elements(tv[12:]).advance_watermark_to_infinity())
    # bundle_size=1: many bundles, each of which must find the registration (and the options
    # of test_test_stream's one-bundle test, so that on Spark the two share a query)
    with make_pipeline(bundle_size=1) as p:
        out = (p | stream | beam.WindowInto(window.FixedWindows(60)) | beam.CombinePerKey(sum)
               | beam.MapTuple(lambda k, v: (type(k).__name__, k, v)))
        assert_that(out, equal_to([("Medal", k, v) for k, v in sums.items()]))


class Ticket:
    """A key class given a byte encoding with register_key_encoder inside a test."""

    def __init__(self, row, seat):
        self.row, self.seat = row, seat

    def __eq__(self, other):
        return isinstance(other, Ticket) and (self.row, self.seat) == (other.row, other.seat)

    def __hash__(self):
        return hash((self.row, self.seat))

    def __repr__(self):
        return f"Ticket({self.row!r}, {self.seat!r})"


def test_register_key_encoder_after_import_reaches_the_workers(make_pipeline):
    coders.register_key_encoder(Ticket, lambda t: f"{t.row}/{t.seat}".encode())
    data = [(Ticket("a", i % 3), i) for i in range(30)]
    expected = {k: sorted(vs) for k, vs in _grouped(data).items()}
    with make_pipeline(bundle_size=4) as p:
        out = (p | beam.Create(data) | beam.GroupByKey()
               | beam.MapTuple(lambda k, vs: (k, sorted(vs))))
        assert_that(out, equal_to(list(expected.items())))


def test_cogroup_by_key_and_distinct_on_a_registered_class(make_pipeline):
    teams = [(Player("red", "ann"), "captain"), (Player("blue", "dan"), "keeper")]
    expected = {}
    for k in {k for k, _ in SCORES} | {k for k, _ in teams}:
        expected[k] = (sorted(v for kk, v in SCORES if kk == k), sorted(v for kk, v in teams if kk == k))
    with make_pipeline(bundle_size=2) as p:
        scores = p | "Scores" >> beam.Create(SCORES)
        roles = p | "Roles" >> beam.Create(teams)
        joined = ({"scores": scores, "roles": roles} | beam.CoGroupByKey()
                  | beam.MapTuple(lambda k, g: (k, (sorted(g["scores"]), sorted(g["roles"])))))
        assert_that(joined, equal_to(list(expected.items())), label="Joined")
        distinct = p | "Players" >> beam.Create(PLAYERS) | beam.Distinct()
        assert_that(distinct, equal_to(list(set(PLAYERS))), label="Distinct")


def test_a_key_whose_registered_coder_is_not_deterministic_fails_naming_the_step(make_pipeline):
    with pytest.raises(PipelineExecutionError, match=r"'GroupLoose'.*LooseCoder.*not deterministic"):
        with make_pipeline() as p:
            _ = (p | beam.Create([(Loose(1), "a")]) | "GroupLoose" >> beam.GroupByKey())


def test_a_typed_key_with_a_non_deterministic_coder_is_refused_at_construction(make_pipeline):
    p = make_pipeline()
    pairs = p | beam.Create([(Loose(1), "a")]).with_output_types(typehints.KV[Loose, str])
    with pytest.raises(PipelineConstructionError, match=r"'Group'.*LooseCoder.*not deterministic"):
        _ = pairs | "Group" >> beam.GroupByKey()


# ---- text IO with Beam's coders ------------------------------------------------------------------


def test_standard_coder_bytes_inside_a_step_are_beams(make_pipeline):
    # bytes Beam 2.77 gives (a ported program printed them from a Map): FastPrimitivesCoder
    # writes a str / bytes length only when nested; TimestampCoder is Java's InstantCoder
    # (millis + 2**63, big-endian)
    from headrace.utils.timestamp import Timestamp

    cases = [("fp", "héllo", "0468c3a96c6c6f"), ("fp", b"b", "0362"), ("fp", ("a", b"x"), "0602040161030178"),
             ("ts", 0, "8000000000000000"), ("ts", 1500, "8000000000000001"),
             ("ts", -10_000_000, "7fffffffffffd8f0"), ("fp", {7}, "08010107")]

    def encode(case):
        kind, value, _ = case
        if kind == "fp":
            return coders.FastPrimitivesCoder().encode(value).hex()
        return coders.TimestampCoder().encode(Timestamp(micros=value)).hex()

    with make_pipeline() as p:
        out = p | beam.Create(cases) | beam.Map(encode)
        assert_that(out, equal_to([hexed for _, _, hexed in cases]))


def test_write_and_read_text_with_a_coder(make_pipeline, tmp_path):
    # Base64PickleCoder's bytes never hold a newline: each element is one line
    values = [("a", 1), {"k": [1.5, None]}, "line\nbreak", 2**80]
    with make_pipeline() as p:
        _ = p | beam.Create(values) | beam.WriteToText(str(tmp_path / "out"),
                                                        coder=coders.Base64PickleCoder())
    lines = []
    for f in sorted(tmp_path.glob("out*")):
        lines += f.read_bytes().splitlines()
    assert sorted(repr(coders.Base64PickleCoder().decode(b)) for b in lines) == \
        sorted(repr(v) for v in values)
    with make_pipeline() as p:
        back = p | beam.ReadFromText(str(tmp_path / "out*"), coder=coders.Base64PickleCoder())
        assert_that(back | beam.Map(repr), equal_to([repr(v) for v in values]))


def test_read_text_elements_take_the_coders_type(make_pipeline, tmp_path):
    path = tmp_path / "in.txt"
    path.write_text("1\n2\n")
    p = make_pipeline()
    lines = p | beam.ReadFromText(str(path))
    assert lines.element_type is str
    assert coders.registry.get_coder(lines.element_type) == coders.StrUtf8Coder()
    with pytest.raises(TypeCheckError, match="ReadFromText"):
        _ = lines | "Double" >> beam.Map(lambda x: x * 2).with_input_types(int)


def test_test_stream_round_trips_elements_through_its_coder():
    ts = TestStream(coder=coders.TupleCoder([coders.StrUtf8Coder(),
                                                                      coders.VarIntCoder()]))
    ts.add_elements([("a", 1)])
    with pytest.raises(Exception, match="TupleCoder"):
        ts.add_elements([("a", "not an int")])


# ---- type hints ----------------------------------------------------------------------------------


@typehints.with_input_types(str)
@typehints.with_output_types(typehints.KV[str, int])
def _parse(line):
    word, n = line.split(",")
    return word, int(n)


@typehints.with_input_types(typehints.Tuple[str, int])
@typehints.with_output_types(str)
class _Format(beam.DoFn):
    def process(self, element):
        yield f"{element[0]}={element[1]}"


def test_decorated_steps_run_and_type_their_outputs(make_pipeline):
    lines = ["a,1", "b,2", "a,5"]
    totals = collections.Counter()
    for line in lines:
        w, n = line.split(",")
        totals[w] += int(n)
    with make_pipeline() as p:
        parsed = p | beam.Create(lines) | beam.Map(_parse)
        assert parsed.element_type == typing.Tuple[str, int]
        assert coders.registry.get_coder(parsed.element_type) == coders.TupleCoder(
            [coders.StrUtf8Coder(), coders.VarIntCoder()])
        summed = parsed | beam.CombinePerKey(sum)
        grouped = parsed | beam.GroupByKey()
        assert grouped.element_type == typing.Tuple[str, typing.Iterable[int]]
        out = summed | beam.ParDo(_Format())
        assert out.element_type is str
        assert_that(out, equal_to([f"{w}={n}" for w, n in totals.items()]))


def test_a_step_whose_declared_input_disagrees_names_both_steps(make_pipeline):
    p = make_pipeline()
    numbers = p | "Numbers" >> beam.Create([1, 2, 3])
    with pytest.raises(TypeCheckError) as info:
        _ = numbers | "Parse" >> beam.Map(_parse)
    message = str(info.value)
    assert "'Parse'" in message and "'Numbers'" in message and "str" in message and "int" in message
    assert "--no_pipeline_type_check" in message
    # the check sees through Map's output type and a DoFn's declared input
    words = p | "Words" >> beam.Create(["x"]) | "Len" >> beam.Map(len).with_output_types(int)
    with pytest.raises(TypeCheckError, match=r"'Fmt'.*'Len'"):
        _ = words | "Fmt" >> beam.ParDo(_Format())


def test_annotations_and_plain_typing_hints_are_read(make_pipeline):
    def shout(word: str) -> str:
        return word.upper()

    def explode(word: str) -> typing.Iterable[str]:
        return list(word)

    p = make_pipeline()
    ints = p | "Ints" >> beam.Create([1, 2])
    with pytest.raises(TypeCheckError, match="'Shout'"):
        _ = ints | "Shout" >> beam.Map(shout)
    words = p | "Words" >> beam.Create(["ab"])
    assert (words | "Explode" >> beam.FlatMap(explode)).element_type is str
    assert (words | "Shout" >> beam.Map(shout)).element_type is str
    # compatible types pass: bool is an int, int may stand for float, Optional accepts its type
    _ = p | "Bools" >> beam.Create([True]) | "AsInt" >> beam.Map(lambda x: x).with_input_types(int)
    _ = ints | "AsFloat" >> beam.Map(lambda x: x).with_input_types(float)
    _ = ints | "AsOptional" >> beam.Map(lambda x: x).with_input_types(typing.Optional[int])


def test_composite_transforms_take_class_decorators(make_pipeline):
    @typehints.with_input_types(int)
    @typehints.with_output_types(int)
    class Square(beam.PTransform):
        def expand(self, pcoll):
            return pcoll | beam.Map(lambda x: x * x)

    p = make_pipeline()
    squared = p | "Ints" >> beam.Create([1, 2]) | "Square" >> Square()
    assert squared.element_type is int
    with pytest.raises(TypeCheckError, match=r"'Square2'.*'Words'"):
        _ = p | "Words" >> beam.Create(["a"]) | "Square2" >> Square()


def test_no_pipeline_type_check_turns_the_check_off(make_pipeline):
    values = ["a,1", "b,2"]
    with make_pipeline(pipeline_type_check=False) as p:
        # declared int, given str: accepted, and the function runs on the str elements
        out = (p | beam.Create(values)
               | "Parse" >> beam.Map(lambda s: s.split(",")[0]).with_input_types(int))
        assert_that(out, equal_to(["a", "b"]))
