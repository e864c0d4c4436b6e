"""nats-py, unchanged, creating a server-side CEL filter through $SEMAQ.API.SUB.CREATE (SPEC §3)."""

import asyncio
import json

import nats
from nats.errors import TimeoutError as NatsTimeoutError


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, timeout=20))


def test_filtered_subscription_receives_only_matches(server):
    async def scenario():
        nc = await nats.connect(server.url)
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        request = {"subject": "ai.inference", "filter": "confidence > 0.85", "deliver": inbox}
        reply = await nc.request("$SEMAQ.API.SUB.CREATE", json.dumps(request).encode(), timeout=5)
        created = json.loads(reply.data)
        assert "error" not in created, created
        assert isinstance(created["id"], int)

        publisher = await nats.connect(server.url)
        for confidence in [0.3, 0.9, 0.5, 0.97]:
            event = {"model_id": "llama3-70b", "confidence": confidence}
            await publisher.publish("ai.inference", json.dumps(event).encode())
        await publisher.publish("ai.inference", b"not json")
        await publisher.flush()

        received = []
        for _ in range(2):
            message = await sub.next_msg(timeout=5)
            assert message.subject == "ai.inference"
            received.append(json.loads(message.data)["confidence"])
        assert received == [0.9, 0.97]
        try:
            extra = await sub.next_msg(timeout=0.3)
            raise AssertionError(f"unexpected delivery: {extra.data!r}")
        except NatsTimeoutError:
            pass
        await publisher.close()
        await nc.close()

    run(scenario())


def test_a_bad_filter_is_refused_with_its_position(server):
    async def scenario():
        nc = await nats.connect(server.url)
        request = {"subject": "ai.inference", "filter": "confidence >", "deliver": nc.new_inbox()}
        reply = await nc.request("$SEMAQ.API.SUB.CREATE", json.dumps(request).encode(), timeout=5)
        error = json.loads(reply.data)["error"]
        assert error["code"] == 400
        assert (error["line"], error["column"]) == (1, 13)
        await nc.close()

    run(scenario())
