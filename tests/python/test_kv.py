"""nats-py's Key-Value API, unchanged, against semaq-server: put, get, history, delete, purge,
purge_deletes, watch with initial values and deltas, keys, and the bucket's status."""

import asyncio

import nats
import pytest
from nats.js.errors import KeyNotFoundError, NoKeysError

from conftest import wait_until_async


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, timeout=30))


def test_put_get_history_delete_and_purge(server):
    async def scenario():
        nc = await nats.connect(server.url)
        kv = await nc.jetstream().create_key_value(bucket="settings", history=5)
        first = await kv.put("theme", b"dark")
        second = await kv.put("theme", b"light")
        assert second > first
        entry = await kv.get("theme")
        assert (entry.key, entry.value, entry.revision) == ("theme", b"light", second)
        assert (await kv.get("theme", revision=first)).value == b"dark"
        assert [e.value for e in await kv.history("theme")] == [b"dark", b"light"]

        await kv.delete("theme")
        with pytest.raises(KeyNotFoundError):
            await kv.get("theme")
        assert [e.operation for e in await kv.history("theme")] == [None, None, "DEL"]

        await kv.put("font", b"mono")
        await kv.purge("font")
        history = await kv.history("font")
        assert [e.operation for e in history] == ["PURGE"], "a purge keeps only its marker"
        with pytest.raises(KeyNotFoundError):
            await kv.get("missing")

        status = await kv.status()
        assert (status.bucket, status.history, status.values) == ("settings", 5, 4)
        await nc.close()

    run(scenario())


def test_watch_sends_initial_values_with_deltas_then_the_done_marker_then_updates(server):
    async def scenario():
        nc = await nats.connect(server.url)
        kv = await nc.jetstream().create_key_value(bucket="watched", history=3)
        await kv.put("a", b"a1")
        await kv.put("b", b"b1")
        await kv.put("a", b"a2")

        watcher = await kv.watchall()
        initial = [await watcher.updates(), await watcher.updates()]
        assert [(e.key, e.value, e.delta) for e in initial] == [("b", b"b1", 1), ("a", b"a2", 0)]
        assert await watcher.updates() is None, "the initial values are done"
        await kv.put("c", b"c1")
        update = await watcher.updates()
        assert (update.key, update.value, update.delta) == ("c", b"c1", 0)
        await watcher.stop()

        # A key's watch ends its initial values even when its key is not the stream's last.
        one = await kv.watch("a")
        entry = await one.updates()
        assert (entry.value, entry.delta) == (b"a2", 0)
        assert await one.updates() is None
        await one.stop()

        empty = await (await nc.jetstream().create_key_value(bucket="empty")).watchall()
        assert await empty.updates() is None, "an empty bucket's watch is done at once"
        await empty.stop()
        await nc.close()

    run(scenario())


def test_keys_skip_deleted_and_purge_deletes_removes_old_markers(server):
    async def scenario():
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        kv = await js.create_key_value(bucket="inventory", history=4)
        for key in ["apples", "pears", "plums"]:
            await kv.put(key, b"1")
        await kv.put("pears", b"2")
        await kv.delete("plums")
        await kv.purge("apples")
        assert sorted(await kv.keys()) == ["pears"]

        # Markers younger than `olderthan` are kept (their history goes), older ones go entirely.
        await kv.purge_deletes(olderthan=3600)
        info = await js.stream_info("KV_inventory")
        assert info.state.messages == 4, "pears (2 revisions) and one marker each for plums and apples"
        await kv.purge_deletes(olderthan=-1)
        info = await js.stream_info("KV_inventory")
        assert info.state.messages == 2, "only pears' revisions remain"
        await kv.delete("pears")
        await kv.purge_deletes(olderthan=-1)
        with pytest.raises(NoKeysError):
            await kv.keys()
        await nc.close()

    run(scenario())


def test_bucket_ttl_and_status(server):
    async def scenario():
        nc = await nats.connect(server.url)
        kv = await nc.jetstream().create_key_value(bucket="sessions", ttl=1, history=2)
        status = await kv.status()
        assert status.ttl == 1.0
        await kv.put("s1", b"token")
        assert (await kv.get("s1")).value == b"token"

        async def gone():
            try:
                await kv.get("s1")
                return False
            except KeyNotFoundError:
                return True

        await wait_until_async("the entry to age out", 5, gone, interval=0.2)
        assert (await kv.status()).values == 0
        await nc.close()

    run(scenario())
