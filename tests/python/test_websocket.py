"""Clients over WebSocket, unchanged: nats-py's websocket transport (aiohttp) and nats.js's
`wsconnect` in Node, against semaq-server's `websocket { }` listener."""

import asyncio
import http.server
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time

import nats
import pytest
from nats.errors import NoRespondersError

from conftest import ROOT, Server

JS_DIR = os.path.join(ROOT, "tests", "js")


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, timeout=20))


@pytest.fixture
def ws_server(request):
    """A server with a plain-text WebSocket listener on a random port; `ws_url` is where.
    Parametrized indirectly with `compression` it also negotiates permessage-deflate."""
    compression = getattr(request, "param", None) == "compression"
    config = tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False)
    extra = ", compression: true" if compression else ""
    config.write(f'websocket {{ host: "127.0.0.1", port: -1, no_tls: true{extra} }}\n')
    config.close()
    running = Server("-c", config.name)
    found = re.search(r"Listening for websocket clients on (\S+)", running.log_text())
    assert found, f"no websocket listener logged:\n{running.log_text()}"
    running.ws_url = found.group(1)
    yield running
    running.stop()
    os.unlink(config.name)


def test_nats_py_over_websocket_pub_sub_with_headers(ws_server):
    async def scenario():
        assert ws_server.ws_url.startswith("ws://")
        nc = await nats.connect(ws_server.ws_url)
        sub = await nc.subscribe("py.ws.*")
        await nc.flush()
        await nc.publish("py.ws.hello", b"over websocket", headers={"X-Via": "aiohttp"})
        message = await sub.next_msg(timeout=5)
        assert (message.subject, message.data) == ("py.ws.hello", b"over websocket")
        assert message.headers == {"X-Via": "aiohttp"}
        await nc.close()

    run(scenario())


def test_nats_py_request_reply_and_jetstream_over_websocket(ws_server):
    async def scenario():
        nc = await nats.connect(ws_server.ws_url)

        async def echo(message):
            await message.respond(b"echo: " + message.data)

        await nc.subscribe("py.ws.echo", cb=echo)
        reply = await nc.request("py.ws.echo", b"hi", timeout=5)
        assert reply.data == b"echo: hi"
        with pytest.raises(NoRespondersError):
            await nc.request("py.ws.nobody", b"?", timeout=5)
        js = nc.jetstream()
        await js.add_stream(name="PYWS", subjects=["py.stream.>"])
        ack = await js.publish("py.stream.one", b"stored")
        assert (ack.stream, ack.seq) == ("PYWS", 1)
        assert (await js.get_msg("PYWS", 1)).data == b"stored"
        await nc.close()

    run(scenario())


def test_a_message_crosses_between_tcp_and_websocket_clients(ws_server):
    async def scenario():
        tcp = await nats.connect(ws_server.url)
        ws = await nats.connect(ws_server.ws_url)
        at_ws = await ws.subscribe("to.ws")
        at_tcp = await tcp.subscribe("to.tcp")
        await ws.flush()
        await tcp.flush()
        await tcp.publish("to.ws", b"from tcp")
        assert (await at_ws.next_msg(timeout=5)).data == b"from tcp"
        await ws.publish("to.tcp", b"from ws")
        assert (await at_tcp.next_msg(timeout=5)).data == b"from ws"
        await tcp.close()
        await ws.close()

    run(scenario())


