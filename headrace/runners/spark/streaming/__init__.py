"""The Spark streaming runner: unbounded pipelines as Structured Streaming queries.

* `runner`: `SparkStreamingRunner`, tying the modules below together;
* `plan`: the pipeline as a stream plan (levels, stateful operators, sources, watermark graph);
* `query`: Spark configuration, starting the query, and its foreachBatch sink;
* `result`: `StreamingPipelineResult` and the query's progress as metrics;
* `errors`: a failed or refused query explained in the user's terms;
* `coordinator`: the watermarks and the micro-batch schedule, computed on the driver;
* `checkpoint`: the files headrace keeps beside Spark's checkpoint (plan, per-batch state);
* `source`: the Python data source that reads every headrace source of the pipeline;
* `stages`: the element-wise functions of each level (fused stages);
* `rows`: the multiplexed rows every PCollection travels in;
* `offsets`: the query's typed `Offset` and each batch's `Control`, and their JSON;
* `processor`: the transformWithState processor, routing each Spark key's rows to an operator;
* `grouping`, `side_steps`, `stateful`: the operators (groupings over buckets of keys, side-input
  steps and the side-input store, stateful ParDos), over `buckets` (keys in buckets, the state
  cell and timers they share).
"""
