"""An image worker process killed by SIGKILL before it says it is ready (as
the OOM killer would kill it)."""

import os
import signal

if __name__ == '__main__':
  os.kill(os.getpid(), signal.SIGKILL)
