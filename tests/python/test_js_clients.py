"""nats.js (@nats-io/kv over @nats-io/transport-node, pinned in tests/js) against semaq-server:
put, get, delete and a watch with its initial values and an update, over TCP."""

import json
import os
import subprocess

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
