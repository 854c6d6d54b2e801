"""What only the Spark batch runner has to show: Spark's task retries, bundles inside partitions,
streamed sorted groups, batch-time semantics, and how it is selected and configured.

The tests run on every Spark configuration in RUNNERS (local[2] and local-cluster); on the local
runner they are skipped, as they test Spark's side of the contract.
"""

from __future__ import annotations

import collections
import os
import time

import pytest

import headrace as beam
from headrace.errors import PipelineExecutionError
from headrace.model.window import FixedWindows, IntervalWindow
from headrace.model.strategy import Windowing
from headrace.runners.kit.grouping import GroupingCore
from headrace.runners.spark.batch import reduce_side
from headrace.runners.spark.session import effective_master, parse_conf
from headrace.testing.util import assert_that, equal_to
from headrace.transforms import trigger, window
from tests._support import BundleSizes, counter_value

TV = beam.TimestampedValue


@pytest.fixture
def spark_pipeline(runner, make_pipeline):
    """`make_pipeline`, on Spark configurations only."""
    if not runner.startswith("spark"):
        pytest.skip("tests the Spark runner's own contract")
    return make_pipeline


class CrashOnce(beam.DoFn):
    """Kills its Python worker process the first time it sees `bad` (a crashed Spark task)."""

    def __init__(self, journal, once, bad):
        self.journal, self.once, self.bad = journal, once, bad

    def process(self, element):
        beam.Metrics.counter("crash", "processed").inc()
        self.journal.write("process", element)
        if element == self.bad and self.once.first("crash"):
            os._exit(17)
        yield element


def test_a_crashed_task_is_retried_by_spark_and_its_outputs_discarded(spark_pipeline, journal, once):
    n = 40
    p = spark_pipeline(bundle_size=4)
    out = p | beam.Create(list(range(n))) | "Crashy" >> beam.ParDo(CrashOnce(journal, once, 13))
    summed = (out | beam.Map(lambda x: ("all", x)) | beam.CombinePerKey(sum))
    assert_that(out, equal_to(list(range(n))))
    assert_that(summed, equal_to([("all", sum(range(n)))]), label="sum")
    result = p.run()
    processed = collections.Counter(e[1] for e in journal.read())
    assert processed[13] == 2, "the crashed task was not re-run"
    assert all(processed[x] >= 1 for x in range(n))
    # metrics of the crashed attempt never reached the driver: each element counted once
    assert counter_value(result, "processed") == n


def test_a_partition_is_processed_as_several_bundles(spark_pipeline, journal):
    p = spark_pipeline(bundle_size=3)
    out = p | beam.Create(list(range(20))) | beam.ParDo(BundleSizes(journal))
    assert_that(out, equal_to(list(range(20))))
    p.run()
    sizes = [e[0] for e in journal.read()]
    assert sum(sizes) == 20 and max(sizes) == 3 and len(sizes) >= 7


def test_processing_time_triggers_do_not_fire_before_the_watermark_in_batch(spark_pipeline):
    # In batch, processing time stands still: a processing-time trigger never fires, so each
    # window gets exactly one pane, when the watermark passes its end (docs/semantics.md).
    data = [TV(("k", i), t) for i, t in enumerate([1, 2, 3, 61, 62, 125])]
    with spark_pipeline() as p:
        out = (p | beam.Create(data)
               | beam.WindowInto(window.FixedWindows(60),
                                 trigger=trigger.Repeatedly(trigger.AfterProcessingTime(60)),
                                 accumulation_mode=trigger.AccumulationMode.DISCARDING)
               | beam.GroupByKey()
               | beam.Map(lambda kv, w=beam.DoFn.WindowParam, pane=beam.DoFn.PaneInfoParam:
                          (int(w.start), sorted(kv[1]), pane.timing.name, pane.is_last)))
        assert_that(out, equal_to([(0, [0, 1, 2], "ON_TIME", True), (60, [3, 4], "ON_TIME", True),
                                   (120, [5], "ON_TIME", True)]))


