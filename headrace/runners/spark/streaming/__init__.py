"""The Spark streaming runner: unbounded pipelines as Structured Streaming queries (`runner`)."""
