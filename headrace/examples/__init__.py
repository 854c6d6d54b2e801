"""Runnable example pipelines (`python -m headrace.examples.<name>`).

* `sessions_billing/`: the Dataflow Model paper's motivating examples, video-viewing sessions
  and ad billing, over generated event logs; a package with `data` (the generator),
  `pipeline` (the pipeline) and `cli` (the command line).
"""
