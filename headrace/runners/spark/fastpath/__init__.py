"""Both Spark runners' vectorised path for `Read -> plain element-wise steps -> lifted
CombinePerKey` (`batch/splittable._StageInput`, `streaming/stages`): a bundle read as
Arrow record batches runs here when it can be run exactly as the fused stage would run it, and
through the fused stage (`kit.stage.FusedStage`, whose columnar run is `kit.columnar`) otherwise.

* `tracer`: the sandbox that calls a plain function once on symbolic arguments and turns it
  into expression nodes over the input columns (or refuses it).
* `evaluate`: chains of such steps compiled into column expressions and evaluated over Arrow
  record batches (of an `ArrowBatchSource`, such as `ReadFromParquet`) with Python's exact
  semantics, or given up for the bundle.
* `combine`: the built-in CombineFns (sum, count, mean, min, max) per key and window over the
  evaluated arrays, sessions merged, emitting the accumulators a lifted combine emits.
* `blocks`: the batch runner's columnar shuffle of those groups into a grouping whose every
  window gets one pane: a block of columns per reduce partition, merged there at once.

Only the Spark runners use them. They are engine-agnostic all the same (numpy and pyarrow, no
pyspark): they see bundles and Arrow batches, never RDDs.
"""

from headrace.runners.spark.fastpath.combine import VectorCombiner, vector_combiner
from headrace.runners.spark.fastpath.evaluate import VectorBundle, VectorChain, vector_chain

__all__ = ["VectorBundle", "VectorChain", "VectorCombiner", "vector_chain", "vector_combiner"]
