"""validate's work on the launcher: --recompute, a sample of the records
converted again from their sources with the options dataset_info.json
records, and compared byte for byte (recompute.py; the rows of Parquet files
and WebDataset tars found again: recompute_sources.py; a --schema detection
dataset's records from their images and annotations: recompute_detection.py;
--shuffle off's manifest order against the manifest read again:
recompute_order.py);
the folder against its dataset_info.json before the job (folder_checks.py).

May import: pipeline.configuration, pipeline.runs, pipeline.engines,
pipeline.reading, pipeline.beam_runtime, pipeline.errors, transforms.
"""
