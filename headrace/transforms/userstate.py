"""User state and timers for DoFns (Beam's `apache_beam.transforms.userstate`); see
`headrace.pipeline.userstate`."""

from headrace.pipeline.userstate import (
    BagStateSpec, CombiningValueStateSpec, MapStateSpec, OrderedListStateSpec,
    ReadModifyWriteStateSpec, SetStateSpec, StateSpec, TimeDomain, TimerSpec, get_dofn_specs,
    is_stateful_dofn, on_timer, on_window_expiration, validate_stateful_dofn,
)

__all__ = [
    "BagStateSpec", "CombiningValueStateSpec", "MapStateSpec", "OrderedListStateSpec",
    "ReadModifyWriteStateSpec", "SetStateSpec", "StateSpec", "TimeDomain", "TimerSpec",
    "get_dofn_specs", "is_stateful_dofn", "on_timer", "on_window_expiration",
    "validate_stateful_dofn",
]
