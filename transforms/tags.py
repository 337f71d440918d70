"""Output tags of every Beam step, in one place.

A step that cannot turn an element into its main output emits a dead letter
under REJECTED (convert) or PROBLEMS (validate): never dropped, always counted.
"""

ROWS = 'rows'  # ManifestRow
REJECTED = 'rejected'  # Rejection
EXAMPLES = 'examples'  # BuiltExample (split, order, ..., serialized tf.train.Example)
TALLIES = 'tallies'  # (tally key, 1)
SKIPPED = 'skipped'  # a file below --image_dir that is not an image by name
LABELLED = 'labelled'  # LabelledRow
LOADED = 'loaded'  # LoadedImage
SUMMARIES = 'summaries'  # RecordSummary, or with gather RecordFacts (validate's reader)
PROBLEMS = 'problems'  # Problem
# CheckShards' outputs, what validate's report is written from:
TALLY_SUMS = 'tally_sums'  # (tally key, sum over the dataset)
FIRST_PROBLEMS = 'first_problems'  # one list: the first --max_problems Problems (none: none)
FIRST_WARNINGS = 'first_warnings'  # one list: the first warnings, likewise
