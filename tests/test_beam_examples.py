"""Apache Beam's example pipelines, written as in Beam's examples but with `import headrace as beam`.

(a) wordcount_minimal.py: ReadFromText -> Split -> PairWithOne -> CombinePerKey(sum) ->
    Format -> WriteToText, over a generated text file.
(b) windowed_wordcount.py: Split -> PairWithOne -> WindowInto(FixedWindows(2 * 60, 0)) ->
    GroupByKey -> count_ones -> FormatDoFn (window start/end formatted with strftime), over
    timestamped lines (the Pub/Sub source and BigQuery sink of the original are replaced by
    Create of TimestampedValues and an assertion).

Both results are compared with the same computation done in plain Python.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import glob
import random
import re

import headrace as beam
from headrace.io import ReadFromText, WriteToText
from headrace.options.pipeline_options import PipelineOptions, SetupOptions
from headrace.testing.util import assert_that, equal_to
from headrace.transforms import window

# ---------------------------------------------------------------------------------------
# (a) wordcount_minimal, as in apache_beam/examples/wordcount_minimal.py


def wordcount_minimal_main(argv=None, save_main_session=True):
    """Main entry point; defines and runs the wordcount pipeline."""
    parser = argparse.ArgumentParser()
    parser.add_argument('--input', dest='input', required=True, help='Input file to process.')
    parser.add_argument('--output', dest='output', required=True,
                        help='Output file to write results to.')
    known_args, pipeline_args = parser.parse_known_args(argv)
    # Beam's example appends '--runner=DirectRunner' and Dataflow placeholders here; the
    # runner under test comes in through argv instead, the placeholders are kept.
    pipeline_args.extend([
        '--project=SET_YOUR_PROJECT_ID_HERE',
        '--region=SET_REGION_HERE',
        '--staging_location=gs://YOUR_BUCKET_NAME/AND_STAGING_DIRECTORY',
        '--temp_location=gs://YOUR_BUCKET_NAME/AND_TEMP_DIRECTORY',
        '--job_name=your-wordcount-job',
    ])

    # We use the save_main_session option because one or more DoFn's in this
    # workflow rely on global context (e.g., a module imported at module level).
    pipeline_options = PipelineOptions(pipeline_args)
    pipeline_options.view_as(SetupOptions).save_main_session = save_main_session
    with beam.Pipeline(options=pipeline_options) as p:

        # Read the text file[pattern] into a PCollection.
        lines = p | ReadFromText(known_args.input)

        # Count the occurrences of each word.
        counts = (
            lines
            | 'Split' >> (
                beam.FlatMap(lambda x: re.findall(r'[A-Za-z\']+', x)).with_output_types(str))
            | 'PairWithOne' >> beam.Map(lambda x: (x, 1))
            | 'GroupAndSum' >> beam.CombinePerKey(sum))

        # Format the counts into a PCollection of strings.
        def format_result(word_count):
            (word, count) = word_count
            return '%s: %s' % (word, count)

        output = counts | 'Format' >> beam.Map(format_result)

        # Write the output using a "Write" transform that has side effects.
        # pylint: disable=expression-not-assigned
        output | WriteToText(known_args.output)


VOCABULARY = ["king", "lear", "cordelia", "o'er", "don't", "the", "The", "and", "of", "fool",
              "Goneril", "Regan", "nothing", "will", "come"]


def _generate_text(rnd, n_lines):
    lines = []
    for _ in range(n_lines):
        words = [rnd.choice(VOCABULARY) for _ in range(rnd.randrange(0, 14))]
        seps = [rnd.choice([" ", ", ", "; ", " -- ", "! ", "? 12 ", ".  "]) for _ in words]
        lines.append("".join(w + s for w, s in zip(words, seps)).strip())
    return lines


def test_wordcount_minimal(runner, tmp_path):
    rnd = random.Random(20150831)
    lines = _generate_text(rnd, 2500)
    input_path = tmp_path / "kinglear.txt"
    input_path.write_text("\n".join(lines) + "\n")
    output_prefix = tmp_path / "out" / "counts"

    wordcount_minimal_main([f"--input={input_path}", f"--output={output_prefix}",
                            f"--runner={runner}"])

    expected = collections.Counter(w for line in lines for w in re.findall(r"[A-Za-z']+", line))
    files = sorted(glob.glob(f"{output_prefix}-*-of-*"))
    assert files, "wordcount wrote no output files"
    actual = {}
    for path in files:
        with open(path, encoding="utf-8") as fh:
            for line in fh.read().splitlines():
                word, count = line.rsplit(": ", 1)
                assert word not in actual, f"word {word!r} written twice"
                actual[word] = int(count)
    assert actual == dict(expected)


# ---------------------------------------------------------------------------------------
# (b) windowed_wordcount, as in apache_beam/examples/windowed_wordcount.py


def find_words(element):
    import re
    return re.findall(r'[A-Za-z\']+', element)


class FormatDoFn(beam.DoFn):
    def process(self, element, window=beam.DoFn.WindowParam):
        ts_format = '%Y-%m-%d %H:%M:%S.%f UTC'
        window_start = window.start.to_utc_datetime().strftime(ts_format)
        window_end = window.end.to_utc_datetime().strftime(ts_format)
        return [{
            'word': element[0],
            'count': element[1],
            'window_start': window_start,
            'window_end': window_end,
        }]


def windowed_wordcount(lines):
    def count_ones(word_ones):
        (word, ones) = word_ones
        return (word, sum(ones))

    transformed = (
        lines
        | 'Split' >> (beam.FlatMap(find_words).with_output_types(str))
        | 'PairWithOne' >> beam.Map(lambda x: (x, 1))
        | beam.WindowInto(window.FixedWindows(2 * 60, 0))
        | 'Group' >> beam.GroupByKey()
        | 'Count' >> beam.Map(count_ones)
        | 'Format' >> beam.ParDo(FormatDoFn()))
    return transformed


def test_windowed_wordcount(make_pipeline):
    rnd = random.Random(7)
    base = 1_700_000_000  # 2023-11-14T22:13:20Z, not aligned to two minutes
    timed_lines = [(line, base + rnd.randrange(0, 15 * 60)) for line in _generate_text(rnd, 300)]

    expected_counts = collections.Counter()
    for line, t in timed_lines:
        start = t - t % 120
        for w in re.findall(r"[A-Za-z']+", line):
            expected_counts[(w, start)] += 1
    fmt = '%Y-%m-%d %H:%M:%S.%f UTC'

    def utc(seconds):
        return datetime.datetime.fromtimestamp(seconds, tz=datetime.timezone.utc).strftime(fmt)

    expected = [{'word': w, 'count': c, 'window_start': utc(s), 'window_end': utc(s + 120)}
                for (w, s), c in expected_counts.items()]

    with make_pipeline(bundle_size=50) as p:
        lines = p | beam.Create([beam.TimestampedValue(line, t) for line, t in timed_lines])
        assert_that(windowed_wordcount(lines), equal_to(expected))
