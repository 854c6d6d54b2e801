"""What both Spark runners run inside Spark tasks, and the Python daemon that forks their workers.

    env.py        `WorkerEnv`: a task's settings, the driver's coder registrations, and the
                  markers that make Spark's re-attempt of a failed task fail the same way
    failures.py   `TaskFailure`: a step's error carried in a task's error text, decoded again
                  on the driver (`pipeline_error`)
    packing.py    `FastPickleSerializer`, `pack` / `unpack` (one output's elements of a bundle)
    sides.py      side inputs on the workers: `portable_views`, `SideStub`, `side_reader`
    sorting.py    `sort_records`: a shuffled partition sorted by key, spilled in runs beyond
                  a budget of its records' estimated bytes
    daemon.py     the Python daemon of headrace's Spark sessions (`spark.python.daemon.module`)

Nothing here imports pyspark when imported (the daemon imports this package before it fixes
the workers' import path); pyspark is imported inside the functions that need it.
"""
