"""The Spark batch runner: a bounded pipeline as Spark jobs over RDDs.

    translation.py  `BatchTranslation`: the pipeline's units (`kit.plan`) as RDDs, and running them
    env.py          `TaskEnv`: a task's settings and the accumulators its metrics go to
    tasks.py        task functions for sources, fused stages, side inputs and plain shuffles
    map_side.py     a grouping's input as shuffle records (keyed elements, partial accumulators)
    reduce_side.py  each key's sorted records through the per-key core, or a stateful ParDo
"""
