"""Starts a real semaq-server for the cross-language tests, the way nats.py's own harness does.

The same rules as the Rust harness (crates/semaq-testkit): a missing binary fails the test with a
message saying how to build it (nothing is skipped), start-up and shutdown are bounded waits, and
stderr is drained all along so the server never blocks on a full pipe."""

import asyncio
import os
import queue
import re
import subprocess
import tempfile
import threading
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BINARY = os.environ.get("SEMAQ_SERVER", os.path.join(ROOT, "target", "debug", "semaq-server"))
# Bounds on start-up (until "Server is ready") and on the exit after SIGTERM, as in semaq-testkit.
READY_TIMEOUT = 20
EXIT_TIMEOUT = 10


async def wait_until_async(what, within, condition, interval=0.02):
    """Awaits `condition()` every `interval` seconds until it is true; fails naming `what` after `within`."""
    deadline = time.monotonic() + within
    while not await condition():
        assert time.monotonic() < deadline, f"{what}: not within {within} s"
        await asyncio.sleep(interval)


class Server:
    """A semaq-server process on a random port; `restart` starts a new one on the same store."""

    def __init__(self, *args, env=None):
        if not os.path.isfile(BINARY):
            pytest.fail(f"{BINARY} is not built: run `cargo build -p semaq-server` first (./scripts/test builds it)")
        self.dir = tempfile.TemporaryDirectory()
        self.args = args
        # The test's own OTEL_* variables never leak in: tracing is on only where a test says so.
        self.env = {name: value for name, value in os.environ.items() if not name.startswith("OTEL_")}
        self.env.update(env or {})
        self.log = []
        self._start()

    def _start(self):
        command = [BINARY, "-a", "127.0.0.1", "-p", "-1", "-m", "-1", "-js", "-sd", self.dir.name, *self.args]
        self.process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=self.env
        )
        self.url = None
        self.http_url = None
        lines = queue.Queue()
        # Drains stderr for the whole life of the process, so the server never blocks on a full pipe.
        threading.Thread(target=self._drain, args=(self.process.stderr, lines), daemon=True).start()
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self._kill()
                pytest.fail(f"semaq-server did not log 'Server is ready' within {READY_TIMEOUT} s; log:\n{self.log_text()}")
            if line is None:
                self.process.wait(timeout=EXIT_TIMEOUT)
                pytest.fail(f"semaq-server exited ({self.process.returncode}) before it was ready; log:\n{self.log_text()}")
            found = re.search(r"Listening for client connections on (\S+)", line)
            if found:
                self.url = "nats://" + found.group(1)
            monitor = re.search(r"Starting http monitor on (\S+)", line)
            if monitor:
                self.http_url = "http://" + monitor.group(1)
            if "Server is ready" in line:
                break
        assert self.url, f"semaq-server did not log its client address; log:\n{self.log_text()}"

    def _drain(self, stderr, lines):
        for line in stderr:
            self.log.append(line)
            lines.put(line)
        lines.put(None)

    def log_text(self):
        return "".join(self.log)

    def wait_for_log(self, text, within=5):
        """Waits until the log holds `text`: lines reach it from a thread that drains stderr, so
        one written as the server acts may arrive just after what a test saw of that act."""
        deadline = time.monotonic() + within
        while text not in self.log_text():
            assert time.monotonic() < deadline, f"{text!r} not in the log within {within} s: {self.log_text()}"
            time.sleep(0.02)

    def _kill(self):
        self.process.kill()
        self.process.wait(timeout=EXIT_TIMEOUT)

    def _terminate(self):
        self.process.terminate()
        try:
            self.process.wait(timeout=EXIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            self._kill()
            pytest.fail(f"semaq-server did not exit within {EXIT_TIMEOUT} s of SIGTERM; log:\n{self.log_text()}")

    def restart(self):
        """Stops the server (SIGTERM) and starts a new one on the same store directory and flags.

        The new server listens on a new random port: reconnect to `url` afterwards."""
        self._terminate()
        self._start()

    def stop(self):
        try:
            self._terminate()
        finally:
            self.dir.cleanup()


@pytest.fixture
def server():
    running = Server()
    yield running
    running.stop()
