"""`GroupIntoBatches` (built on a bag, a combining count and timers): a key's values in
batches of at most `batch_size` per window, a partial batch flushed at the window's end, also
with `max_buffering_duration_secs`; and `GroupIntoBatches.WithShardedKey`, whose output keys
are `ShardedKey`s (mapped back to their key: shard ids are random).

Which values go into which batch depends on the order values arrive in, so a batch is printed
as its size and the union of a key's batches as one line per value. With sharded keys the
number of shards depends on the runner's threads or processes, so only whether each batch is
within its bound is printed (once per key), not its size."""

from _sdk import beam, typehints, util, window


def _batch_lines(kv, w=beam.DoFn.WindowParam, label="", batch_size=0, sizes=True):
    """A line for the batch (its size, or whether it is within bounds) and one per value."""
    key, values = kv
    where = f"{label} {key} [{w.start.micros // 1000000 if w.start.micros > -2**62 else '-inf'}]"
    if sizes:
        yield f"{where} batch of {len(values)}"
    else:
        yield f"{where} batch within bounds: {0 < len(values) <= batch_size}"
    for v in values:
        yield f"{where} value {v}"


def build(p, inputs):
    """2000 orders of 7 shops (shop i gets about twice as many as shop i-1) over an hour."""
    orders = [(f"shop{k}", f"order{i:04d}", (i * 7) % 3600)
              for i in range(2000) for k in [max(0, min(6, (i * 2654435761 % 127).bit_length() - 1))]]
    timed = (p
             | beam.Create(orders)
             | beam.Map(lambda r: window.TimestampedValue((r[0], r[1]), r[2]))
             .with_output_types(typehints.Tuple[str, str]))  # WithShardedKey needs the key type
    windowed = timed | beam.WindowInto(window.FixedWindows(600))
    by_window = (windowed
                 | "Batches" >> util.GroupIntoBatches(8)
                 | "BatchLines" >> beam.FlatMap(_batch_lines, label="fixed"))
    buffered = (windowed
                | "Buffered" >> beam.GroupIntoBatches(5, max_buffering_duration_secs=3600)
                | "BufferedLines" >> beam.FlatMap(_batch_lines, label="buffered"))
    sharded = (timed
               | "Sharded" >> beam.GroupIntoBatches.WithShardedKey(20)
               | "Unshard" >> beam.MapTuple(lambda sharded_key, values: (sharded_key.key, values))
               | "ShardedLines" >> beam.FlatMap(_batch_lines, label="sharded", batch_size=20,
                                                sizes=False)
               | "OncePerKey" >> beam.Distinct())  # a batch line per key, and per value
    return ((by_window | "G1" >> beam.WindowInto(window.GlobalWindows()),
             buffered | "G2" >> beam.WindowInto(window.GlobalWindows()),
             sharded)
            | beam.Flatten())
