"""The web dashboard in headless Chromium, driven over the DevTools protocol: after a scripted
workload it shows the stream and a non-empty token heatmap, with no console errors, and a
screenshot is saved as a test artifact (target/test-artifacts/dashboard.png)."""

import asyncio
import base64
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request

import nats
import pytest
import websocket

from conftest import ROOT

ARTIFACTS = os.path.join(ROOT, "target", "test-artifacts")
CHROMIUM_START_TIMEOUT = 20
PAGE_READY_TIMEOUT = 20


def chromium_binary():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    pytest.fail("chromium is not installed: ./scripts/test installs Debian's chromium package")


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Browser:
    """Headless Chromium with one page, spoken to over the DevTools protocol."""

    def __init__(self):
        # Chromium's helper processes may still write the profile as it is removed.
        self.profile = tempfile.TemporaryDirectory(ignore_cleanup_errors=True)
        port = free_port()
        self.process = subprocess.Popen(
            [chromium_binary(), "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-extensions", f"--remote-debugging-port={port}", "--remote-allow-origins=*",
             f"--user-data-dir={self.profile.name}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + CHROMIUM_START_TIMEOUT
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=2) as response:
                    pages = [t for t in json.load(response) if t["type"] == "page"]
                if pages:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"chromium did not open its DevTools port within {CHROMIUM_START_TIMEOUT} s"
            time.sleep(0.2)
        self.socket = websocket.create_connection(pages[0]["webSocketDebuggerUrl"], timeout=10)
        self.next_id = 0
        self.events = []

    def call(self, method, **params):
        self.next_id += 1
        self.socket.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv())
            if message.get("id") == self.next_id:
                assert "error" not in message, f"{method}: {message['error']}"
                return message.get("result", {})
            self.events.append(message)

    def evaluate(self, expression):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result["result"].get("value")

    def errors(self):
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                found.append(params["exceptionDetails"].get("text", "exception"))
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                found.append(" ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", [])))
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                found.append(f"{params['entry'].get('text')} {params['entry'].get('url', '')}")
        return found

    def close(self):
        self.socket.close()
        self.process.kill()
        self.process.wait(timeout=10)
        self.profile.cleanup()


async def workload(server):
    """A level-1 stream, two models' token load on it, and a consumer that reads some back."""
    nc = await nats.connect(server.url)
    js = nc.jetstream()
    await js.add_stream(name="EVENTS", subjects=["ai.>"], metadata={"semaq.level": "1"})
    for n in range(20):
        headers = {"Semaq-Model": "llama3-70b", "Semaq-Tokens-In": "100", "Semaq-Tokens-Out": "300"}
        await js.publish("ai.chat.user", f"chat {n}".encode(), headers=headers)
    for n in range(10):
        await js.publish("ai.embed.doc", f"doc {n}".encode(), headers={"Semaq-Model": "bge-small", "Semaq-Tokens-In": "50"})
    consumer = await js.pull_subscribe("ai.>", durable="reader")
    for message in await consumer.fetch(10, timeout=5):
        await message.ack()
    await nc.close()


def test_the_dashboard_shows_streams_and_the_token_heatmap_without_console_errors(server):
    asyncio.run(workload(server))
    browser = Browser()
    try:
        browser.call("Runtime.enable")
        browser.call("Log.enable")
        browser.call("Page.enable")
        browser.call("Emulation.setDeviceMetricsOverride", width=1366, height=1000, deviceScaleFactor=1, mobile=False)
        browser.call("Page.navigate", url=server.http_url + "/")
        probe = """JSON.stringify({
            ready: document.body.dataset.ready === "true",
            streams: document.querySelector("#streams tbody").innerText,
            cells: Number(document.getElementById("heatmap").dataset.cells),
            rows: Number(document.getElementById("heatmap").dataset.rows),
            latency: document.querySelector("#latency tbody").innerText,
        })"""
        deadline = time.monotonic() + PAGE_READY_TIMEOUT
        while True:
            seen = json.loads(browser.evaluate(probe) or "{}")
            if seen.get("ready") and "EVENTS" in seen.get("streams", "") and seen.get("cells", 0) > 0:
                break
            assert time.monotonic() < deadline, f"the dashboard did not fill within {PAGE_READY_TIMEOUT} s: {seen}; errors: {browser.errors()}"
            time.sleep(0.25)
        assert "L1" in seen["streams"], seen
        assert seen["rows"] == 2, f"one heatmap row per model: {seen}"
        assert "EVENTS" in seen["latency"], f"the latency objective lists the stream: {seen}"
        assert "ai.chat" in seen["latency"], f"and each subject prefix: {seen}"
        shot = browser.call("Page.captureScreenshot", format="png")
        os.makedirs(ARTIFACTS, exist_ok=True)
        path = os.path.join(ARTIFACTS, "dashboard.png")
        with open(path, "wb") as out:
            out.write(base64.b64decode(shot["data"]))
        assert os.path.getsize(path) > 10_000, "the screenshot is a real page"
        assert browser.errors() == [], f"console errors: {browser.errors()}"
    finally:
        browser.close()
