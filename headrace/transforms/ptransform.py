"""Beam's `apache_beam.transforms.ptransform`: PTransform and ptransform_fn."""

from headrace.pipeline.ptransform import PTransform, ptransform_fn

__all__ = ["PTransform", "ptransform_fn"]
