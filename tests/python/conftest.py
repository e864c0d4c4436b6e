"""Starts a real semaq-server for the cross-language tests, the way nats.py's own harness does."""

import os
import re
import subprocess
import tempfile
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BINARY = os.environ.get("SEMAQ_SERVER", os.path.join(ROOT, "target", "debug", "semaq-server"))


class Server:
    """A semaq-server process on a random port."""

    def __init__(self, *args):
        self.dir = tempfile.TemporaryDirectory()
        command = [BINARY, "-a", "127.0.0.1", "-p", "-1", "-m", "-1", "-js", "-sd", self.dir.name, *args]
        self.process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
        self.url = None
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            line = self.process.stderr.readline()
            if not line:
                break
            found = re.search(r"Listening for client connections on (\S+)", line)
            if found:
                self.url = "nats://" + found.group(1)
            if "Server is ready" in line:
                break
        assert self.url, "semaq-server did not start"

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=10)
        self.dir.cleanup()


@pytest.fixture
def server():
    running = Server()
    yield running
    running.stop()
