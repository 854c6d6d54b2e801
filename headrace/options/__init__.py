"""Pipeline options (Beam's `apache_beam.options`)."""
