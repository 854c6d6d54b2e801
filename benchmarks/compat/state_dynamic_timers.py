"""Dynamic timers and a looping timer. Reminders: one timer spec, one timer per task by its
dynamic tag (`timer.set(ts, dynamic_timer_tag=task)`, `timer.clear(dynamic_timer_tag=task)`
when the task is done in time), the callback told which task by `DoFn.DynamicTimerTagParam`
and setting a follow-up timer under the same tag. Gap filling: a looping timer that re-sets
itself in its own callback every minute, reporting each sensor's readings per minute for its
first 40 minutes, empty minutes included.

Both are correct in event time whatever the watermark does between elements (Beam's batch
runners may hold it until the input ends, or move it with each key's time-sorted elements,
as Dataflow and headrace's Spark batch runner do): a timer decides from what happened before
its time, never from what has merely arrived."""

from _sdk import (
    BagStateSpec, ReadModifyWriteStateSpec, SetStateSpec, TimeDomain, TimerSpec, beam, on_timer,
    window,
)


def _due(task):
    """A task's due time within its hour, in seconds (the same for every event of the task)."""
    return 300 + (sum(map(ord, task)) * 37) % 3000


def _done_before(done, task, ts):
    """Whether `done` (the 'task@seconds' done events) has `task` done before `ts`."""
    limit = ts.micros // 1000000
    return any(d.rsplit("@", 1)[0] == task and int(d.rsplit("@", 1)[1]) < limit for d in done)


class Reminders(beam.DoFn):
    """A reminder per open task at its due time (tagged by the task), cancelled if the task is
    done before; a reminder that fires sets an escalation 10 minutes later (in the same hour),
    dropped if the task is done before it."""

    REMINDER = TimerSpec("reminder", TimeDomain.WATERMARK)
    ESCALATION = TimerSpec("escalation", TimeDomain.WATERMARK)
    DONE = BagStateSpec("done", beam.coders.StrUtf8Coder())
    REMINDED = SetStateSpec("reminded", beam.coders.StrUtf8Coder())

    def process(self, kv, ts=beam.DoFn.TimestampParam, w=beam.DoFn.WindowParam,
                done=beam.DoFn.StateParam(DONE), reminded=beam.DoFn.StateParam(REMINDED),
                reminder=beam.DoFn.TimerParam(REMINDER), escalation=beam.DoFn.TimerParam(ESCALATION)):
        task, action = kv[1]
        due = w.start + _due(task)
        if action == "done":
            done.add(f"{task}@{ts.micros // 1000000}")
            if ts < due:
                reminder.clear(dynamic_timer_tag=task)
            escalation.clear(dynamic_timer_tag=task)
        elif task not in reminded.read() and not _done_before(done.read(), task, due):
            reminder.set(due, dynamic_timer_tag=task)

    @on_timer(REMINDER)
    def on_reminder(self, key=beam.DoFn.KeyParam, task=beam.DoFn.DynamicTimerTagParam,
                    ts=beam.DoFn.TimestampParam, w=beam.DoFn.WindowParam,
                    done=beam.DoFn.StateParam(DONE), reminded=beam.DoFn.StateParam(REMINDED),
                    escalation=beam.DoFn.TimerParam(ESCALATION)):
        reminded.add(task)
        flag = " (but it was done!)" if _done_before(done.read(), task, ts) else ""
        yield f"reminder {key} {task} at {ts.micros // 1000}{flag}"
        escalation.set(min(ts + 600, w.max_timestamp()), dynamic_timer_tag=task)

    @on_timer(ESCALATION)
    def on_escalation(self, key=beam.DoFn.KeyParam, task=beam.DoFn.DynamicTimerTagParam,
                      ts=beam.DoFn.TimestampParam, done=beam.DoFn.StateParam(DONE)):
        if not _done_before(done.read(), task, ts):
            yield f"escalation {key} {task} at {ts.micros // 1000}"


class MinuteReport(beam.DoFn):
    """Counts a sensor's readings per minute with a looping timer, for 40 minutes from the end
    of its first reading's minute (the global window: the timer re-sets itself until then)."""

    TIMES = BagStateSpec("times", beam.coders.VarIntCoder())
    START = ReadModifyWriteStateSpec("start", beam.coders.VarIntCoder())
    LOOP = TimerSpec("loop", TimeDomain.WATERMARK)

    def process(self, kv, ts=beam.DoFn.TimestampParam, times=beam.DoFn.StateParam(TIMES),
                start=beam.DoFn.StateParam(START), loop=beam.DoFn.TimerParam(LOOP)):
        seconds = ts.micros // 1000000
        times.add(seconds)
        minute_end = (seconds // 60 + 1) * 60
        if start.read() is None or minute_end < start.read():
            start.write(minute_end)
            loop.set(minute_end)

    @on_timer(LOOP)
    def on_loop(self, key=beam.DoFn.KeyParam, ts=beam.DoFn.TimestampParam,
                times=beam.DoFn.StateParam(TIMES), start=beam.DoFn.StateParam(START),
                loop=beam.DoFn.TimerParam(LOOP)):
        end = ts.micros // 1000000
        n = sum(1 for t in times.read() if end - 60 <= t < end)
        yield f"minute {key} [{end - 60}, {end}): {n} readings"
        if end < start.read() + 40 * 60:
            loop.set(end + 60)


def build(p, inputs):
    """Task events of 6 teams over 3 hours; readings of 4 sensors with gaps of quiet minutes."""
    tasks = []
    for i in range(800):
        team, task, hour = f"team{i % 6}", f"task{(i * 7) % 97}", (i // 6) % 3
        tasks.append((team, (task, "open"), hour * 3600 + (i * 13) % 3600))
        if i % 4 == 0:
            tasks.append((team, (task, "done"), hour * 3600 + (i * 29) % 3600))
    reminders = (p
                 | "Tasks" >> beam.Create(tasks)
                 | "TaskTimes" >> beam.Map(lambda r: window.TimestampedValue((r[0], r[1]), r[2]))
                 | beam.WindowInto(window.FixedWindows(3600))
                 | beam.ParDo(Reminders())
                 | "Global" >> beam.WindowInto(window.GlobalWindows()))
    readings = [(f"sensor{i % 4}", i, 1000 + i * 7 + (i % 4) * 400 * ((i // 100) % 2))
                for i in range(600)]
    minutes = (p
               | "Readings" >> beam.Create(readings)
               | "ReadingTimes" >> beam.Map(lambda r: window.TimestampedValue((r[0], r[1]), r[2]))
               | beam.ParDo(MinuteReport()))
    return (reminders, minutes) | beam.Flatten()
