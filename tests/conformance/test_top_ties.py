"""Which of the elements that compare equal `Top` keeps, and their order, on every runner:
Beam's rule (docs/semantics.md, "Top among equal elements"), whatever the bundles, Spark
partitions and merge order; and `combiners.core` (Beam's combiners module has it).

The expectations come from `_beam_rule`, a plain-Python statement of that rule over the
input in its order: a bounded min-heap (heapq) where a new element replaces the worst kept
one only when it is strictly better, output best first by a stable sort (by the reverse of
an ascending stable sort for `Top.Of` in the default windowing).
"""

from __future__ import annotations

import heapq

import pytest

import headrace as beam
from headrace import combiners
from headrace.testing.util import assert_that, equal_to, is_empty
from headrace.transforms import window


class _Ranked:
    """An element ranked by its key only (reversed for `reverse=True`)."""

    def __init__(self, value, key, reverse):
        self.value, self.k, self.reverse = value, key(value), reverse

    def __lt__(self, other):
        return other.k < self.k if self.reverse else self.k < other.k


def _beam_rule(values, n, key=lambda x: x, reverse=False, top_of_order=False):
    heap = []
    for v in values:
        r = _Ranked(v, key, reverse)
        if len(heap) < n:
            heapq.heappush(heap, r)
        elif n:
            heapq.heappushpop(heap, r)
    if top_of_order:
        return [r.value for r in reversed(sorted(heap))]
    return [r.value for r in sorted(heap, reverse=True)]


def _score(x):
    return x[0]


# (score, name): seven scores over 300 distinct names, so every n has ties at its edge
PAIRS = [((i * 7 + i // 9) % 7, f"n{i:03d}") for i in range(300)]


@pytest.mark.parametrize("bundle_size", [1000, 7])
def test_top_of_largest_smallest_keep_beams_element_among_equals(make_pipeline, bundle_size):
    with make_pipeline(bundle_size=bundle_size) as p:
        pc = p | beam.Create(PAIRS)
        for n in (1, 5, 50):
            assert_that(pc | f"Of{n}" >> combiners.Top.Of(n, key=_score),
                        equal_to([_beam_rule(PAIRS, n, _score, top_of_order=True)]), label=f"of{n}")
            assert_that(pc | f"Rev{n}" >> combiners.Top.Of(n, key=_score, reverse=True),
                        equal_to([_beam_rule(PAIRS, n, _score, True, top_of_order=True)]),
                        label=f"rev{n}")
            assert_that(pc | f"Fn{n}" >> beam.CombineGlobally(combiners.TopCombineFn(n, key=_score)),
                        equal_to([_beam_rule(PAIRS, n, _score)]), label=f"fn{n}")
        assert_that(pc | "Largest" >> combiners.Top.Largest(20, key=_score),
                    equal_to([_beam_rule(PAIRS, 20, _score, top_of_order=True)]), label="largest")
        assert_that(pc | "Smallest" >> combiners.Top.Smallest(20, key=_score),
                    equal_to([_beam_rule(PAIRS, 20, _score, True, top_of_order=True)]), label="smallest")


def test_top_of_numbers_that_compare_equal(make_pipeline):
    nums = [1, 1.0, True, 2, 2.0, 0, False, 0.0, 2, 1.0, 0, 2.0, True] * 3

    def reprs(xs):
        return [repr(x) for x in xs]
    with make_pipeline(bundle_size=5) as p:
        pc = p | beam.Create(nums)
        assert_that(pc | "Of" >> combiners.Top.Of(7) | "R1" >> beam.Map(reprs),
                    equal_to([reprs(_beam_rule(nums, 7, top_of_order=True))]), label="of")
        assert_that(pc | "Smallest" >> beam.CombineGlobally(combiners.Smallest(7)) | "R2" >> beam.Map(reprs),
                    equal_to([reprs(_beam_rule(nums, 7, reverse=True))]), label="smallest")


@pytest.mark.parametrize("bundle_size", [1000, 4])
def test_top_per_key_keeps_beams_element_among_equals(make_pipeline, bundle_size):
    kvs = [(f"k{int(name[1:]) % 3}", (s, name)) for s, name in PAIRS]
    per = {}
    for k, v in kvs:
        per.setdefault(k, []).append(v)
    with make_pipeline(bundle_size=bundle_size) as p:
        pc = p | beam.Create(kvs)
        assert_that(pc | "PerKey" >> combiners.Top.PerKey(9, key=_score),
                    equal_to([(k, _beam_rule(vs, 9, _score)) for k, vs in per.items()]), label="pk")
        assert_that(pc | "Rev" >> combiners.Top.PerKey(9, key=_score, reverse=True),
                    equal_to([(k, _beam_rule(vs, 9, _score, True)) for k, vs in per.items()]), label="rev")
        assert_that(pc | "Smallest" >> combiners.Top.SmallestPerKey(4, key=_score),
                    equal_to([(k, _beam_rule(vs, 4, _score, True)) for k, vs in per.items()]), label="spk")


def test_top_of_in_windows_uses_the_combine_fns_order(make_pipeline):
    stamped = [beam.TimestampedValue(x, int(x[1][1:]) % 2 * 10) for x in PAIRS]
    windows = [[x for x in PAIRS if int(x[1][1:]) % 2 == w] for w in (0, 1)]
    with make_pipeline(bundle_size=6) as p:
        pc = p | beam.Create(stamped) | beam.WindowInto(window.FixedWindows(10))
        assert_that(pc | combiners.Top.Of(6, key=_score).without_defaults(),
                    equal_to([_beam_rule(xs, 6, _score) for xs in windows]))


def test_top_of_in_the_global_window_always_outputs_a_list(make_pipeline):
    # Beam's Top.Of combines per bundle in the default windowing: `[]` even without defaults
    with make_pipeline() as p:
        empty = p | beam.Create([])
        assert_that(empty | "Of" >> combiners.Top.Of(2).without_defaults(), equal_to([[]]), label="of")
        assert_that(empty | "Largest" >> combiners.Top.Largest(2, has_defaults=False), equal_to([[]]),
                    label="largest")
        windowed = empty | beam.WindowInto(window.FixedWindows(10))
        assert_that(windowed | "W" >> combiners.Top.Of(2).without_defaults(), is_empty(), label="w")


def test_combiners_core_is_transforms_core():
    from headrace.transforms import combiners as transforms_combiners
    from headrace.transforms import core
    assert combiners.core is core and transforms_combiners.core is core
    assert combiners.core.CombineGlobally is beam.CombineGlobally
