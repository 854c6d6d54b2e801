"""The Spark batch runner's fast paths for `Read -> plain element-wise steps -> lifted
CombinePerKey` (`batch/map_side.columnar_partial_fn`): a bundle runs on the first of these
that can run it exactly as the per-element path (`FusedStage`) would, and on that path otherwise.

* `columnar`: a bundle as parallel lists (values, timestamps, windows), each plain Map /
  MapTuple / FlatMap / Filter / WindowInto step run over the whole list at once.
* `tracer`: the sandbox that calls a plain function once on symbolic arguments and turns it
  into expression nodes over the input columns (or refuses it).
* `evaluate`: chains of such steps compiled into column expressions and evaluated over Arrow
  record batches (of an `ArrowBatchSource`, such as `ReadFromParquet`) with Python's exact
  semantics, or given up for the bundle.
* `combine`: the built-in CombineFns (sum, count, mean, min, max) per key and window over the
  evaluated arrays, sessions merged, emitting the accumulators a lifted combine emits.

Only the Spark runner uses them. They are engine-agnostic all the same (numpy and pyarrow, no
pyspark): they see bundles and Arrow batches, never RDDs.
"""

from headrace.runners.spark.fastpath.columnar import ColumnarChain, Columns, columnar_chain
from headrace.runners.spark.fastpath.combine import VectorCombiner, vector_combiner
from headrace.runners.spark.fastpath.evaluate import VectorBundle, VectorChain, vector_chain

__all__ = ["ColumnarChain", "Columns", "VectorBundle", "VectorChain", "VectorCombiner",
           "columnar_chain", "vector_chain", "vector_combiner"]
