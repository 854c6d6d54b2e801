"""The engine-agnostic model: time, windows, triggers, the per-key core, combining, coders.

Nothing here imports Spark, py4j, pandas, numpy, pyarrow or any headrace package but
`headrace.errors`: only the standard library and cloudpickle (tests/test_architecture.py).
"""
