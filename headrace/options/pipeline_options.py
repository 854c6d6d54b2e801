"""PipelineOptions in Beam's style: flags parsed from argv or given as keyword arguments."""

from __future__ import annotations

import argparse
import difflib
import json
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
    headrace uses). `requirements_file`, `setup_file` and `extra_packages` (packages installed on
    Beam's workers) are refused when the pipeline runs: install what the DoFns need in the
    workers' Python (PYSPARK_PYTHON). `requirements_cache`, `sdk_location` and `beam_plugins`
    (Beam's staging of its SDK and plugins) are accepted and ignored with a warning.
    """

    _ignored = ("requirements_cache", "sdk_location", "beam_plugins")

    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--save_main_session", default=False, action="store_true")
        parser.add_argument("--requirements_file", default=None)
        parser.add_argument("--setup_file", default=None)
        parser.add_argument("--extra_package", "--extra_packages", dest="extra_packages",
                            action="append", default=None)
        parser.add_argument("--pickle_library", default="cloudpickle")
        parser.add_argument("--requirements_cache", default=None)
        parser.add_argument("--sdk_location", default="default")
        parser.add_argument("--beam_plugin", "--beam_plugins", dest="beam_plugins",
                            action="append", default=None)


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
        parser.add_argument("--sdf_test_split_probability", type=float, default=0.0,
                            help="local and Spark batch runners: after each successful claim of a splittable "
                                 "DoFn, split the rest of its restriction at a random fraction "
                                 "with this probability (tests that trackers tolerate splits)")
        parser.add_argument("--sdf_test_split_seed", type=int, default=0,
                            help="the seed of --sdf_test_split_probability's random splits")


class RecordPanesOptions(PipelineOptions):
    """Pane recording (`headrace.diagram.recording`): with `--record_panes=DIR` every
    runner writes what each grouping step's per-key core saw and did to Parquet files under DIR
    (`headrace.diagram` draws them); the other flags narrow it down. Off by default."""

    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--record_panes", default=None, metavar="DIR",
                            help="record each grouping step's elements, watermarks and panes "
                                 "under DIR (Parquet)")
        parser.add_argument("--record_panes_step", dest="record_panes_steps", action="append",
                            default=None, metavar="LABEL",
                            help="record only this grouping step (repeatable; default: all)")
        parser.add_argument("--record_panes_key", dest="record_panes_keys", action="append",
                            default=None, metavar="KEY",
                            help="record only this key, as str() prints it (repeatable)")
        parser.add_argument("--record_panes_start", type=float, default=None, metavar="SECONDS",
                            help="record only event times from this one on (seconds since the epoch)")
        parser.add_argument("--record_panes_end", type=float, default=None, metavar="SECONDS",
                            help="record only event times before this one (seconds since the epoch)")
        parser.add_argument("--record_panes_max_elements", type=int, default=None, metavar="N",
                            help="record at most N input elements per step and writer")


class ReportOptions(PipelineOptions):
    """The run report (`headrace.report`): with `--report=DIR` a run writes DIR/index.html, one
    self-contained page (the pipeline graph with element counts, metrics, dead letters, late
    data, a streaming run's batches and watermarks), at its end and, streaming, while it runs."""

    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--report", default=None, metavar="DIR",
                            help="write a run report (an HTML page) to DIR/index.html")
        parser.add_argument("--report_refresh_seconds", type=float, default=5.0, metavar="S",
                            help="a streaming run rewrites its report at most this often")


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


class _CommaSeparatedList(argparse.Action):
    """Beam's repeatable flag whose values may also be comma-separated: `--experiments=a,b`."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: Optional[str] = None) -> None:
        items = list(getattr(namespace, self.dest, None) or [])
        items += [v for v in str(values).split(",") if v]
        setattr(namespace, self.dest, items)


class GoogleCloudOptions(PipelineOptions):
    """Google Cloud Dataflow service settings (project, region, job name, temp and staging
    locations, ...): accepted and ignored, with a warning naming them when the pipeline runs."""

    DATAFLOW_ENDPOINT = "https://dataflow.googleapis.com"
    _ignored = "all"

    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--dataflow_endpoint", default=cls.DATAFLOW_ENDPOINT)
        for flag in ("project", "job_name", "staging_location", "temp_location", "region",
                     "service_account_email", "template_location", "dataflow_kms_key",
                     "create_from_snapshot", "flexrs_goal", "impersonate_service_account"):
            parser.add_argument(f"--{flag}", default=None)
        for flag in ("no_auth", "update", "enable_streaming_engine", "enable_hot_key_logging"):
            parser.add_argument(f"--{flag}", default=False, action="store_true")
        parser.add_argument("--label", "--labels", dest="labels", action="append", default=None)
        parser.add_argument("--transform_name_mapping", default=None, type=json.loads)
        parser.add_argument("--dataflow_service_option", "--dataflow_service_options",
                            dest="dataflow_service_options", action=_CommaSeparatedList,
                            default=None)


class WorkerOptions(PipelineOptions):
    """Dataflow's worker pool settings (number and machine type of workers, disks, network,
    container images): accepted and ignored, with a warning naming them when the pipeline runs.
    Spark's parallelism is set with SparkRunnerOptions (--spark_master, --spark_parallelism)."""

    _ignored = "all"

    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        for flag in ("num_workers", "max_num_workers", "disk_size_gb"):
            parser.add_argument(f"--{flag}", type=int, default=None)
        parser.add_argument("--autoscaling_algorithm", default=None)
        parser.add_argument("--worker_machine_type", "--machine_type", dest="machine_type",
                            default=None)
        parser.add_argument("--worker_disk_type", "--disk_type", dest="disk_type", default=None)
        for flag in ("worker_region", "worker_zone", "zone", "network", "subnetwork",
                     "worker_harness_container_image", "sdk_container_image", "min_cpu_platform",
                     "default_sdk_harness_log_level"):
            parser.add_argument(f"--{flag}", default=None)
        parser.add_argument("--sdk_harness_container_image_overrides", action="append", default=None)
        parser.add_argument("--use_public_ips", default=None, action="store_true")
        parser.add_argument("--no_use_public_ips", dest="use_public_ips", default=None,
                            action="store_false")
        parser.add_argument("--max_cache_memory_usage_mb", type=int, default=0)


class DebugOptions(PipelineOptions):
    """Beam's debugging flags: `--experiments` (repeatable, comma-separated) and the Dataflow
    ones; headrace has no experiments, so they are accepted and ignored, with a warning naming
    them when the pipeline runs."""

    _ignored = "all"

    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--dataflow_job_file", default=None)
        parser.add_argument("--experiment", "--experiments", dest="experiments",
                            action=_CommaSeparatedList, default=None)
        parser.add_argument("--number_of_worker_harness_threads", type=int, default=None)

    def add_experiment(self, experiment: str) -> None:
        """Adds `experiment` to the experiments (once)."""
        experiments = list(self._all.get("experiments") or [])
        if experiment not in experiments:
            experiments.append(experiment)
        self._all["experiments"] = experiments

    def lookup_experiment(self, key: str, default: Any = None) -> Any:
        """True if experiment `key` is set, its value if `key=value` is, else `default`."""
        experiments = self._all.get("experiments") or []
        if key in experiments:
            return True
        for experiment in experiments:
            if experiment.startswith(key + "="):
                return experiment.split("=", 1)[1]
        return default


class ProfilingOptions(PipelineOptions):
    """Beam's per-bundle CPU and memory profiling flags: accepted and ignored, with a warning
    naming them when the pipeline runs (profile a Spark job with Spark's own tools)."""

    _ignored = "all"

    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--profile_cpu", default=False, action="store_true")
        parser.add_argument("--profile_memory", default=False, action="store_true")
        parser.add_argument("--profile_location", default=None)
        parser.add_argument("--profile_sample_rate", type=float, default=1.0)


class PortableOptions(PipelineOptions):
    """Beam's portability flags (job server, SDK harness environment): headrace has no job
    server or harness, so they are accepted and ignored, with a warning naming them."""

    _ignored = "all"

    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        for flag in ("job_endpoint", "artifact_endpoint", "environment_type", "environment_config",
                     "output_executable_path"):
            parser.add_argument(f"--{flag}", default=None)
        parser.add_argument("--job_server_timeout", type=int, default=60)
        parser.add_argument("--environment_option", "--environment_options",
                            dest="environment_options", action="append", default=None)
        parser.add_argument("--sdk_worker_parallelism", type=int, default=1)
        parser.add_argument("--environment_cache_millis", type=int, default=0)


class AzureOptions(PipelineOptions):
    """Azure Blob Storage credentials: accepted and ignored with a warning (headrace reads local
    paths only)."""

    _ignored = "all"

    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        for flag in ("azure_connection_string", "blob_service_endpoint",
                     "azure_managed_identity_client_id"):
            parser.add_argument(f"--{flag}", default=None)


class S3Options(PipelineOptions):
    """Amazon S3 credentials and endpoint: accepted and ignored with a warning (headrace reads
    local paths only)."""

    _ignored = "all"

    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        for flag in ("s3_access_key_id", "s3_secret_access_key", "s3_session_token",
                     "s3_endpoint_url", "s3_region_name", "s3_api_version", "s3_verify"):
            parser.add_argument(f"--{flag}", default=None)
        parser.add_argument("--s3_disable_ssl", default=False, action="store_true")


class HadoopFileSystemOptions(PipelineOptions):
    """HDFS connection settings: accepted and ignored with a warning (headrace reads local
    paths only)."""

    _ignored = "all"

    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        for flag in ("hdfs_host", "hdfs_port", "hdfs_user"):
            parser.add_argument(f"--{flag}", default=None)
        parser.add_argument("--hdfs_full_urls", default=False, action="store_true")


class SparkRunnerOptions(PipelineOptions):
    """Spark runner settings: the master URL or Spark Connect server, extra Spark configuration
    and parallelism, Spark's log file, and the checkpoint location of a streaming run."""

    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--spark_master", default=None,
                            help="Spark master URL (default: local[*], Spark's embedded local mode); "
                                 "e.g. local[2], local-cluster[2,1,1024], spark://host:7077")
        parser.add_argument("--spark_remote", default=None, metavar="URL",
                            help="run on a Spark Connect server instead of starting Spark here: "
                                 "sc://HOST:PORT, or local[N] to start one in this process "
                                 "(default: the SPARK_REMOTE environment variable, as PySpark). "
                                 "Bounded pipelines run there as batch jobs of DataFrame operations "
                                 "(Spark Connect has no RDDs), unbounded ones as Structured Streaming "
                                 "queries. Not with --spark_master; with "
                                 "sc://, --spark_conf may only change runtime Spark SQL settings and "
                                 "--spark_task_max_failures and --spark_app_name are the server's")
        parser.add_argument("--spark_conf", action="append", default=None, metavar="KEY=VALUE",
                            help="an extra Spark configuration entry (repeatable), e.g. "
                                 "--spark_conf=spark.driver.memory=4g")
        parser.add_argument("--spark_log", default=None, metavar="FILE",
                            help="the file Spark's own output goes to (its log, the warnings of its "
                                 "JVM, what its Python workers print) when headrace starts Spark in "
                                 "this process; errors are also shown as one line each (default: a "
                                 "new file in the temporary directory, named when Spark starts)")
        parser.add_argument("--spark_app_name", default="headrace",
                            help="the Spark application name shown in the Spark UI")
        parser.add_argument("--spark_parallelism", type=int, default=None,
                            help="partitions per shuffle and source (default: Spark's default "
                                 "parallelism, the number of cores in local mode)")
        parser.add_argument("--spark_task_max_failures", type=int, default=4,
                            help="attempts of a Spark task (a crashed worker, a lost executor) before "
                                 "the job fails; added to local[N] masters as local[N,F]")
        parser.add_argument("--sdf_straggler_splitting", dest="sdf_straggler_splitting",
                            action="store_true", default=True,
                            help="batch: a Spark task whose splittable-DoFn work lags its wave's "
                                 "even share (1.5x its time at the task's own rate) checkpoints it, "
                                 "and the rest is spread over all cores in a next wave (default on)")
        parser.add_argument("--no_sdf_straggler_splitting", dest="sdf_straggler_splitting",
                            action="store_false",
                            help="batch: no straggler splits of splittable-DoFn works")
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
        parser.add_argument("--no_progress", default=False, action="store_true",
                            help="show no progress on the terminal (a batch run's live display of "
                                 "its Spark stages, a streaming run's line per micro-batch); it is "
                                 "shown only when standard error is a terminal")
        parser.add_argument("--test_stream_events_per_batch", type=int, default=1000, metavar="N",
                            help="streaming: a micro-batch performs up to this many events of a "
                                 "TestStream's script where the groupings after it take them step "
                                 "by step with the same panes (docs/semantics.md, \"A chunk of "
                                 "script events in one batch\"; default 1000; 1: one step per "
                                 "batch, e.g. to see side effects in step order; a query resumed "
                                 "from its checkpoint keeps the value it started with)")
        parser.add_argument("--sdf_max_claims_per_batch", type=int, default=10_000, metavar="N",
                            help="streaming: a splittable DoFn claims at most this many positions "
                                 "of one restriction per micro-batch, then the rest is "
                                 "checkpointed and resumed in the next (default 10000; 0: no "
                                 "limit)")
        parser.add_argument("--sdf_max_seconds_per_batch", type=float, default=5.0,
                            metavar="SECONDS",
                            help="streaming: a splittable DoFn works on one restriction for at "
                                 "most this long per micro-batch (checked after each claim), then "
                                 "the rest is checkpointed (default 5; 0: no limit)")
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
    for name in ("requirements_file", "setup_file", "extra_packages"):
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
    ignored = ignored_options(options)
    if ignored:
        _log.warning(
            "headrace ignores these pipeline options (they configure Google Cloud, Dataflow "
            "workers, Beam's portability and SDK staging, profiling, experiments or other file "
            "systems, none of which headrace has): %s", ", ".join(ignored))


def ignored_options(options: PipelineOptions) -> List[str]:
    """The options set (to other than their defaults) that headrace accepts and ignores, as
    `--name=value`, in the order of the option classes."""
    values = options._all
    out: List[str] = []
    for cls in PipelineOptions._registry:
        names = cls.__dict__.get("_ignored")
        if not names or "_add_argparse_args" not in cls.__dict__:
            continue
        parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
        cls._add_argparse_args(parser)
        dests = [a.dest for a in parser._actions if a.dest != "help"]
        for dest in dict.fromkeys(dests):
            if names != "all" and dest not in names:
                continue
            if dest in values and values[dest] != parser.get_default(dest):
                out.append(f"--{dest}={values[dest]}")
    return out
