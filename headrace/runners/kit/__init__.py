"""The runner kit: what every runner builds on, so that no runner re-implements a concept.

    plan.py         the pipeline's primitives as units: fused stages of element-wise steps and
                    the other primitives by kind (`plan`, `Stage`, `Primitive`)
    stage.py        a fused stage as plain data run bundle by bundle with whole-bundle retries
                    (`StepSpec`, `FusedStage`)
    dofn_runner.py  one element-wise step: `ParDoRunner` (DoFn lifecycle, parameters, side
                    inputs, tagged outputs, dead letters), `AssignWindowsRunner`, `ErrorInfo`
    isolation.py    a DoFn call under a time limit or in a child process
    side_inputs.py  `SideInputReader`, `SideInputCombiner`, `replace_views`
    grouping.py     keying a grouping's input, `GroupingCore` (the per-key core and its
                    outputs, dropped-data metrics, late-data output), grouping errors
    partial.py      the map side of a lifted combine: `PartialCombiner`
    sources.py      a source's records as elements, read in bundles, read errors
    runtime.py      process settings (cyclic-GC tuning)

Nothing here imports an engine: a runner adapts these to its own execution (a loop in one
process, Spark tasks, a streaming query).
"""
