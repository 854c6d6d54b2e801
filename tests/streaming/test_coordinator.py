"""The streaming runner's coordinator: watermarks with holds, and the micro-batch schedule.

Pure Python (no Spark): the coordinator decides, after each batch, what the next batch is.
"""

from __future__ import annotations

from dataclasses import replace

from headrace.model.time import MAX_TIMESTAMP_MICROS as MAX, MIN_TIMESTAMP_MICROS as MIN
from headrace.runners.kit.plan import Kind
from headrace.runners.spark.streaming.coordinator import (
    CLOCK_MAX_MS, BatchState, Coordinator, Node, to_clock,
)
from headrace.testing.test_stream import ElementEvent, ProcessingTimeEvent, WatermarkEvent
from headrace.model.windowed import TimestampedValue
from headrace.utils.timestamp import Timestamp

GROUPING, SOURCE, STAGE, TEST_STREAM = Kind.GROUPING, Kind.SOURCE, Kind.STAGE, Kind.TEST_STREAM

US = 1_000_000

# TestStream (pc 1) -> stage (pc 2) -> grouping 0 (pc 3) -> grouping 1 (pc 4)
NODES = [Node(TEST_STREAM, 0, (), (1,), (None,)), Node(STAGE, -1, (1,), (2,)),
         Node(GROUPING, 0, (2,), (3,)), Node(GROUPING, 1, (3,), (4,))]


def script():
    return [ElementEvent([TimestampedValue("a", 1)]), WatermarkEvent(10),
            ProcessingTimeEvent(5)]


def test_a_grouping_output_watermark_is_held_by_its_keys_holds_and_never_goes_back():
    c = Coordinator(NODES, [script()], 2)
    st = BatchState(2)
    pos = [2]                                    # after the watermark event: source at 10 s
    assert c.watermarks(pos, st, [MIN, MIN]) == ([10 * US, 10 * US], [10 * US, 10 * US])
    st.apply("hold", 0, MAX, 4 * US)             # a key of grouping 0 holds at 4 s
    st.apply("hold", 0, MAX, 6 * US)
    assert c.watermarks(pos, st, [MIN, MIN]) == ([10 * US, 4 * US], [4 * US, 4 * US])
    st.apply("hold", 0, 4 * US, MAX)             # released: the other hold counts
    assert c.watermarks(pos, st, [MIN, MIN]) == ([10 * US, 6 * US], [6 * US, 6 * US])
    # output watermarks never move back, whatever the holds say
    assert c.watermarks(pos, st, [8 * US, 8 * US])[1] == [8 * US, 8 * US]


def test_holds_are_a_multiset():
    st = BatchState(1)
    st.apply("hold", 0, MAX, 5)
    st.apply("hold", 0, MAX, 5)
    st.apply("hold", 0, 5, MAX)
    assert st.min_hold(0) == 5
    st.apply("hold", 0, 5, 7)
    assert st.min_hold(0) == 7
    st.apply("hold", 0, 7, MAX)
    assert st.min_hold(0) == MAX


def schedule(c, st, off=None):
    """(position, watermarks, processing time) of every batch until the coordinator stops."""
    off = off or c.initial_offset()
    seen = []
    while True:
        nxt = c.next_offset(off, st, wall_us=0)
        if nxt is None:
            return seen
        assert nxt.batch == off.batch + 1
        assert nxt.next_clock > nxt.clock       # the Spark clock grows every batch
        if nxt.batch > 0:                         # (the first batch runs at Spark's initial 0)
            assert nxt.clock >= to_clock(max(nxt.input_watermarks))   # and wakes every due timer
        # one island here
        seen.append((nxt.positions[0], nxt.input_watermarks, nxt.island_processing_times[0]))
        off = nxt


def test_one_event_per_batch_then_the_final_step_and_the_clock_is_always_ahead():
    c = Coordinator(NODES, [script()], 2)
    assert schedule(c, BatchState(2)) == [
        (1, [MIN, MIN], 0),                      # the elements
        (2, [10 * US, MIN], 0),                  # the watermark event reaches grouping 0,
        (2, [10 * US, 10 * US], 0),              # then, in a round, grouping 1 downstream
        # processing time moves and wakes no key: the final step (outputs to +infinity) joins
        (4, [MAX, 10 * US], 5 * US),
        (4, [MAX, MAX], 5 * US),
    ]


def test_without_processing_time_triggers_elements_and_the_next_watermark_share_a_batch():
    c = Coordinator(NODES, [script()], 2, merge_elements=True)
    assert schedule(c, BatchState(2)) == [
        (2, [10 * US, MIN], 0),                  # elements at MIN, then the watermark to 10 s
        (2, [10 * US, 10 * US], 0),
        (4, [MAX, 10 * US], 5 * US),
        (4, [MAX, MAX], 5 * US),
    ]