def test_sessions_merge_only_when_windows_overlap(spark_pipeline):
    # [t, t+gap): events exactly `gap` apart are separate sessions; closer ones merge.
    stamps = [0, 10, 20, 30, 40, 50, 60]  # 10 s apart: one session with a gap of 11 s
    with spark_pipeline() as p:
        base = p | beam.Create([TV(("k", 1), t) for t in stamps])
        apart = (base | "Gap10" >> beam.WindowInto(window.Sessions(10)) | "Sum10" >> beam.CombinePerKey(sum))
        merged = (base | "Gap11" >> beam.WindowInto(window.Sessions(11)) | "Sum11" >> beam.CombinePerKey(sum))
        assert_that(apart, equal_to([("k", 1)] * 7), label="apart")
        assert_that(merged, equal_to([("k", 7)]), label="merged")


def test_reduce_streams_a_sorted_key_without_reading_it_all():
    # The reduce side hands a key's records to the core in chunks under a watermark that
    # follows event time: a window's pane comes out before the rest of the key is read.
    w = Windowing(FixedWindows(10))
    grouping = GroupingCore("Group", w)
    read = []

    def records():
        for t in range(0, 100_000_000, 1_000_000):  # one record per second for 100 s
            read.append(t)
            win = IntervalWindow._of(t - t % 10_000_000, t - t % 10_000_000 + 10_000_000)
            yield (b"k", t, False), ("k", t, t, win)

    out = reduce_side._reduce_all(grouping, records(), 5, True)
    first = next(out)
    assert first.value == ("k", list(range(0, 10_000_000, 1_000_000)))
    assert len(read) < 20, f"read {len(read)} records before the first pane"
    assert len(list(out)) == 9


def test_master_and_conf_flags():
    assert effective_master(None, 4) == "local[*,4]"
    assert effective_master("local[2]", 4) == "local[2,4]"
    assert effective_master("local[2,3]", 4) == "local[2,3]"
    assert effective_master("local-cluster[2,1,1024]", 4) == "local-cluster[2,1,1024]"
    assert parse_conf(["spark.a=1", "b = x=y"]) == [("spark.a", "1"), ("b", "x=y")]
    with pytest.raises(beam.HeadraceError, match="KEY=VALUE"):
        parse_conf(["spark.driver.memory"])


def test_runner_by_name_and_by_session(spark_pipeline):
    from pyspark.sql import SparkSession

    from headrace.runners.spark import SparkRunner
    with spark_pipeline() as p:  # by name (through options): starts or reuses the session
        assert_that(p | beam.Create([1]), equal_to([1]))
    spark = SparkSession.builder.getOrCreate()  # the running session, handed over explicitly
    with beam.Pipeline(runner=SparkRunner(spark=spark)) as p:
        assert_that(p | beam.Create([1, 2, 3]) | beam.Map(lambda x: x * 10), equal_to([10, 20, 30]))


def _grouping_pipeline(p, offset):
    """Create + side input + GroupByKey: a shuffle, a collected side input and a union of outputs."""
    nums = p | "Nums" >> beam.Create(list(range(10)))
    side = p | "Side" >> beam.Create([offset])
    return (nums | "Key" >> beam.Map(lambda x, s: (x % 2, x + s), beam.pvalue.AsSingleton(side))
            | "Group" >> beam.GroupByKey() | "Sum" >> beam.Map(lambda kv: (kv[0], sum(kv[1]))))


def _expected_sums(offset):
    return [(0, 20 + 5 * offset), (1, 25 + 5 * offset)]


def _spark_context():
    from pyspark import SparkContext
    return SparkContext.getOrCreate()


