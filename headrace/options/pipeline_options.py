"""PipelineOptions in Beam's style: flags parsed from argv or given as keyword arguments."""

from __future__ import annotations

import argparse
import logging
from typing import Any, Dict, List, Optional, Type, TypeVar

from headrace.errors import InvalidArgumentError

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
        seen: set = set()
        for sub in PipelineOptions._registry:
            if "_add_argparse_args" in sub.__dict__ and sub not in seen:
                seen.add(sub)
                sub._add_argparse_args(parser)
        return parser

    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        """Subclasses declare their flags here."""

    @classmethod
    def from_dictionary(cls, options: Dict[str, Any]) -> "PipelineOptions":
        """Builds options from a {name: value} dict."""
        return cls(**options)

    def get_all_options(self, drop_default: bool = False, **_: Any) -> Dict[str, Any]:
        """All option values by name."""
        return dict(self._all)

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


class StandardOptions(PipelineOptions):
    """Which runner executes the pipeline, and whether it is streaming."""

    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--runner", default=None,
                            help="LocalRunner (alias DirectRunner) or SparkRunner")
        parser.add_argument("--streaming", default=False, action="store_true",
                            help="run as a streaming pipeline")


class SetupOptions(PipelineOptions):
    """Kept for Beam compatibility: how workers are set up."""

    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--save_main_session", default=False, action="store_true")
        parser.add_argument("--requirements_file", default=None)
        parser.add_argument("--setup_file", default=None)
        parser.add_argument("--pickle_library", default="cloudpickle")


class GoogleCloudOptions(PipelineOptions):
    """Accepted for Beam compatibility; headrace does not use them."""

    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        for flag in ("project", "region", "temp_location", "staging_location", "job_name"):
            parser.add_argument(f"--{flag}", default=None)


class DirectOptions(PipelineOptions):
    """Beam DirectRunner flags, accepted and mapped onto the local runner where they apply."""

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
    """Beam's TypeOptions: type checking flags (kept for compatibility) and --allow_unsafe_triggers."""

    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--pipeline_type_check", default=True, action="store_true")
        parser.add_argument("--runtime_type_check", default=False, action="store_true")
        parser.add_argument(
            "--allow_unsafe_triggers", default=False, action="store_true",
            help="allow a grouping that may never emit (an unbounded PCollection in the global "
                 "window with the default trigger): a warning instead of an error; it emits when "
                 "the watermark reaches the end of time")


class SparkRunnerOptions(PipelineOptions):
    """Spark runner settings: the master URL, extra Spark configuration and parallelism."""

    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--spark_master", default=None,
                            help="Spark master URL (default: local[*], Spark's embedded local mode); "
                                 "e.g. local[2], local-cluster[2,1,1024], spark://host:7077")
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