def test_a_processing_time_advance_that_wakes_a_key_is_a_batch_of_its_own():
    events = [ProcessingTimeEvent(2), ProcessingTimeEvent(3), ElementEvent([TimestampedValue("a", 1)]),
              WatermarkEvent(Timestamp(micros=MAX))]
    c = Coordinator(NODES[:3], [events], 1, merge_elements=True)
    st = BatchState(1)
    st.apply("pt", 0, MAX, 5 * US)               # a key waits for processing time 5 s
    first = c.next_offset(c.initial_offset(), st, wall_us=0)
    assert first is not None and first.positions == [2] and first.island_processing_times == [5 * US]
    st.apply("pt", 0, 5 * US, MAX)               # it fired
    # the elements and the last watermark; the final step changes nothing and joins
    assert schedule(c, st, first) == [(5, [MAX], 5 * US)]


def test_a_hold_released_in_a_batch_makes_a_round_that_delivers_the_watermark():
    c = Coordinator(NODES, [script()], 2)
    st = BatchState(2)
    st.apply("hold", 0, MAX, 3 * US)             # grouping 0 holds grouping 1 back at 3 s
    off = c.next_offset(replace(c.initial_offset(), batch=1, positions=[1]), st, wall_us=0)
    # grouping 0's output stays at or below its input watermark before the batch (input it
    # gets in the batch may set holds the driver learns of only after it)
    assert off is not None and off.positions == [2] and off.input_watermarks == [10 * US, MIN]
    off = c.next_offset(off, st, wall_us=0)      # a round: now the hold counts
    assert off is not None and off.positions == [2] and off.input_watermarks == [10 * US, 3 * US]
    st.apply("hold", 0, 3 * US, MAX)             # the batch fired the window: hold released
    nxt = c.next_offset(off, st, wall_us=0)
    assert nxt is not None and nxt.positions == [2] and nxt.input_watermarks == [10 * US, 10 * US]


def test_a_due_processing_time_wakeup_makes_a_round():
    c = Coordinator(NODES, [script()], 2)
    st = BatchState(2)
    off = replace(c.initial_offset(), batch=3, positions=[3], island_processing_times=[5 * US],
                  input_watermarks=[10 * US] * 2, output_watermarks=[10 * US] * 2,
                  output_watermarks_before=[10 * US] * 2, clock=to_clock(10 * US),
                  next_clock=to_clock(MAX))
    st.apply("pt", 1, MAX, 5 * US)
    nxt = c.next_offset(off, st, wall_us=0)
    assert nxt is not None and nxt.positions == [3]     # a round: the source waits
    st.apply("pt", 1, 5 * US, 9 * US)
    nxt = c.next_offset(off, st, wall_us=0)
    assert nxt is not None and nxt.positions == [4]     # not due: the stream moves on


def test_bounded_sources_emit_in_the_first_batch_and_their_watermark_then_jumps():
    nodes = [Node(SOURCE, 0, (), (1,)), Node(GROUPING, 0, (1,), (2,))]
    c = Coordinator(nodes, [None], 1)
    st = BatchState(1)
    first = c.next_offset(c.initial_offset(), st, wall_us=0)
    # elements are judged at the watermark before the batch (MIN), then it moves to +infinity
    assert first is not None and first.positions == [1] and first.input_watermarks == [MAX]
    # the first batch runs at Spark's initial clock 0; no key existed before it, so no timer
    # waits for a round, and the source is done
    assert first.clock == 0 and first.next_clock >= to_clock(MAX)
    assert c.next_offset(first, st, wall_us=0) is None


