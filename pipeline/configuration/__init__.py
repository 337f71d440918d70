"""The configuration: the flag table (flags.py) and the one parse of a
command line or a --config file (command_line.py, config_file.py), the flag
reference of docs/ generated from it (flag_reference.py), the reads on the
launcher before a run (preflight.py: manifest headers, --label_map,
--image_dir; preflight_input.py: whether there is any row at all;
preflight_parquet.py, preflight_tars.py: Parquet footers,
WebDataset tars; detection_files.py: VOC and YOLO folders; manifest_files.py:
the files a --manifest names; flag_files.py: small files a flag names, read
capped; report_path.py: validate's --report), the checks that turn flags into
a frozen ConvertConfig or ValidateConfig (config.py, detection_config.py,
output_flags.py, configs.py, locations.py: the URL of every flag naming a
file or folder), and what a ConvertConfig decides of convert's job
(convert_plan.py).

May import: pipeline.runs, pipeline.engines, pipeline.beam_runtime,
pipeline.errors, transforms.
"""
