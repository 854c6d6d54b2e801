"""The engine-agnostic model: time, windows, triggers, the per-key core, combining, coders.

Nothing here imports Spark, pandas, the pipeline graph or the runners.
"""
