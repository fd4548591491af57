"""The bottom layer: the vocabulary every layer of rockbuild shares (jobs and the GPU-family table, the error types,
checks, findings, GPUs, statuses), the line-numbered YAML and JSON readers, the one reader of the environment, and
the records (one typed class per file rockbuild writes and reads back). Nothing here imports another layer."""
