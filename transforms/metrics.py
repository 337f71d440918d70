"""Beam counters: every one lives under METRICS_NAMESPACE."""

from __future__ import annotations

from apache_beam.metrics import Metrics

from transforms.core.rejects import Rejection

METRICS_NAMESPACE = 'img2tfrecord'


def counter(name: str):
  return Metrics.counter(METRICS_NAMESPACE, name)


def count_rejection(rejection: Rejection) -> Rejection:
  counter(rejection.counter_name).inc()
  return rejection
