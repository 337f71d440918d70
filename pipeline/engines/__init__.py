"""The engines a job runs on: which runners run locally, their defaults, dry
runs, what a Flink or Spark run needs (runners.py), the runners refused and
--direct_num_workers checked as the flags are read (runner_flags.py), whether
a job service answers (job_endpoint.py), whether a cluster's master answers
(masters.py), the Flink and Spark job servers
(job_servers.py, job_server_launcher.py, their jars' manifests:
jar_manifests.py; the Java, ports and jar given them: job_server_checks.py), Beam's Flink and Spark runners
stopping their job server (engine_runners.py), a run's job on a Flink cluster
(flink_jobs.py); `python -m pipeline.engines fetch` (__main__.py, an entry
point: it may import what the commands import).

May import: pipeline.beam_runtime, pipeline.errors, transforms.
"""