@pytest.fixture
def job_groups(spark_pipeline, runner, monkeypatch):
    """The Spark job groups the runner opens, in order (SparkContext.setJobGroup spied on)."""
    if runner == "spark-connect":
        pytest.skip("reads a classic SparkContext's jobs and stages; Spark Connect has no "
                    "SparkContext (its jobs are tagged, not grouped)")
    with spark_pipeline() as p:  # starts (or reuses) the session
        assert_that(p | beam.Create([1]), equal_to([1]))
    sc = _spark_context()
    groups = []
    real = sc.setJobGroup

    def spy(group, description, *args, **kwargs):
        groups.append(group)
        return real(group, description, *args, **kwargs)
    monkeypatch.setattr(sc, "setJobGroup", spy)
    return groups


def _stage_names(group):
    """The names of the stages of the group's jobs that Spark's status store still knows."""
    # The status store learns of stages from its listener bus, asynchronously: after many
    # streaming batches in the shared session it can lag, so wait for every stage's record. It
    # also keeps only spark.ui.retainedStages stages, evicting first those that never completed
    # (a skipped stage of a reused shuffle), so a stage may never get a record: only the
    # stages it knows are named (one CI run lost a stage so).
    tracker = _spark_context().statusTracker()
    deadline = time.monotonic() + 30
    while True:
        infos = [tracker.getStageInfo(s) for j in tracker.getJobIdsForGroup(group)
                 for s in (tracker.getJobInfo(j).stageIds if tracker.getJobInfo(j) else [None])]
        if all(i is not None for i in infos) or time.monotonic() > deadline:
            return [i.name for i in infos if i is not None]
        time.sleep(0.1)


def test_spark_stages_are_named_after_the_steps(spark_pipeline, job_groups):
    sc = _spark_context()
    serializer, call_site = sc.serializer, sc.getLocalProperty("callSite.short")
    with spark_pipeline() as p:
        assert_that(_grouping_pipeline(p, 100), equal_to(_expected_sums(100)))
    names = _stage_names(job_groups[-1])
    assert names and all(n.startswith("headrace: ") for n in names), names
    assert "headrace: Group" in names
    # the context is as it was: PySpark's serializer, the thread's call site
    assert sc.serializer is serializer and sc.getLocalProperty("callSite.short") == call_site


def _job_count(group):
    return len(_spark_context().statusTracker().getJobIdsForGroup(group))


def test_a_side_input_read_by_several_steps_is_collected_once(spark_pipeline, job_groups):
    with spark_pipeline() as p:
        side = p | "Side" >> beam.Create([1, 2, 3]) | "Double" >> beam.Map(lambda x: 2 * x)
        other = p | "Other" >> beam.Create([10]) | "Same" >> beam.Map(lambda x: x)
        out = (p | "Main" >> beam.Create([0, 1])
               | "A" >> beam.Map(lambda x, s, o: x + sum(s) + sum(o), beam.pvalue.AsList(side),
                                 beam.pvalue.AsList(other))
               | "B" >> beam.Map(lambda x, s: x + max(s), beam.pvalue.AsList(side)))
        assert_that(out, equal_to([28, 29]))
    # the two side inputs collected once each (at the same time), then the run's one job; not a
    # job to compute `side` for its two readers, nor a collect per reader
    assert _job_count(job_groups[-1]) == 3


def test_file_sinks_are_written_and_committed_in_the_runs_one_job(spark_pipeline, job_groups,
                                                                  tmp_path):
    with spark_pipeline() as p:
        _ = (p | "Words" >> beam.Create([f"w{i}" for i in range(50)])
             | "Text" >> beam.io.WriteToText(str(tmp_path / "text"), file_name_suffix=".txt"))
        _ = (p | "Numbers" >> beam.Create(range(30))
             | "Sharded" >> beam.io.WriteToText(str(tmp_path / "sharded"), num_shards=3))
    files = sorted(os.listdir(tmp_path))
    assert [f for f in files if f.startswith("sharded")] == [
        f"sharded-0000{i}-of-00003" for i in range(3)]
    assert not [f for f in files if f.startswith(".")]   # no temporary directory left

    def lines(prefix):
        return sorted(ln for f in files if f.startswith(prefix)
                      for ln in (tmp_path / f).read_text().splitlines())
    assert lines("text") == sorted(f"w{i}" for i in range(50))
    assert lines("sharded") == sorted(str(i) for i in range(30))
    # the writes run in the job that computes their input, and the driver commits the files
    # from its tasks' results: no job of their own to collect the written files
    assert _job_count(job_groups[-1]) == 1


