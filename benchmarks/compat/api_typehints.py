"""Beam's type hints as a ported program uses them: `@typehints.with_input_types /
with_output_types` on functions and on DoFn classes, `.with_input_types() / .with_output_types()`
on transforms, Python annotations on `DoFn.process` and on Map functions, `typing` forms and
Beam's own (`typehints.Tuple`, `KV`, `List`, `Dict`, `Optional`, `Union`, `Iterable`, `Any`), a
composite PTransform class with decorators, and a hinted key type making a GroupByKey /
CombinePerKey; the outputs of a pipeline whose checks pass, and the fact that a construction-time
`TypeCheckError` is raised (only the fact, not its message) for inputs that disagree."""

import typing

from _sdk import beam, typehints

T = typehints


@T.with_input_types(str)
@T.with_output_types(T.Tuple[str, int])
def parse(line):
    """'word:count' -> (word, count)."""
    word, count = line.split(":")
    return word, int(count)


@T.with_input_types(T.Tuple[str, int])
@T.with_output_types(T.Iterable[str])
def explode(kv):
    """(word, n) -> the word's letters, n times each (n capped at 3)."""
    word, n = kv
    for _ in range(min(n, 3)):
        yield from word


@T.with_input_types(T.KV[str, T.Iterable[int]])
@T.with_output_types(T.KV[str, T.List[int]])
class SortValues(beam.DoFn):
    """A decorated DoFn: a key's grouped values, sorted."""

    def process(self, kv):
        yield kv[0], sorted(kv[1])


class Annotated(beam.DoFn):
    """A DoFn typed by the annotations of process."""

    def process(self, element: typing.Tuple[str, int]) -> typing.Iterable[str]:
        word, n = element
        yield f"{word}={n * 2}"


def annotated_len(word: str) -> int:
    """An annotated Map function."""
    return len(word)


@T.with_input_types(T.Optional[int])
@T.with_output_types(str)
def describe_optional(x):
    """None or an int, described."""
    return "none" if x is None else f"int {x}"


@T.with_input_types(T.Union[int, str])
@T.with_output_types(str)
def describe_union(x):
    """An int or a str, described."""
    return f"{type(x).__name__} {x}"


@T.with_input_types(str)
@T.with_output_types(T.Dict[str, int])
class CountLetters(beam.PTransform):
    """A decorated composite: letter counts of all words, as one dict."""

    def expand(self, words):
        return (
            words
            | "Letters" >> beam.FlatMap(lambda w: list(w)).with_output_types(str)
            | "CountLetter" >> beam.combiners.Count.PerElement()
            | "AsDict" >> beam.combiners.ToDict()
        )


def _type_check_error_raised(make):
    """Whether building a step on a fresh pipeline raises a TypeCheckError."""
    try:
        with_pipeline = beam.Pipeline()
        make(with_pipeline)
    except typehints.TypeCheckError:
        return True
    return False


def build(p, inputs):
    """Typed steps over 1,200 'word:count' lines, and construction-time checks."""
    words = ["river", "stone", "bridge", "mill", "race", "weir", "sluice", "flume", "dam", "lock"]
    lines = p | "Lines" >> beam.Create([f"{words[i % 10]}:{(i * 7) % 5}" for i in range(1200)])
    pairs = lines | "Parse" >> beam.Map(parse)
    outs = []
    outs.append(
        pairs | "Sum" >> beam.CombinePerKey(sum) | "FmtSum" >> beam.MapTuple(lambda w, n: f"sum {w} {n}")
    )
    outs.append(
        pairs
        | "Explode" >> beam.FlatMap(explode)
        | "CountLetters" >> beam.combiners.Count.PerElement()
        | "FmtLetters" >> beam.MapTuple(lambda c, n: f"letter {c} {n}")
    )
    outs.append(
        pairs
        | "Group" >> beam.GroupByKey()
        | "Sort" >> beam.ParDo(SortValues())
        | "FmtSorted" >> beam.MapTuple(lambda w, vs: f"sorted {w} {len(vs)} {vs[:8]}")
    )
    outs.append(
        pairs
        | "Annotated" >> beam.ParDo(Annotated())
        | "DistinctAnn" >> beam.Distinct()
        | "FmtAnn" >> beam.Map(lambda s: f"annotated {s}")
    )
    outs.append(
        pairs
        | "Words" >> beam.Keys()
        | "Len" >> beam.Map(annotated_len)
        | "LenCount" >> beam.combiners.Count.PerElement()
        | "FmtLen" >> beam.MapTuple(lambda n, c: f"length {n} {c}")
    )
    outs.append(
        pairs
        | "ToOpt" >> beam.Map(lambda kv: None if kv[1] == 0 else kv[1]).with_output_types(T.Optional[int])
        | "Opt" >> beam.Map(describe_optional)
        | "OptCount" >> beam.combiners.Count.PerElement()
        | "FmtOpt" >> beam.MapTuple(lambda d, c: f"optional {d} {c}")
    )
    outs.append(
        pairs
        | "ToUnion" >> beam.Map(lambda kv: kv[0] if kv[1] % 2 else kv[1]).with_output_types(T.Union[int, str])
        | "Union" >> beam.Map(describe_union)
        | "UnionCount" >> beam.combiners.Count.PerElement()
        | "FmtUnion" >> beam.MapTuple(lambda d, c: f"union {d} {c}")
    )
    outs.append(
        pairs
        | "Keys2" >> beam.Keys()
        | "CountLettersComposite" >> CountLetters()
        | "FmtDict" >> beam.Map(lambda d: f"letter_dict {sorted(d.items())}")
    )
    outs.append(
        pairs
        | "Swap"
        >> beam.Map(lambda kv: (kv[1], kv[0]))
        .with_input_types(T.Tuple[str, int])
        .with_output_types(T.Tuple[int, str])
        | "ByCount" >> beam.GroupByKey()
        | "FmtByCount" >> beam.MapTuple(lambda n, ws: f"by_count {n} {sorted(set(ws))}")
    )
    outs.append(
        lines
        | "AnyTyped" >> beam.Map(lambda s: s.upper()).with_output_types(T.Any)
        | "AnyDistinct" >> beam.Distinct()
        | "FmtAny" >> beam.Map(lambda s: f"any {s}")
    )
    outs.append(
        pairs
        | "Weird" >> beam.Map(lambda kv: {kv[0]: kv[1]}).with_output_types(T.Dict[str, int])
        | "DictKeys" >> beam.FlatMap(lambda d: list(d)).with_input_types(T.Dict[str, int])
        | "DictDistinct" >> beam.Distinct()
        | "FmtDictKeys" >> beam.Map(lambda s: f"dict_key {s}")
    )

    # construction-time checks: only whether a TypeCheckError is raised
    checks = {
        "int_into_str_fn": lambda q: q | beam.Create([1, 2, 3]) | beam.Map(parse),
        "str_into_int_transform": lambda q: (
            q | beam.Create(["a", "b"]) | beam.Map(lambda x: x * 2).with_input_types(int)
        ),
        "declared_output_mismatch": lambda q: (
            q
            | beam.Create(["a"])
            | beam.Map(lambda x: x).with_output_types(int)
            | beam.Map(lambda s: s.upper()).with_input_types(str)
        ),
        "consistent_chain": lambda q: q | beam.Create(["a:1"]) | beam.Map(parse) | beam.CombinePerKey(sum),
    }
    results = [
        f"type_check {name} raised={_type_check_error_raised(make)}" for name, make in sorted(checks.items())
    ]
    outs.append(p | "Checks" >> beam.Create(results))
    return outs | beam.Flatten()
