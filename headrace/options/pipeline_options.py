"""PipelineOptions in Beam's style: flags parsed from argv or given as keyword arguments."""

from __future__ import annotations

import argparse
import difflib
import logging
from typing import Any, Callable, Dict, List, Optional, Type, TypeVar

from headrace.errors import InvalidArgumentError, UnsupportedArgumentError

_log = logging.getLogger(__name__)
T = TypeVar("T", bound="PipelineOptions")


class PipelineOptions:
    """Holds a pipeline's options; `view_as(SomeOptions)` reads them through a typed view."""

    _registry: List[Type["PipelineOptions"]] = []

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        PipelineOptions._registry.append(cls)

    def __init__(self, flags: Optional[List[str]] = None, **kwargs: Any) -> None:
        if flags is not None and isinstance(flags, str):
            raise InvalidArgumentError(
                "PipelineOptions takes a list of flags such as ['--runner=DirectRunner'], "
                f"got the str {flags!r}")
        parser = self._parser()
        known, unknown = parser.parse_known_args(list(flags or []))
        values: Dict[str, Any] = vars(known)
        for k, v in kwargs.items():
            if k not in values:
                raise InvalidArgumentError(
                    f"unknown pipeline option {k!r}; known options are: {', '.join(sorted(values))}")
            values[k] = v
        if unknown:
            _log.warning("ignoring unknown pipeline options: %s", " ".join(unknown))
        self.__dict__["_all"] = values
        self.__dict__["_flags"] = list(flags or [])

    @classmethod
    def _parser(cls) -> argparse.ArgumentParser:
        parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
        cls._add_all(parser)
        return parser

    @staticmethod
    def _add_all(parser: argparse.ArgumentParser) -> None:
        seen: set = set()
        for sub in PipelineOptions._registry:
            if "_add_argparse_args" in sub.__dict__ and sub not in seen:
                seen.add(sub)
                sub._add_argparse_args(parser)

    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        """Subclasses declare their flags here."""

    @classmethod
    def from_dictionary(cls, options: Dict[str, Any]) -> "PipelineOptions":
        """Builds options from a {name: value} dict."""
        return cls(**options)

    def get_all_options(self, drop_default: bool = False,
                        add_extra_args_fn: Optional[Callable[[argparse.ArgumentParser], None]] = None,
                        retain_unknown_options: bool = False, display_warnings: bool = False,
                        current_only: bool = False) -> Dict[str, Any]:
        """All option values by name, as Beam's method of the same name returns them.

        `drop_default` leaves out options equal to their default; `add_extra_args_fn(parser)`
        declares more flags to read from the command line; `retain_unknown_options` also
        returns flags no options class declares (`--name=value` as str, a bare `--flag` as
        True); `display_warnings` logs a warning per unknown flag (with a close known one);
        `current_only` keeps only the options this view's class declares.
        """
        parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
        if current_only:
            if "_add_argparse_args" in type(self).__dict__:
                type(self)._add_argparse_args(parser)
        else:
            self._add_all(parser)
        if add_extra_args_fn is not None:
            add_extra_args_fn(parser)
        known, unknown = parser.parse_known_args(self._flags)
        if display_warnings:
            _warn_unknown(unknown, parser)
        if retain_unknown_options and unknown:
            _declare_unknown(parser, unknown)
            known, _ = parser.parse_known_args(self._flags)
        result = vars(known)
        for k in list(result):
            if k in self._all:  # set by keyword or attribute after parsing
                result[k] = self._all[k]
            if drop_default and result[k] == parser.get_default(k):
                del result[k]
        return result

    def view_as(self, cls: Type[T]) -> T:
        """A typed view of the same options (changes through it are shared)."""
        view = cls.__new__(cls)
        view.__dict__["_all"] = self._all
        view.__dict__["_flags"] = self._flags
        return view

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return self.__dict__["_all"][name]
        except KeyError:
            raise AttributeError(f"no pipeline option named {name!r}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        self.__dict__["_all"][name] = value

    def display_data(self) -> Dict[str, Any]:
        """The options as a dict (for logs)."""
        return dict(self._all)

    def __repr__(self) -> str:
        shown = {k: v for k, v in self._all.items() if v is not None}
        return f"PipelineOptions({shown})"


def _warn_unknown(unknown: List[str], parser: argparse.ArgumentParser) -> None:
    known = [o for action in parser._actions for o in action.option_strings]
    for arg in unknown:
        if not arg.startswith("-"):
            continue
        close = difflib.get_close_matches(arg.split("=", 1)[0], known, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        _log.warning("unknown pipeline option %s%s", arg, hint)


def _declare_unknown(parser: argparse.ArgumentParser, unknown: List[str]) -> None:
    """Declares flags nobody declared: `--name=value` / `--name value` as str, a bare `--flag` as True."""
    declared: set = set()
    i = 0
    while i < len(unknown):
        arg = unknown[i]
        if arg == "--":
            break
        if not arg.startswith("--"):
            if arg.startswith("-"):
                _log.warning("ignoring the single-dash flag %s; pipeline options start with --", arg)
            i += 1
            continue
        name, has_value, _ = arg.partition("=")
        takes_next = not has_value and i + 1 < len(unknown) and not unknown[i + 1].startswith("-")
        if name not in declared:
            declared.add(name)
            if has_value or takes_next:
                parser.add_argument(name, type=str)
            else:
                parser.add_argument(name, action="store_true")
        i += 2 if takes_next else 1


class StandardOptions(PipelineOptions):
    """Which runner executes the pipeline, and whether it is streaming.

    The local runner runs bounded and unbounded (TestStream) pipelines alike, so `--streaming`
    changes nothing there; the Spark runner runs a pipeline with it as a Structured Streaming
    query instead of batch jobs.
    """

    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--runner", default=None,
                            help="LocalRunner (alias DirectRunner) or SparkRunner")
        parser.add_argument("--streaming", default=False, action="store_true",
                            help="run as a streaming pipeline")


class SetupOptions(PipelineOptions):
    """Beam's worker set-up flags, as far as they apply.

    `save_main_session` is always in effect: cloudpickle ships functions defined in `__main__`
    with the globals they use. `pickle_library` may only be 'cloudpickle' or 'default' (what
    headrace uses). `requirements_file` and `setup_file` (packages installed on Beam's workers)
    are refused when the pipeline runs: install what the DoFns need in the workers' Python
    (PYSPARK_PYTHON).
    """

    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--save_main_session", default=False, action="store_true")
        parser.add_argument("--requirements_file", default=None)
        parser.add_argument("--setup_file", default=None)
        parser.add_argument("--pickle_library", default="cloudpickle")


class GoogleCloudOptions(PipelineOptions):
    """Google Cloud (Dataflow) settings: accepted and unused, as on Beam's other runners."""

    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        for flag in ("project", "region", "temp_location", "staging_location", "job_name"):
            parser.add_argument(f"--{flag}", default=None)


class DirectOptions(PipelineOptions):
    """Beam's DirectRunner flags: how many workers and in which mode it runs.

    They tune how Beam's direct runner spreads work, never the results; the local runner runs
    a pipeline in one thread, so they change nothing there. `direct_running_mode` must still
    be one of Beam's modes (in_memory, multi_threading, multi_processing).
    """

    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--direct_num_workers", type=int, default=1)
        parser.add_argument("--direct_running_mode", default="in_memory")


class LocalRunnerOptions(PipelineOptions):
    """Local runner settings: bundle size and how often a failed bundle is retried."""

    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--bundle_size", type=int, default=1000,
                            help="elements per bundle read from a source or a grouping")
        parser.add_argument("--max_bundle_attempts", type=int, default=4,
                            help="attempts of a failing bundle before the pipeline fails")