def test_a_write_with_as_many_shards_as_partitions_writes_each_partition_without_a_shuffle(
        spark_pipeline, job_groups, tmp_path):
    with spark_pipeline(spark_parallelism=3) as p:
        sums = (p | beam.Create([(i % 7, i) for i in range(70)]) | "Group" >> beam.GroupByKey()
                | "Sum" >> beam.MapTuple(lambda k, vs: f"{k}:{sum(vs)}"))
        _ = sums | "Three" >> beam.io.WriteToText(str(tmp_path / "three"), num_shards=3)
        _ = sums | "Two" >> beam.io.WriteToText(str(tmp_path / "two"), num_shards=2)
    files = sorted(os.listdir(tmp_path))
    assert [f for f in files if f.startswith("three")] == [f"three-0000{i}-of-00003" for i in range(3)]
    assert [f for f in files if f.startswith("two")] == [f"two-0000{i}-of-00002" for i in range(2)]
    assert not [f for f in files if f.startswith(".")]   # no temporary directory left
    expected = sorted(f"{k}:{sum(range(k, 70, 7))}" for k in range(7))
    for prefix in ("three", "two"):
        assert sorted(ln for f in files if f.startswith(prefix)
                      for ln in (tmp_path / f).read_text().splitlines()) == expected
    # the grouping's 3 partitions are the 3 shards: no shuffle by shard; 2 shards still shuffle
    shuffles = [n for n in _stage_names(job_groups[-1]) if "GroupByShard" in n]
    assert shuffles and all("Two/" in n for n in shuffles), shuffles


class Noted(beam.DoFn):
    """Notes each element it processes in the journal, and counts it."""

    def __init__(self, journal):
        self.journal = journal

    def process(self, element):
        beam.Metrics.counter("noted", "processed").inc()
        self.journal.write(element)
        yield element


def test_a_branch_point_read_by_several_steps_runs_its_dofns_once(spark_pipeline, journal,
                                                                   job_groups):
    n = 300
    p = spark_pipeline(bundle_size=7)
    tagged = (p | beam.Create(list(range(n))) | "Noted" >> beam.ParDo(Noted(journal))
              | "Split" >> beam.Map(lambda x: beam.pvalue.TaggedOutput("odd", x) if x % 2 else x
                                    ).with_outputs("odd", main="even"))
    noted = tagged.even | "Again" >> beam.Map(lambda x: x)
    by3 = noted | "By3" >> beam.Map(lambda x: (x % 3, 1)) | "Count3" >> beam.CombinePerKey(sum)
    by5 = noted | "By5" >> beam.Map(lambda x: (x % 5, x)) | "Group5" >> beam.GroupByKey()
    odd = tagged.odd | "OddSum" >> beam.CombineGlobally(sum)
    assert_that(by3, equal_to([(k, len([x for x in range(0, n, 2) if x % 3 == k]))
                               for k in range(3)]), label="by3")
    assert_that(by5 | "Sizes" >> beam.Map(lambda kv: (kv[0], len(kv[1]))),
                equal_to([(k, len([x for x in range(0, n, 2) if x % 5 == k])) for k in range(5)]),
                label="by5")
    assert_that(odd, equal_to([sum(range(1, n, 2))]), label="odd")
    result = p.run()
    # each element processed once, though the stage's outputs and `noted` are read by several
    assert sorted(e[0] for e in journal.read()) == list(range(n))
    assert counter_value(result, "processed") == n


