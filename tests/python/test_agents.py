"""Agents in Python with nothing but nats-py: a plain agent (heartbeats and replies, no SDK)
and a nats.micro service, both served through SemaQ's intent routing."""

import asyncio
import json
import urllib.request

import nats
from nats.micro import add_service

from conftest import wait_until_async


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, timeout=30))


def agents_of(server):
    with urllib.request.urlopen(server.http_url + "/semaq/agents", timeout=5) as response:
        return json.load(response)


def test_a_plain_nats_py_agent_is_served_through_intent_routing(server):
    async def scenario():
        nc = await nats.connect(server.url)
        calls = []

        async def handle(msg):
            calls.append(msg.headers.get("Semaq-Agent"))
            failing = msg.data == b"break"
            status = "error" if failing else "ok"
            headers = {"Semaq-Status": status, "Semaq-Tokens-Out": "12"}
            await nc.publish(msg.reply, b"refunded " + msg.data, headers=headers)

        await nc.subscribe("agents.refund-py", cb=handle)
        beat = json.dumps({"agent_id": "refund-py", "intents": ["refund"], "inbox": "agents.refund-py", "capacity": 4})
        ack = await nc.request("$SEMAQ.AGENT.HB", beat.encode(), timeout=5)
        assert json.loads(ack.data) == {"ok": True, "agent_id": "refund-py"}

        requester = await nats.connect(server.url)
        reply = await requester.request("intent.refund", b"order-7", timeout=5)
        assert reply.data == b"refunded order-7"
        assert reply.headers["Semaq-Status"] == "ok"
        assert calls == ["refund-py"], "the delivery named the agent"

        await requester.request("intent.refund", b"break", timeout=5)
        member = agents_of(server)["intents"][0]["agents"][0]
        assert member["agent_id"] == "refund-py"
        assert member["ok"] == 1 and member["errors"] == 1, member
        assert member["weight"] < 1.0

        bye = await nc.request("$SEMAQ.AGENT.BYE", b'{"agent_id":"refund-py"}', timeout=5)
        assert json.loads(bye.data)["ok"] is True
        assert agents_of(server)["agents"] == []
        await requester.close()
        await nc.close()

    run(scenario())


def test_a_nats_micro_service_joins_by_endpoint_metadata(server):
    async def scenario():
        nc = await nats.connect(server.url)
        service = await add_service(nc, name="summarizer", version="1.0.0")

        async def summarize(request):
            await request.respond(b"short: " + request.data[:5])

        await service.add_endpoint(
            name="summarize", subject="text.summarize", handler=summarize, metadata={"semaq.intent": "summarize"}
        )

        async def discovered():
            return any(agent["source"] == "service" for agent in agents_of(server)["agents"])

        # The broker asks `$SRV.INFO` every heartbeat interval (2 s by default).
        await wait_until_async("the micro service is discovered", 10, discovered, interval=0.1)
        requester = await nats.connect(server.url)
        reply = await requester.request("intent.summarize", b"a long text", timeout=5)
        assert reply.data == b"short: a lon"
        await requester.close()
        await service.stop()
        await nc.close()

    run(scenario())
