"""nats-py, unchanged, against semaq-server with two accounts: each is its own subject space, and
JetStream answers only in the account that enables it (the other gets nats-server's error 10039,
JetStream not enabled for account)."""

import asyncio
import os

import nats
import pytest
from nats.js.errors import APIError

from conftest import Server

CONFIG = """
accounts {
  A { users: [{ user: a, password: a }], jetstream: enabled }
  B { users: [{ user: b, password: b }] }
}
"""


def test_accounts_isolate_subjects_and_only_the_jetstream_account_has_jetstream(tmp_path):
    path = os.path.join(str(tmp_path), "server.conf")
    with open(path, "w") as out:
        out.write(CONFIG)
    server = Server("-c", path)
    try:
        async def scenario():
            a = await nats.connect(server.url, user="a", password="a")
            b = await nats.connect(server.url, user="b", password="b")
            heard_by_a, heard_by_b = await a.subscribe("news"), await b.subscribe("news")
            await a.flush()
            await b.flush()
            await a.publish("news", b"from A")
            await b.publish("news", b"from B")
            await a.flush()
            await b.flush()
            assert (await heard_by_a.next_msg(timeout=5)).data == b"from A"
            assert (await heard_by_b.next_msg(timeout=5)).data == b"from B"
            for subscription in (heard_by_a, heard_by_b):
                with pytest.raises(nats.errors.TimeoutError):
                    await subscription.next_msg(timeout=0.3)
            assert (await a.jetstream().account_info()).streams == 0
            with pytest.raises(APIError) as refused:
                await b.jetstream().account_info()
            assert refused.value.err_code == 10039
            await a.close()
            await b.close()

        asyncio.run(asyncio.wait_for(scenario(), timeout=20))
    finally:
        server.stop()
