"""The pipeline graph: Pipeline, PCollection, PTransform, DoFn."""
