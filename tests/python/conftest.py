"""Starts a real semaq-server for the cross-language tests, the way nats.py's own harness does."""

import os
import re
import subprocess
import tempfile
import threading
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BINARY = os.environ.get("SEMAQ_SERVER", os.path.join(ROOT, "target", "debug", "semaq-server"))


class Server:
    """A semaq-server process on a random port; `restart` starts a new one on the same store."""

    def __init__(self, *args):
        self.dir = tempfile.TemporaryDirectory()
        self.args = args
        self.log = []
        self._start()

    def _start(self):
        command = [BINARY, "-a", "127.0.0.1", "-p", "-1", "-m", "-1", "-js", "-sd", self.dir.name, *self.args]
        self.process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
        self.url = None
        self.http_url = None
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            line = self.process.stderr.readline()
            if not line:
                break
            self.log.append(line)
            found = re.search(r"Listening for client connections on (\S+)", line)
            if found:
                self.url = "nats://" + found.group(1)
            monitor = re.search(r"Starting http monitor on (\S+)", line)
            if monitor:
                self.http_url = "http://" + monitor.group(1)
            if "Server is ready" in line:
                break
        assert self.url, "semaq-server did not start"
        # Keep draining stderr so the server never blocks on a full pipe.
        threading.Thread(target=self._drain, args=(self.process.stderr,), daemon=True).start()

    def _drain(self, stderr):
        for line in stderr:
            self.log.append(line)

    def restart(self):
        """Stops the server (SIGTERM) and starts a new one on the same store directory and flags.

        The new server listens on a new random port: reconnect to `url` afterwards."""
        self.process.terminate()
        self.process.wait(timeout=10)
        self._start()

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=10)
        self.dir.cleanup()


@pytest.fixture
def server():
    running = Server()
    yield running
    running.stop()
