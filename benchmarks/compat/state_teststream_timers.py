"""A stateful DoFn on an unbounded stream (a `TestStream` with elements, watermark advances
and processing-time advances): per user and minute of event time, a bag of actions flushed by
an event-time timer when the watermark passes the minute; per user, a processing-time
(`TimeDomain.REAL_TIME`) timer that reports the user idle once no message was published for
25 s of processing time, re-armed by each message. Elements behind the watermark past the
allowed lateness are dropped by the runner; within it they open a fresh pane of state.

Messages carry their publish time (processing time, as a Pub/Sub attribute would): the idle
timer is set from it, not from `Timestamp.now()`, which in Beam Python's DirectRunner is the
wall clock even under a TestStream's virtual one. Outputs of the processing-time timer are
printed without their timestamp (Beam Python stamps them with the processing time, Beam Java
and headrace with the event time that set the timer)."""

from _sdk import (
    BagStateSpec, CombiningValueStateSpec, ReadModifyWriteStateSpec, TestStream, TimeDomain,
    Timestamp, TimerSpec, beam, on_timer, window,
)

STREAMING = True


class Latest(beam.CombineFn):
    """The largest number added (None when none)."""

    def create_accumulator(self):
        """Nothing yet."""
        return None

    def add_input(self, acc, x):
        """The larger of the two."""
        return x if acc is None or x > acc else acc

    def merge_accumulators(self, accs):
        """The largest of the accumulators."""
        return max((a for a in accs if a is not None), default=None)

    def extract_output(self, acc):
        """The largest number."""
        return acc


class MinuteActions(beam.DoFn):
    """Buffers a user's actions per minute; emits them, sorted, when the watermark passes."""

    ACTIONS = BagStateSpec("actions", beam.coders.StrUtf8Coder())
    FLUSH = TimerSpec("flush", TimeDomain.WATERMARK)

    def process(self, kv, w=beam.DoFn.WindowParam, actions=beam.DoFn.StateParam(ACTIONS),
                flush=beam.DoFn.TimerParam(FLUSH)):
        actions.add(kv[1][0])
        flush.set(w.max_timestamp())

    @on_timer(FLUSH)
    def on_flush(self, key=beam.DoFn.KeyParam, w=beam.DoFn.WindowParam,
                 ts=beam.DoFn.TimestampParam, actions=beam.DoFn.StateParam(ACTIONS)):
        done = sorted(actions.read())
        actions.clear()
        yield (f"minute {key} [{w.start.micros // 1000000}s] at {ts.micros // 1000}: "
               f"{len(done)} {done}")


class IdleUsers(beam.DoFn):
    """Reports a user idle 25 s (processing time) after the latest message's publish time."""

    LATEST = CombiningValueStateSpec("latest", Latest())
    COUNT = ReadModifyWriteStateSpec("count", beam.coders.VarIntCoder())
    IDLE = TimerSpec("idle", TimeDomain.REAL_TIME)

    def process(self, kv, latest=beam.DoFn.StateParam(LATEST), count=beam.DoFn.StateParam(COUNT),
                idle=beam.DoFn.TimerParam(IDLE)):
        published = kv[1][1]
        count.write((count.read() or 0) + 1)
        if latest.read() is None or published > latest.read():
            latest.add(published)
            idle.set(Timestamp(published + 25))

    @on_timer(IDLE)
    def on_idle(self, key=beam.DoFn.KeyParam, latest=beam.DoFn.StateParam(LATEST),
                count=beam.DoFn.StateParam(COUNT)):
        yield f"idle {key}: last published at {latest.read()}, {count.read()} messages so far"
        count.write(0)


def _stream():
    """30 rounds: messages of some of 7 users, then processing time +10 s and the watermark
    +20 s; a few messages arrive late (behind the watermark)."""
    stream = TestStream().advance_watermark_to(0)
    clock = 0
    for r in range(30):
        batch = []
        for j in range(15):
            i = r * 15 + j
            user = f"user{(i * 5) % 7 if r % 6 else i % 3}"  # every 6th round only users 0-2
            t = r * 20 + j
            if j == 14 and r % 4 == 3:
                t -= 50  # behind the watermark (r*20 - 20 + 14 ... ): late, within 30 s or not
            batch.append(window.TimestampedValue((user, (f"a{i:03d}", clock)), t))
        stream = (stream.add_elements(batch)
                  .advance_processing_time(10)
                  .advance_watermark_to(r * 20 + 20))
        clock += 10
        if r % 6 == 5:  # a quiet spell: processing time moves on, nothing is published
            stream = stream.advance_processing_time(30)
            clock += 30
    return stream.advance_watermark_to_infinity()


def build(p, inputs):
    """The stream's actions per minute (30 s of allowed lateness) and its idle users."""
    messages = p | _stream()
    minutes = (messages
               | beam.WindowInto(window.FixedWindows(60), allowed_lateness=30)
               | beam.ParDo(MinuteActions())
               | "MinutesGlobal" >> beam.WindowInto(window.GlobalWindows()))
    idle = messages | beam.ParDo(IdleUsers())
    return (minutes, idle) | beam.Flatten()
