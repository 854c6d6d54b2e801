"""Beam's minimal word count and windowed word count, as one source for both SDKs.

Only the imports below differ between the SDKs: WORDCOUNT_SDK=beam (default) imports Apache
Beam, WORDCOUNT_SDK=headrace imports headrace under the same names. Everything after the imports
is written the way Beam's example pipelines are written (wordcount_minimal.py and
windowed_wordcount.py), with the windowed one reading timestamped lines from a text file and
writing text instead of using Pub/Sub and BigQuery.

    WORDCOUNT_SDK=headrace python benchmarks/_wordcount_pipelines.py minimal \
        --input in.txt --output out/counts
    WORDCOUNT_SDK=beam .venv-beam/bin/python benchmarks/_wordcount_pipelines.py windowed \
        --input in.tsv --output out/counts
"""

import os
import sys

SDK = os.environ.get("WORDCOUNT_SDK", "beam")

# ---- the only SDK-specific lines ---------------------------------------------------------
if SDK == "headrace":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import headrace as beam
    from headrace.io import ReadFromText, WriteToText
    from headrace.options.pipeline_options import PipelineOptions, SetupOptions
    from headrace.transforms import window
elif SDK == "beam":
    import apache_beam as beam
    from apache_beam.io import ReadFromText, WriteToText
    from apache_beam.options.pipeline_options import PipelineOptions, SetupOptions
    from apache_beam.transforms import window
else:
    raise SystemExit(f"WORDCOUNT_SDK must be 'beam' or 'headrace', got {SDK!r}")
# ------------------------------------------------------------------------------------------

import argparse  # noqa: E402
import logging  # noqa: E402
import re  # noqa: E402


def parse_args(argv):
    """--input and --output for the example; the rest become PipelineOptions (DirectRunner default)."""
    parser = argparse.ArgumentParser()
    parser.add_argument('--input', dest='input', required=True, help='Input file to process.')
    parser.add_argument('--output', dest='output', required=True,
                        help='Output file to write results to.')
    known_args, pipeline_args = parser.parse_known_args(argv)
    if not any(a.startswith('--runner') for a in pipeline_args):
        pipeline_args.extend(['--runner=DirectRunner'])
    pipeline_options = PipelineOptions(pipeline_args)
    pipeline_options.view_as(SetupOptions).save_main_session = True
    return known_args, pipeline_options


def run_minimal(argv=None):
    """wordcount_minimal: read lines, split into words, count each word, write 'word: count'."""
    known_args, pipeline_options = parse_args(argv)
    with beam.Pipeline(options=pipeline_options) as p:
        lines = p | ReadFromText(known_args.input)

        counts = (
            lines
            | 'Split' >> (beam.FlatMap(lambda x: re.findall(r'[A-Za-z\']+', x))
                          .with_output_types(str))
            | 'PairWithOne' >> beam.Map(lambda x: (x, 1))
            | 'GroupAndSum' >> beam.CombinePerKey(sum))

        def format_result(word_count):
            (word, count) = word_count
            return '%s: %s' % (word, count)

        output = counts | 'Format' >> beam.Map(format_result)
        output | WriteToText(known_args.output)


def find_words(element):
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


def run_windowed(argv=None):
    """windowed_wordcount: words counted per 2-minute fixed window of event time.

    Input lines are '<event time in epoch seconds>\\t<text>'.
    """
    known_args, pipeline_options = parse_args(argv)
    with beam.Pipeline(options=pipeline_options) as p:

        def to_timestamped(line):
            ts, text = line.split('\t', 1)
            return window.TimestampedValue(text, float(ts))

        lines = (p
                 | 'Read' >> ReadFromText(known_args.input)
                 | 'Timestamp' >> beam.Map(to_timestamped))

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

        (transformed
         | 'ToText' >> beam.Map(
             lambda row: '%(window_start)s\t%(window_end)s\t%(word)s\t%(count)s' % row)
         | 'Write' >> WriteToText(known_args.output))


if __name__ == '__main__':
    logging.getLogger().setLevel(logging.WARNING)
    which, rest = sys.argv[1], sys.argv[2:]
    {'minimal': run_minimal, 'windowed': run_windowed}[which](rest)
