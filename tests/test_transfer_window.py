"""paramiko's readv request thread: its error, when a connection goes with reads in flight, never
reaches the user as a traceback on top of okc's one line (a Ctrl-C during `okc pull`, issue 20's runs)."""

import subprocess
import sys

from conftest import REPO

PROGRAM = """
import threading
import okc.pods.transfer  # installs the hook, as every okc process that transfers does

def _prefetch_thread():  # the name paramiko's SFTPFile gives its thread: Thread-N (_prefetch_thread)
    raise EOFError("the transport was closed under the request thread")

def other_work():
    raise RuntimeError("a real fault elsewhere")

for target in (_prefetch_thread, other_work):
    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
"""


def test_the_request_threads_error_is_dropped_and_any_other_threads_still_shows():
    done = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert "a real fault elsewhere" in done.stderr and "Traceback" in done.stderr
    assert "_prefetch_thread" not in done.stderr and "EOFError" not in done.stderr, done.stderr