@pytest.mark.parametrize("ws_server", ["plain", "compression"], indirect=True)
def test_nats_js_wsconnect_in_node(ws_server, request):
    """nats.js (`@nats-io/nats-core`'s wsconnect) in Node: pub/sub with headers, request/reply
    with a small and a 90 KB payload. Node's WebSocket offers permessage-deflate: with
    `compression: true` the server accepts it as nats-server does, else declines it."""
    compression = request.node.callspec.params["ws_server"] == "compression"
    node = shutil.which("node")
    assert node, "node is not installed (./scripts/test installs it)"
    modules = os.path.join(JS_DIR, "node_modules", "@nats-io", "nats-core")
    assert os.path.isdir(modules), "run `npm ci` in tests/js first (./scripts/test does)"
    script = os.path.join(JS_DIR, "websocket.mjs")
    # Node 20 has WebSocket only behind this flag (Node 22 has it on by default).
    result = subprocess.run(
        [node, "--experimental-websocket", "--no-warnings", script, ws_server.ws_url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report == {
        "message": "hello from node",
        "header": "nats.js",
        "reply": "echo: ping",
        "big_reply_intact": True,
        "extensions": "permessage-deflate; server_no_context_takeover; client_no_context_takeover" if compression else "",
        "server_port": int(ws_server.ws_url.rsplit(":", 1)[1]),
    }


PAGE_SCRIPT = """
new Promise((resolve) => {
  const ws = new WebSocket(%(url)s);
  ws.binaryType = "arraybuffer";
  const decoder = new TextDecoder();
  let text = "";
  let sent = false;
  ws.onmessage = (event) => {
    text += decoder.decode(event.data);
    if (!sent && text.startsWith("INFO ")) {
      sent = true;
      ws.send(new TextEncoder().encode(%(ops)s));
    }
    if (text.includes("PONG\\r\\n")) { ws.close(); resolve(text); }
  };
  ws.onclose = (event) => resolve("closed " + event.code);
  setTimeout(() => resolve("timeout: " + text), 10000);
})
"""


def test_a_chromium_page_speaks_nats_over_websocket_and_its_origin_is_checked():
    """A real browser: its WebSocket sends the page's Origin, which `allowed_origins` lets in
    (the page talks NATS, headers included) or keeps out (403, so the socket never opens)."""
    from test_dashboard import Browser, free_port

    page_port = free_port()
    page_server = http.server.ThreadingHTTPServer(("127.0.0.1", page_port), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=page_server.serve_forever, daemon=True).start()
    config = tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False)
    config.write(f'websocket {{ host: "127.0.0.1", port: -1, no_tls: true, allowed_origins: ["http://127.0.0.1:{page_port}"] }}\n')
    config.close()
    server = Server("-c", config.name)
    ws_url = re.search(r"Listening for websocket clients on (\S+)", server.log_text()).group(1)
    headers = "NATS/1.0\r\nX-From: page\r\n\r\n"
    body = "hello"
    ops = (
        'CONNECT {"verbose":false,"headers":true}\r\nSUB page 1\r\n'
        f"HPUB page {len(headers)} {len(headers) + len(body)}\r\n{headers}{body}\r\nPING\r\n"
    )
    script = PAGE_SCRIPT % {"url": json.dumps(ws_url), "ops": json.dumps(ops)}
    browser = Browser()
    try:
        results = []
        for host in ("127.0.0.1", "localhost"):
            browser.call("Page.navigate", url=f"http://{host}:{page_port}/")
            for _ in range(100):
                ready = browser.evaluate("location.host + ' ' + document.readyState")
                if ready == f"{host}:{page_port} complete":
                    break
                time.sleep(0.05)
            answer = browser.call("Runtime.evaluate", expression=script, awaitPromise=True, returnByValue=True)
            results.append(answer["result"]["value"])
        allowed, forbidden = results
        assert f"HMSG page 1 {len(headers)} {len(headers) + len(body)}\r\n{headers}{body}\r\n" in allowed, allowed
        assert forbidden == "closed 1006", forbidden
        server.wait_for_log("origin not allowed: not in the allowed list")
    finally:
        browser.close()
        server.stop()
        page_server.shutdown()
        os.unlink(config.name)


COMPRESSED_PAGE_SCRIPT = """
new Promise((resolve) => {
  const ws = new WebSocket(%(url)s);
  ws.binaryType = "arraybuffer";
  const decoder = new TextDecoder();
  let text = "";
  let sent = false;
  ws.onmessage = (event) => {
    text += decoder.decode(event.data);
    if (!sent && text.startsWith("INFO ")) {
      sent = true;
      ws.send(new TextEncoder().encode(%(ops)s));
    }
    if (text.includes("PONG\\r\\n")) { ws.close(); resolve({ extensions: ws.extensions, text }); }
  };
  ws.onclose = (event) => resolve({ closed: event.code });
  setTimeout(() => resolve({ timeout: text }), 10000);
})
"""


def test_a_chromium_page_negotiates_permessage_deflate_and_a_large_message_crosses_it():
    """Chromium offers permessage-deflate and compresses what it sends once it is accepted;
    with `compression: true` the server accepts, inflates the page's 45 KB publish and sends
    the delivery back compressed, which the browser inflates."""
    from test_dashboard import Browser

    config = tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False)
    config.write('websocket { host: "127.0.0.1", port: -1, no_tls: true, compression: true }\n')
    config.close()
    server = Server("-c", config.name)
    ws_url = re.search(r"Listening for websocket clients on (\S+)", server.log_text()).group(1)
    body = "chromium over deflate " * 2048
    ops = f'CONNECT {{"verbose":false}}\r\nSUB big 1\r\nPUB big {len(body)}\r\n{body}\r\nPING\r\n'
    script = COMPRESSED_PAGE_SCRIPT % {"url": json.dumps(ws_url), "ops": json.dumps(ops)}
    browser = Browser()
    try:
        # The browser opened on about:blank: navigating again could replace the page's
        # context, and close its socket, while the script runs.
        answer = browser.call("Runtime.evaluate", expression=script, awaitPromise=True, returnByValue=True)
        result = answer["result"]["value"]
        assert result.get("extensions", "").startswith("permessage-deflate"), result
        assert f"MSG big 1 {len(body)}\r\n{body}\r\n" in result["text"], result.get("text", "")[:300]
    finally:
        browser.close()
        server.stop()
        os.unlink(config.name)
