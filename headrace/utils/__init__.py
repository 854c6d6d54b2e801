"""Beam's `apache_beam.utils` equivalents."""
