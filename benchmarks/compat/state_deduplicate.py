"""`Deduplicate` and `DeduplicatePerKey` with `event_time_duration` on an unbounded stream (a
`TestStream` of clicks and their re-deliveries, with the watermark advanced between them): a
value is dropped while an equal one was seen less than the duration before, in event time,
and let through again once the watermark has passed that (also when a processing-time
duration is given too, which has not passed)."""

from _sdk import Duration, TestStream, beam, deduplicate, window

STREAMING = True


def _stream():
    """40 batches of 10 clicks, 15 s of event time apart, each followed by a watermark advance;
    some clicks are re-delivered in a later batch, with their original or a later timestamp."""
    stream = TestStream()
    resend = {}
    for b in range(40):
        base = 1000 + b * 15
        batch = []
        for j in range(10):
            i = b * 10 + j
            click = f"click{i:03d} user{i % 9} {'buy' if i % 5 == 0 else 'view'}"
            batch.append(window.TimestampedValue(click, base + j))
            if i % 3 == 0:  # re-delivered 1, 3 or 6 batches later, same timestamp
                resend.setdefault(b + (1, 3, 6)[i % 3 // 1 % 3], []).append((click, base + j))
            if i % 7 == 0:  # sent again much later with a new timestamp
                resend.setdefault(b + 8, []).append((click, base + j + 125))
        batch += [window.TimestampedValue(c, t) for c, t in resend.pop(b, [])]
        stream = stream.add_elements(batch).advance_watermark_to(base + 14)
    for b in sorted(resend):
        stream = stream.add_elements([window.TimestampedValue(c, t) for c, t in resend[b]])
    return stream.advance_watermark_to_infinity()


def _line(value, label, ts=beam.DoFn.TimestampParam):
    """The value with its timestamp in milliseconds."""
    return f"{label}: {value} at {ts.micros // 1000}"


def build(p, inputs):
    """Clicks de-duplicated for 60 s (also with a processing-time duration of an hour);
    (user, action) pairs de-duplicated for 30 s."""
    clicks = p | _stream()
    unique = (clicks
              | deduplicate.Deduplicate(event_time_duration=60)
              | "UniqueLines" >> beam.Map(_line, "click"))
    actions = (clicks
               | beam.Map(lambda c: (c.split(" ")[1], c.split(" ")[2]))
               | beam.Map(lambda ua: (f"{ua[0]} {ua[1]}", ua[0]))
               | deduplicate.DeduplicatePerKey(event_time_duration=Duration(seconds=30))
               | "ActionLines" >> beam.Map(_line, "action"))
    # with both durations the first to pass ends it; this stream never advances processing
    # time (and Beam Python's DoFns read the wall clock, not the TestStream's), so here it is
    # always the event-time one
    both = (clicks
            | "Both" >> deduplicate.Deduplicate(processing_time_duration=3600, event_time_duration=60)
            | "BothLines" >> beam.Map(_line, "both"))
    return (unique, actions, both) | beam.Flatten()
