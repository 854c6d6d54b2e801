"""Beam's text IO and file systems as a ported program uses them: `ReadFromText` with
`skip_header_lines`, a custom `delimiter`, an `escapechar`, `compression_type` GZIP / BZIP2 by
name and AUTO by suffix, `strip_trailing_newlines=False`; `ReadFromTextWithFilename` (base names
printed); `ReadAllFromText` over a PCollection of patterns (also `with_filename`); `WriteToText`
with `compression_type` and `num_shards`, the written files read back from a DoFn; and
`FileSystems.match / open / create / rename / copy / delete / exists / join / split` used before
the pipeline and inside a DoFn (sizes, existence, relative names, sorted).

Avoided (docs/beam-compatibility.md): a delimiter right after an escaped one (Beam resumes its
search one byte late), match results' order (sorted here), relative globs, `create` in a missing
directory, `open` of a missing file."""

import bz2
import gzip
import os
import tempfile

from _sdk import (
    CompressionTypes,
    FileSystems,
    ReadAllFromText,
    ReadFromText,
    ReadFromTextWithFilename,
    WriteToText,
    beam,
)

CITIES = ["oslo", "lima", "rome", "kyiv", "baku", "doha", "riga", "bern", "nuuk", "apia"]


def _rows(n, seed):
    """n CSV rows 'id,city,amount'."""
    return [f"{i},{CITIES[(i * seed) % 10]},{(i * 31 + seed) % 997}" for i in range(n)]


def make_inputs(dir):
    """CSV files with headers, plain / gzip / bz2 / gzip without a suffix, a '|#'-delimited file
    and a '|'-delimited file with backslash escapes."""
    os.makedirs(os.path.join(dir, "csv"), exist_ok=True)
    header = "id,city,amount\n# generated\n"
    for k in range(3):
        with open(os.path.join(dir, "csv", f"part-{k}.csv"), "w") as f:
            f.write(header + "\n".join(_rows(400, k + 3)) + "\n")
    with gzip.open(os.path.join(dir, "csv", "more.csv.gz"), "wt") as f:
        f.write(header + "\n".join(_rows(300, 7)) + "\n")
    with bz2.open(os.path.join(dir, "csv", "extra.csv.bz2"), "wt") as f:
        f.write(header + "\n".join(_rows(250, 11)) + "\n")
    with gzip.open(os.path.join(dir, "gzip_no_suffix.dat"), "wt") as f:
        f.write("\n".join(_rows(120, 13)))  # no trailing newline
    with open(os.path.join(dir, "records.txt"), "wb") as f:
        f.write(b"|#".join(f"rec{i} {CITIES[i % 10]}\nline two".encode() for i in range(200)) + b"|#")
    with open(os.path.join(dir, "escaped.txt"), "wb") as f:
        parts = []
        for i in range(300):
            if i % 3 == 0:
                parts.append(f"e{i} has an escaped \\| bar".encode())
            elif i % 3 == 1:
                parts.append(f"e{i} ends with an escaped escape \\\\".encode())
            else:
                parts.append(f"e{i}\r\nwith a newline".encode())
        f.write(b"|".join(parts))
    with open(os.path.join(dir, "crlf.txt"), "wb") as f:
        f.write(b"".join(f"crlf {i}\r\n".encode() for i in range(150)))


