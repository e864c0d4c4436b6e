"""nats-py's Object Store, unchanged, against semaq-server: an object of 64 MiB put and read back
through an ordered push consumer with flow control (the client checks the SHA-256 digest), list,
watch, links and delete."""

import asyncio
import base64
import hashlib
import io
import json
import os

import nats
import pytest
from nats.js.errors import ObjectNotFoundError

BIG_OBJECT_BYTES = 64 * 1024 * 1024


def run(coroutine, timeout=30):
    return asyncio.run(asyncio.wait_for(coroutine, timeout=timeout))


def test_a_64_mib_object_is_put_and_read_back_with_its_digest(server):
    async def scenario():
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        store = await js.create_object_store("media")
        data = os.urandom(BIG_OBJECT_BYTES)
        info = await store.put("films/big.bin", data)
        assert (info.name, info.size, info.chunks) == ("films/big.bin", BIG_OBJECT_BYTES, BIG_OBJECT_BYTES // (128 * 1024))
        expected_digest = "SHA-256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode()
        assert info.digest == expected_digest
        # Written into a buffer: nats-py then does not grow one bytes object chunk by chunk.
        sink = io.BytesIO()
        result = await store.get("films/big.bin", writeinto=sink)
        assert result.info.digest == expected_digest
        assert sink.getvalue() == data
        status = await store.status()
        assert status.bucket == "media"
        stream = await js.stream_info("OBJ_media")
        assert stream.state.messages == info.chunks + 1
        await nc.close()

    run(scenario(), timeout=120)


def test_list_watch_link_and_delete(server):
    async def scenario():
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        store = await js.create_object_store("docs")
        await store.put("a.txt", b"alpha")
        await store.put("b.txt", b"bravo" * 50_000)
        await store.put("empty", b"")
        assert sorted(info.name for info in await store.list()) == ["a.txt", "b.txt", "empty"]

        # A link, published as nats.go's AddLink publishes it: a meta entry naming the target.
        link = {"name": "latest", "bucket": "docs", "nuid": "LINKNUID", "size": 0, "chunks": 0,
                "options": {"link": {"bucket": "docs", "name": "b.txt"}}}
        subject = "$O.docs.M." + base64.urlsafe_b64encode(b"latest").decode()
        await js.publish(subject, json.dumps(link).encode(), headers={"Nats-Rollup": "sub"})
        assert (await store.get("latest")).data == b"bravo" * 50_000

        watcher = await store.watch()
        seen = []
        while (entry := await watcher.updates(timeout=5)) is not None:
            seen.append(entry.name)
        assert sorted(seen) == ["a.txt", "b.txt", "empty", "latest"], "current values, then the end marker"
        await store.put("c.txt", b"charlie")
        update = await watcher.updates(timeout=5)
        assert (update.name, update.size) == ("c.txt", 7)

        await store.delete("a.txt")
        deleted = await watcher.updates(timeout=5)
        assert (deleted.name, deleted.deleted) == ("a.txt", True)
        await watcher.stop()
        with pytest.raises(ObjectNotFoundError):
            await store.get("a.txt")
        assert (await store.get_info("a.txt", show_deleted=True)).deleted
        chunks = await js.stream_info("OBJ_docs", subjects_filter="$O.docs.C.>")
        # The deleted object's chunk is purged; b.txt (2 chunks) and c.txt (1) remain.
        assert sum(chunks.state.subjects.values()) == 3
        assert sorted(info.name for info in await store.list(ignore_deletes=True)) == ["b.txt", "c.txt", "empty", "latest"]
        await nc.close()

    run(scenario())