class _Counting:
    """An UnboundedSource of the integers, `per_second` of them a second of wall time from 0;
    record n's event time is n seconds, its watermark the next record's."""

    def __init__(self, per_second):
        self.per_second = per_second

    def initial_position(self):
        return 0

    def available(self, position, now_us, max_records):
        return min(now_us * self.per_second // US, position + max_records)

    def watermark(self, position):
        return Timestamp.of(position)


def test_an_unbounded_sources_first_batch_reads_what_it_has_and_later_ones_their_reservation():
    """The first batch reads what an unbounded source has when it is planned: its first
    watermark changes no pane (no key exists yet), so it is no batch of its own; later batches
    read what the batch before them reserved, one batch ahead of the Spark clock."""
    nodes = [Node(Kind.UNBOUNDED, 0, (), (1,)), Node(GROUPING, 0, (1,), (2,))]
    c = Coordinator(nodes, [None], 1, unbounded={0: _Counting(10)}, max_records=5)
    st = BatchState(1)
    first = c.next_offset(c.initial_offset(), st, wall_us=2 * US)
    assert first is not None and first.batch == 0 and first.positions == [5]   # 20 there, 5 a batch
    assert first.reserved == [10] and first.clock == 0
    second = c.next_offset(first, st, wall_us=2 * US)
    assert second is not None and second.positions == [10] and second.reserved == [15]
    # each batch's stamp covers the watermark the next batch's groupings can see
    assert second.clock == first.next_clock >= to_clock(10 * US)


def test_the_clock_covers_every_watermark_and_keeps_order():
    assert to_clock(MIN) == 0
    assert to_clock(MAX) == CLOCK_MAX_MS
    times = [MIN + 1, -5 * US, -1, 0, 1, 999, 1000, 1001, 10 * US, 2 ** 50, MAX - 1]
    clocks = [to_clock(t) for t in times]
    assert clocks == sorted(clocks)
    for t, w in [(1, 1), (1, 999), (999, 1000), (5 * US, 5 * US)]:
        assert to_clock(t) <= to_clock(w)         # due at the watermark: due at its clock


def _two_islands():
    # NODES twice, disjoint: TestStream 1 (pc 11) -> stage (12) -> grouping 2 (13) -> grouping 3 (14)
    other = [Node(TEST_STREAM, 1, (), (11,), (None,)), Node(STAGE, -1, (11,), (12,)),
             Node(GROUPING, 2, (12,), (13,)), Node(GROUPING, 3, (13,), (14,))]
    return NODES + other


def test_independent_parts_of_a_pipeline_advance_together_each_on_its_own_schedule():
    longer = script() + [ElementEvent([TimestampedValue("b", 20)]), WatermarkEvent(30)]
    alone = [schedule(Coordinator(NODES, [s], 2), BatchState(2)) for s in (script(), longer)]
    c = Coordinator(_two_islands(), [script(), longer], 4)
    assert c.n_islands == 2
    both, off = [], c.initial_offset()
    while True:
        nxt = c.next_offset(off, BatchState(4), wall_us=0)
        if nxt is None:
            break
        both.append(nxt)
        off = nxt
    # the query takes as many batches as the longer script alone, not the sum of both
    assert len(both) == max(len(a) for a in alone)
    for k, mine in enumerate(alone):
        seen = [(b.positions[k], b.input_watermarks[2 * k:2 * k + 2], b.island_processing_times[k])
                for b in both]
        # each part goes through exactly its own schedule (then stays where it ended)
        assert seen[:len(mine)] == mine
        assert all(s == mine[-1] for s in seen[len(mine):])
        # each grouping sees its own island's processing time
        assert all(b.processing_times[2 * k] == b.processing_times[2 * k + 1]
                   == b.island_processing_times[k] for b in both)


def test_a_processing_time_wakeup_in_one_part_does_not_hold_the_other_back():
    c = Coordinator(_two_islands(), [script(), script()], 4)
    st = BatchState(4)
    st.apply("pt", 0, MAX, 0)                    # a key of island 0 is due now: a round there
    # (keys exist only after a batch: before the first no key is due and nothing is a round)
    first = c.next_offset(replace(c.initial_offset(), batch=0), st, wall_us=0)
    assert first.positions == [0, 1]                # island 1 moved on meanwhile


# TestStream (pc 1) -> splittable step 0 (pc 2) -> grouping 1 (pc 3)
SDF_NODES = [Node(TEST_STREAM, 0, (), (1,), (None,)), Node(Kind.SPLITTABLE, 0, (1,), (2,)),
             Node(GROUPING, 1, (2,), (3,))]


def test_due_works_of_a_splittable_step_run_batches_while_the_source_moves_on():
    c = Coordinator(SDF_NODES, [script()], 2)
    st = BatchState(2)
    st.apply("pt", 0, MAX, MIN)                  # a work checkpointed by its budget: due now
    st.apply("hold", 0, MAX, 1 * US)             # holding its output at 1 s
    off = c.next_offset(c.initial_offset(), st, wall_us=0)
    assert off is not None and off.positions == [1]   # not a round: the source advances
    off = c.next_offset(off, st, wall_us=0)
    assert off is not None and off.positions == [2]
    off = c.next_offset(off, st, wall_us=0)      # a round: grouping 1's input moves to the hold
    assert off is not None and off.input_watermarks == [10 * US, 1 * US]
    off = c.next_offset(replace(off, positions=[5]), st, wall_us=0)
    # the script is done, a work is due: batches go on (and the query is not finished)
    assert off is not None and off.positions == [5] and not c.finished(off, st)
    st.apply("pt", 0, MIN, MAX)
    st.apply("hold", 0, 1 * US, MAX)             # the work is done
    assert c.finished(replace(off, input_watermarks=[MAX, MAX]), st)


def test_a_test_streams_clock_jumps_to_the_next_resume_time_once_the_script_is_done():
    c = Coordinator(SDF_NODES, [script()], 2)
    st = BatchState(2)
    done = replace(c.initial_offset(), batch=5, positions=[5], reserved=[5],
                   island_processing_times=[5 * US],
                   input_watermarks=[MAX, MAX], output_watermarks=[MAX, MAX],
                   output_watermarks_before=[MAX, MAX], clock=to_clock(MAX),
                   next_clock=to_clock(MAX) + 1)
    assert c.next_offset(done, st, wall_us=0) is None and c.finished(done, st)
    st.apply("pt", 0, MAX, 35 * US)              # a work resumes 30 s later on the script's clock
    nxt = c.next_offset(done, st, wall_us=0)
    assert nxt is not None and nxt.island_processing_times == [35 * US]
    assert not c.finished(done, st) and c.next_resume(st) == 35 * US