class FileSystemOps(beam.DoFn):
    """FileSystems calls inside a DoFn: create, write, copy, rename, match, open, delete, exists."""

    def __init__(self, root):
        self.root = root

    def process(self, name):
        d = FileSystems.join(self.root, "dofn")
        path = FileSystems.join(d, f"{name}.txt.gz")
        with FileSystems.create(path) as f:  # AUTO: gzip by the suffix
            f.write("".join(f"{name} line {i}\n" for i in range(50)).encode())
        copied = FileSystems.join(d, f"{name}-copy.txt.gz")
        FileSystems.copy([path], [copied])
        renamed = FileSystems.join(d, f"{name}-renamed.txt.gz")
        FileSystems.rename([copied], [renamed])
        yield (
            f"dofn {name} exists_original={FileSystems.exists(path)} exists_copy={FileSystems.exists(copied)}"
            f" exists_renamed={FileSystems.exists(renamed)}"
        )
        with FileSystems.open(renamed) as f:
            lines = f.read().decode().splitlines()
        with FileSystems.open(renamed, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            raw = f.read()
        yield f"dofn {name} read={len(lines)} first={lines[0]!r} gzip_magic={raw[:2].hex()}"
        matched = FileSystems.match([FileSystems.join(d, f"{name}*")])[0].metadata_list
        yield f"dofn {name} matched={sorted(FileSystems.split(m.path)[1] for m in matched)}"
        FileSystems.delete([path, renamed])
        yield f"dofn {name} after_delete={FileSystems.exists(path)},{FileSystems.exists(renamed)}"


class ReadWritten(beam.DoFn):
    """Reads a file WriteToText wrote and emits its line count and sum."""

    def __init__(self, compression_type):
        self.compression_type = compression_type

    def process(self, path):
        base = FileSystems.split(path)[1]
        with FileSystems.open(path, compression_type=self.compression_type) as f:
            lines = f.read().decode().splitlines()
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            magic = f.read(3)
        yield (
            "written",
            base.split("-")[0],
            len(lines),
            sum(int(x.split(",")[2]) for x in lines),
            magic.hex(),
        )


def _before_pipeline(root):
    """FileSystems calls made while building the pipeline; their results as lines."""
    lines = []
    d = FileSystems.join(root, "before")
    FileSystems.mkdirs(d)
    for name, comp in [
        ("plain.txt", CompressionTypes.AUTO),
        ("packed.gz", CompressionTypes.AUTO),
        ("packed.bin", CompressionTypes.BZIP2),
    ]:
        with FileSystems.create(FileSystems.join(d, name), compression_type=comp) as f:
            f.write(("\n".join(_rows(40, 3)) + "\n").encode())
    for m in sorted(FileSystems.match([FileSystems.join(d, "*")])[0].metadata_list, key=lambda m: m.path):
        base = FileSystems.split(m.path)[1]
        comp = CompressionTypes.BZIP2 if base.endswith(".bin") else CompressionTypes.AUTO
        with FileSystems.open(m.path, compression_type=comp) as f:
            n = len(f.read().decode().splitlines())
        size = m.size_in_bytes if base == "plain.txt" else "compressed"
        lines.append(f"before match {base} size={size} lines={n}")
    FileSystems.rename([FileSystems.join(d, "plain.txt")], [FileSystems.join(d, "renamed.txt")])
    lines.append(
        f"before exists plain={FileSystems.exists(FileSystems.join(d, 'plain.txt'))} "
        f"renamed={FileSystems.exists(FileSystems.join(d, 'renamed.txt'))}"
    )
    FileSystems.delete([FileSystems.join(d, "packed.gz")])
    left = sorted(
        FileSystems.split(m.path)[1] for m in FileSystems.match([FileSystems.join(d, "*")])[0].metadata_list
    )
    lines.append(f"before left {left}")
    lines.append(
        f"before empty_match {len(FileSystems.match([FileSystems.join(d, 'nothing-*')])[0].metadata_list)}"
    )
    lines.append(
        "before detect "
        + " ".join(CompressionTypes.detect_compression_type(n) for n in ("a.gz", "a.BZ2", "a.txt"))
    )
    lines.append(f"before split {FileSystems.split('/x/y/z.txt')}")
    return lines


def _csv_line(prefix):
    """A Map label and function turning 'id,city,amount' into a tagged line."""
    return f"Fmt{prefix}" >> beam.Map(lambda s: f"{prefix} {s}")


def build(p, inputs):
    """The text reads and writes and the FileSystems calls."""
    outs = []
    csv = os.path.join(inputs, "csv")
    # headers skipped; AUTO compression by suffix over a glob with plain, .gz and .bz2 files
    rows = p | "ReadCsv" >> ReadFromText(os.path.join(csv, "*"), skip_header_lines=2)
    per_city = (
        rows
        | "Parse" >> beam.Map(lambda s: (s.split(",")[1], int(s.split(",")[2])))
        | "SumCity" >> beam.CombinePerKey(sum)
    )
    outs.append(per_city | "FmtCity" >> beam.MapTuple(lambda c, n: f"csv_city {c} {n}"))
    outs.append(rows | "CountRows" >> beam.combiners.Count.Globally() | beam.Map(lambda n: f"csv_rows {n}"))
    outs.append(
        p
        | "ReadGz"
        >> ReadFromText(
            os.path.join(csv, "*.gz"), compression_type=CompressionTypes.GZIP, skip_header_lines=1
        )
        | _csv_line("gz")
    )
    outs.append(
        p
        | "ReadBz2"
        >> ReadFromText(os.path.join(csv, "extra.csv.bz2"), compression_type=CompressionTypes.BZIP2)
        | _csv_line("bz2")
    )
    outs.append(
        p
        | "ReadNoSuffix"
        >> ReadFromText(os.path.join(inputs, "gzip_no_suffix.dat"), compression_type=CompressionTypes.GZIP)
        | _csv_line("gzip_named")
    )
    outs.append(
        p
        | "ReadDelim" >> ReadFromText(os.path.join(inputs, "records.txt"), delimiter=b"|#")
        | "FmtDelim" >> beam.Map(lambda s: f"delimited {s!r}")
    )
    outs.append(
        p
        | "ReadEscaped" >> ReadFromText(os.path.join(inputs, "escaped.txt"), delimiter=b"|", escapechar=b"\\")
        | "FmtEsc" >> beam.Map(lambda s: f"escaped {s!r}")
    )
    outs.append(
        p
        | "ReadCrlf" >> ReadFromText(os.path.join(inputs, "crlf.txt"), strip_trailing_newlines=False)
        | "FmtCrlf" >> beam.Map(lambda s: f"crlf_kept {s!r}")
    )
    outs.append(
        p
        | "ReadCrlfStripped" >> ReadFromText(os.path.join(inputs, "crlf.txt"))
        | "FmtCrlfS" >> beam.Map(lambda s: f"crlf_stripped {s!r}")
    )
    # with file names (base names only)
    named = p | "WithName" >> ReadFromTextWithFilename(os.path.join(csv, "part-*.csv"), skip_header_lines=2)
    outs.append(
        named
        | "NameKey" >> beam.MapTuple(lambda f, line: (os.path.basename(f), 1))
        | "PerFile" >> beam.CombinePerKey(sum)
        | "FmtPerFile" >> beam.MapTuple(lambda f, n: f"with_filename {f} {n}")
    )
    # ReadAllFromText over patterns
    patterns = p | "Patterns" >> beam.Create(
        [os.path.join(csv, "part-1.csv"), os.path.join(csv, "*.bz2"), os.path.join(inputs, "records.txt")]
    )
    outs.append(
        patterns
        | "ReadAll" >> ReadAllFromText(skip_header_lines=1)
        | "FmtAll" >> beam.Map(lambda s: f"read_all {s!r}")
    )
    outs.append(
        patterns
        | "ReadAllNamed" >> ReadAllFromText(with_filename=True)
        | "AllKey" >> beam.MapTuple(lambda f, line: os.path.basename(f))
        | "AllPerFile" >> beam.combiners.Count.PerElement()
        | "FmtAllNamed" >> beam.MapTuple(lambda f, n: f"read_all_named {f} {n}")
    )
    # writes with compression, read back from a DoFn
    out_dir = tempfile.mkdtemp(prefix="api_textio_")
    for name, read_as, kwargs in [
        ("gzipped", CompressionTypes.AUTO, dict(file_name_suffix=".csv.gz")),
        ("bzipped", CompressionTypes.BZIP2, dict(compression_type=CompressionTypes.BZIP2, num_shards=3)),
        ("plain", CompressionTypes.AUTO, dict(file_name_suffix=".csv", num_shards=2)),
    ]:
        written = rows | f"Write{name}" >> WriteToText(os.path.join(out_dir, name), **kwargs)
        outs.append(
            written
            | f"Read{name}" >> beam.ParDo(ReadWritten(read_as))
            # the shard an element lands in is the runner's: only totals over the shards, the
            # number of files when num_shards fixes it, and the compressed files' magic bytes
            | f"Key{name}" >> beam.Map(lambda t: ((t[0], t[1]), (1, t[2], t[3], t[4])))
            | f"Group{name}" >> beam.GroupByKey()
            | f"Fmt{name}"
            >> beam.MapTuple(
                lambda k, vs, shards=kwargs.get("num_shards"), compressed=(name != "plain"): (
                    f"{k[0]} {k[1]} files={len(vs) if shards else '-'} "
                    f"lines={sum(v[1] for v in vs)} sum={sum(v[2] for v in vs)} "
                    f"magic={sorted({v[3] for v in vs}) if compressed else '-'}"
                )
            )
        )
    # FileSystems before the pipeline and inside a DoFn
    fs_root = tempfile.mkdtemp(prefix="api_textio_fs_")
    outs.append(p | "Before" >> beam.Create(_before_pipeline(fs_root)))
    outs.append(
        p
        | "Names" >> beam.Create([f"n{i}" for i in range(6)])
        | "FsOps" >> beam.ParDo(FileSystemOps(fs_root))
    )
    return outs | beam.Flatten()
