"""An image worker process without the parent-death signal (as on macOS):
only its watchdog thread ends it when its parent does."""

from transforms.workers import process_worker

if __name__ == '__main__':
  process_worker._set_parent_death_signal = lambda signum: False
  process_worker.main()
