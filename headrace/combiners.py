"""Alias of `headrace.transforms.combiners` (Beam exposes `apache_beam.combiners` too)."""

from headrace.transforms.combiners import *  # noqa: F401,F403
from headrace.transforms.combiners import __all__  # noqa: F401
from headrace.transforms.combiners import core  # noqa: F401  (`combiners.core`, as in Beam)