class TypeOptions(PipelineOptions):
    """Beam's TypeOptions: type checking and --allow_unsafe_triggers.

    `--no_pipeline_type_check` turns off the construction-time checks of element types
    (key-value input of groupings, `with_input_types`); `--runtime_type_check` (checking every
    element at run time) is refused when the pipeline runs; `--allow_unsafe_triggers` lets a
    grouping that may emit only at the end of time run (a warning instead of an error).
    """

    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--pipeline_type_check", default=True, action="store_true")
        parser.add_argument("--no_pipeline_type_check", dest="pipeline_type_check",
                            action="store_false")
        parser.add_argument("--runtime_type_check", default=False, action="store_true")
        parser.add_argument(
            "--allow_unsafe_triggers", default=False, action="store_true",
            help="allow a grouping that may never emit (an unbounded PCollection in the global "
                 "window with the default trigger): a warning instead of an error; it emits when "
                 "the watermark reaches the end of time")


class SparkRunnerOptions(PipelineOptions):
    """Spark runner settings: the master URL or Spark Connect server, extra Spark configuration
    and parallelism, and the checkpoint location of a streaming run."""

    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--spark_master", default=None,
                            help="Spark master URL (default: local[*], Spark's embedded local mode); "
                                 "e.g. local[2], local-cluster[2,1,1024], spark://host:7077")
        parser.add_argument("--spark_remote", default=None, metavar="URL",
                            help="run on a Spark Connect server instead of starting Spark here: "
                                 "sc://HOST:PORT, or local[N] to start one in this process "
                                 "(default: the SPARK_REMOTE environment variable, as PySpark). "
                                 "Pipelines run as Structured Streaming queries there, bounded ones "
                                 "too (Spark Connect has no RDDs). Not with --spark_master; with "
                                 "sc://, --spark_conf may only change runtime Spark SQL settings and "
                                 "--spark_task_max_failures and --spark_app_name are the server's")
        parser.add_argument("--spark_conf", action="append", default=None, metavar="KEY=VALUE",
                            help="an extra Spark configuration entry (repeatable), e.g. "
                                 "--spark_conf=spark.driver.memory=4g")
        parser.add_argument("--spark_app_name", default="headrace",
                            help="the Spark application name shown in the Spark UI")
        parser.add_argument("--spark_parallelism", type=int, default=None,
                            help="partitions per shuffle and source (default: Spark's default "
                                 "parallelism, the number of cores in local mode)")
        parser.add_argument("--spark_task_max_failures", type=int, default=4,
                            help="attempts of a Spark task (a crashed worker, a lost executor) before "
                                 "the job fails; added to local[N] masters as local[N,F]")
        parser.add_argument("--checkpoint_location", default=None,
                            help="streaming: the directory of the query's checkpoint (Spark's "
                                 "offsets, commits and state, and headrace's per-batch state); "
                                 "default: a new directory in the system's temporary directory, "
                                 "printed when the query starts")
        parser.add_argument("--trigger_interval", type=float, default=0.0, metavar="SECONDS",
                            help="streaming, with a source that may grow (e.g. PeriodicImpulse): "
                                 "seconds between the starts of micro-batches; processing-time "
                                 "triggers fire at this resolution (default 0: the next batch "
                                 "starts as soon as the last one ends)")
        parser.add_argument("--max_records_per_batch", type=int, default=100_000,
                            help="streaming: at most this many records of each source that may "
                                 "grow are read in one micro-batch (default 100000)")
        parser.add_argument("--state_partitions", type=int, default=None, metavar="N",
                            help="streaming: partitions of the query's stateful operators (fixed "
                                 "for the life of its checkpoint; each costs time in every "
                                 "micro-batch). Default: spark.sql.shuffle.partitions when it is "
                                 "set to other than Spark's default 200, else Spark's default "
                                 "parallelism (the cores of local mode)")


