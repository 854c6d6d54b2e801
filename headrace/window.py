"""Alias of `headrace.transforms.window` (Beam exposes `apache_beam.window` too)."""

from headrace.transforms.window import *  # noqa: F401,F403
from headrace.transforms.window import __all__  # noqa: F401
