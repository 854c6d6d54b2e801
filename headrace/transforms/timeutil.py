"""Time domains of timers (Beam's `apache_beam.transforms.timeutil`)."""

from headrace.pipeline.userstate import TimeDomain

__all__ = ["TimeDomain"]