_RUNNING_MODES = ("in_memory", "multi_threading", "multi_processing")


def check_supported(options: PipelineOptions) -> None:
    """Raises UnsupportedArgumentError / InvalidArgumentError for option values headrace cannot honour."""
    values = options._all
    for name in ("requirements_file", "setup_file"):
        if values.get(name):
            raise UnsupportedArgumentError(
                f"pipeline option --{name}={values[name]}: headrace does not install packages on "
                "its workers; install them in the Python the workers run (PYSPARK_PYTHON, the "
                f"same as the driver's in local mode) and drop --{name}")
    if values.get("pickle_library", "cloudpickle") not in ("cloudpickle", "default"):
        raise UnsupportedArgumentError(
            f"pipeline option --pickle_library={values['pickle_library']}: headrace always "
            "serialises functions with cloudpickle; drop the option or set it to cloudpickle")
    if values.get("runtime_type_check"):
        raise UnsupportedArgumentError(
            "pipeline option --runtime_type_check: headrace does not check element types at run "
            "time; drop the option (construction-time checks stay on unless "
            "--no_pipeline_type_check)")
    mode = values.get("direct_running_mode", "in_memory")
    if mode not in _RUNNING_MODES:
        raise InvalidArgumentError(
            f"pipeline option --direct_running_mode={mode!r} must be one of {', '.join(_RUNNING_MODES)}")
    workers = values.get("direct_num_workers", 1)
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 0:
        raise InvalidArgumentError(
            f"pipeline option --direct_num_workers={workers!r} must be a non-negative int "
            "(0: as many as there are cores, as in Beam)")
