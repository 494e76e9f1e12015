"""A class-data probe that never finishes: it starts a child, as a probe starts its JVMs,
writes the child's PID to the file ``$CHAOSLAB_TEST_PID_FILE`` names, and waits
(tests/test_class_data.py).

    python -m tests.hanging_probe OUT.jsa
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

PID_FILE = "CHAOSLAB_TEST_PID_FILE"

if __name__ == "__main__":
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    Path(os.environ[PID_FILE]).write_text(str(child.pid))
    time.sleep(600)
