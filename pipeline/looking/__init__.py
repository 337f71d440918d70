"""Looking at a dataset (inspect, pipeline/look.py): the samples drawn from
the shards (look_sample.py), the pictures and the report page (report.py),
boxes and masks drawn on a detection dataset's images (look_detection.py),
the names and keys drawn and printed, and their font (lettering.py),
the records of files convert did not write (foreign_records.py),
--export_dir's files, each written whole or removed (export_files.py).

May import: pipeline.reading, pipeline.errors, transforms.
"""
