"""A run's life: a command's run and its exit code (exits.py) and its
standard streams (std_streams.py), a command line started again in UTF-8
mode under another locale (utf8_mode.py), its private temp folder
(run_temp.py), SIGINT, SIGTERM and SIGHUP (interrupts.py), one run per
output folder (run_lock.py, lock_stores.py), the folder prepared and removed
on failure (output_dir.py), convert's run around its job: locked, published
or taken back (locked_run.py), a job that does not finish cancelled
(run_guard.py), --previous_dataset and the latest pointer (previous.py), the
progress line and the summary (progress.py, summary.py), room for the shards
a local run keeps open (open_files.py), what a run in a caller's process
puts back (in_process.py) and what Beam raises and logs during it
(in_process_errors.py); export's --output_dir checked before anything is
written (export_target.py), and built beside it and renamed into place when
complete (staged_dir.py).

May import: pipeline.engines, pipeline.beam_runtime, pipeline.errors,
transforms.
"""
