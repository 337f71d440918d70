"""Code that runs on pool threads or in child processes: pools, the worker
entry point, source-image loading, progress files. No Beam."""