def test_a_shuffle_partitions_records_as_pysparks_partitionby_does(spark_pipeline, runner):
    """`pyspark_compat.partition_by` (chunks of bounded bytes) puts every record where PySpark's
    `partitionBy` does, each map partition's records of a partition in their order."""
    if runner == "spark-connect":
        pytest.skip("uses the classic SparkContext")
    from headrace.runners.spark import pyspark_compat
    sc = _spark_context()
    records = [(i % 7, (i, "v" * (i % 5000))) for i in range(3_000)]
    rdd = sc.parallelize(records, 3)
    ours = pyspark_compat.partition_by(rdd, 4, hash).glom().collect()
    theirs = rdd.partitionBy(4, hash).glom().collect()
    assert len(ours) == 4 and sum(map(len, ours)) == len(records)

    def by_map_partition(part):   # (i) of the records of each input slice, in order
        return {s: [r[1][0] for r in part if r[1][0] * 3 // len(records) == s] for s in range(3)}
    assert [by_map_partition(p) for p in ours] == [by_map_partition(p) for p in theirs]


def test_the_runner_works_without_pyspark_internals(spark_pipeline, job_groups, monkeypatch):
    from headrace.runners.spark import pyspark_compat
    monkeypatch.setattr(pyspark_compat, "USE_INTERNALS", False)
    sc = _spark_context()
    serializer = sc.serializer
    seen = []
    real = pyspark_compat.record_serializer

    def spy(*args):
        cm = real(*args)
        seen.append(cm)
        return cm
    monkeypatch.setattr(pyspark_compat, "record_serializer", spy)
    with spark_pipeline(bundle_size=3) as p:
        assert_that(_grouping_pipeline(p, 7), equal_to(_expected_sums(7)))
        summed = (p | "More" >> beam.Create(list(range(30))) | beam.Map(lambda x: ("all", x))
                  | beam.CombinePerKey(sum))
        assert_that(summed, equal_to([("all", sum(range(30)))]), label="combined")
    assert seen and sc.serializer is serializer  # PySpark's own serializer throughout
    assert _stage_names(job_groups[-1])  # PySpark's own names ("collect at runner.py:N")


def test_pipelines_one_after_another_and_at_once_in_one_session(spark_pipeline):
    import threading
    serializer = _spark_context().serializer
    for offset in (1, 2):  # one after the other
        with spark_pipeline() as p:
            assert_that(_grouping_pipeline(p, offset), equal_to(_expected_sums(offset)))
    errors = []

    def run(offset):
        try:
            with spark_pipeline() as p:
                assert_that(_grouping_pipeline(p, offset), equal_to(_expected_sums(offset)))
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
    threads = [threading.Thread(target=run, args=(offset,)) for offset in (10, 20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert _spark_context().serializer is serializer  # restored once the last one finished


def test_a_failing_pipeline_restores_the_context(spark_pipeline):
    sc = _spark_context()
    serializer = sc.serializer

    def boom(x):
        raise ValueError("boom")
    with pytest.raises(PipelineExecutionError):
        with spark_pipeline(max_bundle_attempts=1) as p:
            p | beam.Create([1, 2]) | "Boom" >> beam.Map(boom)
    assert sc.serializer is serializer and sc.getLocalProperty("callSite.short") is None
    with spark_pipeline() as p:  # and the next pipeline runs as usual
        assert_that(_grouping_pipeline(p, 3), equal_to(_expected_sums(3)))


def test_the_runner_over_spark_connect_works_without_pyspark_internals(spark_pipeline, runner,
                                                                       monkeypatch):
    """Over Spark Connect the batch runner tells the client the schemas it knows
    (`pyspark_compat.known_schema`); without that hook it asks the server, with the same result."""
    if runner != "spark-connect":
        pytest.skip("tests the batch runner over Spark Connect (batch/frames.py)")
    from headrace.runners.spark import pyspark_compat
    monkeypatch.setattr(pyspark_compat, "USE_INTERNALS", False)
    with spark_pipeline(bundle_size=3) as p:
        assert_that(_grouping_pipeline(p, 7), equal_to(_expected_sums(7)))
        side = p | "Two" >> beam.Create([1, 2])
        summed = (p | "More" >> beam.Create(list(range(30)))
                  | "Plus" >> beam.Map(lambda x, s: ("all", x + sum(s)), beam.pvalue.AsList(side))
                  | "Total" >> beam.CombinePerKey(sum))
        assert_that(summed, equal_to([("all", sum(range(30)) + 90)]), label="combined")


def test_a_run_over_spark_connect_tags_its_jobs_and_leaves_the_users_tags(spark_pipeline, runner,
                                                                          monkeypatch):
    """Over Spark Connect the run's jobs carry a tag of their own (Spark Connect has no job
    groups), the concurrent side-input collects too (tags are per thread there), taken off again
    when it ends; a tag the user set stays."""
    if runner != "spark-connect":
        pytest.skip("tests the batch runner over Spark Connect (batch/frames.py)")
    import threading

    from pyspark.sql import SparkSession
    from headrace.runners.spark.batch import frames
    with spark_pipeline() as p:  # starts (or reuses) the session
        assert_that(p | beam.Create([1]), equal_to([1]))
    spark = SparkSession.getActiveSession()
    spark.addTag("users-own-tag")
    seen = []
    real = frames.FrameContext.collect

    def spy(self, df):
        seen.append((threading.current_thread() is threading.main_thread(), set(self.spark.getTags())))
        return real(self, df)
    monkeypatch.setattr(frames.FrameContext, "collect", spy)
    with spark_pipeline() as p:
        side = p | "Side" >> beam.Create([1, 2, 3])
        other = p | "Other" >> beam.Create([10])
        out = (p | "Main" >> beam.Create([0, 1])
               | "A" >> beam.Map(lambda x, s, o: x + sum(s) + sum(o), beam.pvalue.AsList(side),
                                 beam.pvalue.AsList(other)))
        assert_that(out, equal_to([16, 17]))
    run_tags = {t for _, tags in seen for t in tags if t.startswith("headrace-")}
    assert len(run_tags) == 1 and len(seen) >= 3, seen      # two side inputs at once, then the run
    assert all(run_tags <= tags for _, tags in seen), seen
    assert all("users-own-tag" in tags for main, tags in seen if main), seen
    assert spark.getTags() == {"users-own-tag"}
    spark.removeTag("users-own-tag")


def test_a_run_over_spark_connect_turns_code_generation_off_and_puts_the_settings_back(
        spark_pipeline, runner, monkeypatch):
    """Over Spark Connect a run's queries run without Spark SQL's generated code (their rows are
    few); the session's own settings are back when the run ends, a failed run's too."""
    if runner != "spark-connect":
        pytest.skip("tests the batch runner over Spark Connect (batch/frames.py)")
    from pyspark.sql import SparkSession

    from headrace.runners.spark.batch import frames
    with spark_pipeline() as p:  # starts (or reuses) the session
        assert_that(p | beam.Create([1]), equal_to([1]))
    spark = SparkSession.getActiveSession()
    (whole, _), (factory, _) = frames.INTERPRETED
    spark.conf.set(whole, "true")          # the user's own value: put back as it was
    spark.conf.unset(factory)              # not set: unset again after the run
    seen = []
    real = frames.FrameContext.collect

    def spy(self, df):
        seen.append((self.spark.conf.get(whole), self.spark.conf.get(factory)))
        return real(self, df)
    monkeypatch.setattr(frames.FrameContext, "collect", spy)
    try:
        with spark_pipeline() as p:
            assert_that(p | beam.Create([1, 2]) | beam.Map(lambda x: x * 2), equal_to([2, 4]))
        assert seen and set(seen) == {("false", "NO_CODEGEN")}, seen
        assert (spark.conf.get(whole), spark.conf.get(factory, None)) == ("true", None)

        def fail(x):
            raise ValueError("boom")
        with pytest.raises(Exception, match="boom"):
            with spark_pipeline() as p:
                _ = p | beam.Create([1]) | beam.Map(fail)
        assert (spark.conf.get(whole), spark.conf.get(factory, None)) == ("true", None)
    finally:
        spark.conf.unset(whole)
