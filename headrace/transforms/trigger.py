"""Beam's `apache_beam.transforms.trigger`: triggers and AccumulationMode."""

from headrace.model.trigger import AccumulationMode, DefaultTrigger, TriggerFn

__all__ = ["AccumulationMode", "DefaultTrigger", "TriggerFn"]
