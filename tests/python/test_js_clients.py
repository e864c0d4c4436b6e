"""nats.js (@nats-io/kv and @nats-io/obj over @nats-io/transport-node or nats-core's wsconnect,
pinned in tests/js) against semaq-server: Key-Value put, get, delete and a watch with its initial
values and an update, over TCP; the Object Store over TCP and WebSocket, with objects crossing
between nats.js and nats-py."""

import asyncio
import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile

import nats
import pytest

from conftest import Server

JS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "js")


def test_nats_js_key_value_put_get_and_watch(server):
    assert os.path.isdir(os.path.join(JS_DIR, "node_modules", "@nats-io", "kv")), "run `npm ci` in tests/js first"
    done = subprocess.run(
        ["node", "kv.mjs", server.url], cwd=JS_DIR, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, f"kv.mjs failed:\n{done.stderr}\nserver log:\n{server.log_text()}"
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["get"] == {"value": "a2", "revision": 3}
    assert seen["deleted"] == "DEL"
    assert seen["watch"] == [
        {"key": "a", "value": "a2", "operation": "PUT", "delta": 1, "update": False},
        # nats.js flags the last initial value as an update too (i >= num_pending).
        {"key": "b", "value": "", "operation": "DEL", "delta": 0, "update": True},
        {"key": "c", "value": "c1", "operation": "PUT", "delta": 0, "update": True},
    ]
    assert seen["keys"] == ["a", "c"]


@pytest.fixture(scope="module")
def tcp_and_ws_server():
    """One server listening for NATS over TCP and over plain-text WebSocket; `ws_url` is where."""
    config = tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False)
    config.write('websocket { host: "127.0.0.1", port: -1, no_tls: true }\n')
    config.close()
    running = Server("-c", config.name)
    found = re.search(r"Listening for websocket clients on (\S+)", running.log_text())
    assert found, f"no websocket listener logged:\n{running.log_text()}"
    running.ws_url = found.group(1)
    yield running
    running.stop()
    os.unlink(config.name)


def big_object():
    """The bytes objstore.mjs puts as "big": (i * 31) % 251 for 300 KiB + 7."""
    return bytes((i * 31) % 251 for i in range(300 * 1024 + 7))


@pytest.mark.parametrize("transport", ["tcp", "ws"])
def test_nats_js_object_store_put_get_list_watch_and_delete(tcp_and_ws_server, transport):
    """nats.js reads an object nats-py put, puts one in 64 KiB chunks that nats-py reads back,
    and sees its puts and delete through a watch, over TCP and over WebSocket."""
    server, bucket = tcp_and_ws_server, f"js_{transport}"
    node = shutil.which("node")
    assert node, "node is not installed (./scripts/test installs it)"
    assert os.path.isdir(os.path.join(JS_DIR, "node_modules", "@nats-io", "obj")), "run `npm ci` in tests/js first"
    from_py = os.urandom(200_000)

    async def put_from_py():
        nc = await nats.connect(server.url)
        store = await nc.jetstream().create_object_store(bucket)
        await store.put("from-py", from_py)
        await nc.close()

    asyncio.run(asyncio.wait_for(put_from_py(), timeout=20))
    url = server.ws_url if transport == "ws" else server.url
    # Node 20 has WebSocket only behind this flag (Node 22 has it on by default).
    done = subprocess.run(
        [node, "--experimental-websocket", "--no-warnings", "objstore.mjs", transport, url, bucket],
        cwd=JS_DIR, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, f"objstore.mjs failed:\n{done.stderr}\nserver log:\n{server.log_text()}"
    seen = json.loads(done.stdout.strip().splitlines()[-1])

    big = big_object()
    assert seen["from_py"] == {"size": len(from_py), "sha256": hashlib.sha256(from_py).hexdigest()}
    digest = "SHA-256=" + base64.urlsafe_b64encode(hashlib.sha256(big).digest()).decode()
    assert seen["put"] == {"size": len(big), "chunks": 5, "digest": digest}
    assert seen["big_back"] == {"size": len(big), "sha256": hashlib.sha256(big).hexdigest()}
    assert seen["small"] == "hello object"
    assert seen["listed"] == ["big", "from-py", "small"]
    assert seen["after_delete"] == ["big", "from-py"]
    assert seen["missing"] is True
    assert seen["watch"] == [
        {"name": "big", "deleted": False, "size": len(big), "update": True},
        {"name": "small", "deleted": False, "size": len("hello object"), "update": True},
        {"name": "small", "deleted": True, "size": 0, "update": True},
    ]

    async def read_from_py():
        nc = await nats.connect(server.url)
        store = await nc.jetstream().object_store(bucket)
        result = await store.get("big")
        await nc.close()
        return result

    result = asyncio.run(asyncio.wait_for(read_from_py(), timeout=20))
    assert (result.data, result.info.digest, result.info.chunks) == (big, digest, 5)
