"""nats-py, unchanged, against semaq-server: connect, pub/sub, request/reply, headers."""

import asyncio

import nats
from nats.errors import NoRespondersError


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, timeout=20))


def test_connect_reports_server_info(server):
    async def scenario():
        nc = await nats.connect(server.url)
        assert nc.is_connected
        assert nc.max_payload == 1024 * 1024
        assert nc._server_info["headers"] is True
        await nc.close()

    run(scenario())


def test_publish_subscribe_with_wildcards(server):
    async def scenario():
        nc = await nats.connect(server.url)
        received = []
        sub = await nc.subscribe("ai.*.events")
        await nc.flush()
        for model in ["llama", "mistral"]:
            await nc.publish(f"ai.{model}.events", model.encode())
        await nc.publish("ai.other", b"skipped")
        for _ in range(2):
            message = await sub.next_msg(timeout=5)
            received.append((message.subject, message.data))
        assert received == [("ai.llama.events", b"llama"), ("ai.mistral.events", b"mistral")]
        await nc.close()

    run(scenario())


def test_request_reply(server):
    async def scenario():
        responder = await nats.connect(server.url)
        requester = await nats.connect(server.url)

        async def handle(message):
            await message.respond(message.data.upper())

        await responder.subscribe("shout", cb=handle)
        await responder.flush()
        reply = await requester.request("shout", b"hello", timeout=5)
        assert reply.data == b"HELLO"
        await responder.close()
        await requester.close()

    run(scenario())


def test_headers_round_trip(server):
    async def scenario():
        nc = await nats.connect(server.url)
        sub = await nc.subscribe("with.headers")
        await nc.flush()
        await nc.publish("with.headers", b"body", headers={"Semaq-Model": "llama3-70b", "Semaq-Session": "s1"})
        message = await sub.next_msg(timeout=5)
        assert message.data == b"body"
        assert message.headers["Semaq-Model"] == "llama3-70b"
        assert message.headers["Semaq-Session"] == "s1"
        await nc.close()

    run(scenario())


def test_no_responders(server):
    async def scenario():
        nc = await nats.connect(server.url)
        try:
            await nc.request("nobody.listens", b"?", timeout=5)
            raise AssertionError("expected no responders")
        except NoRespondersError:
            pass
        await nc.close()

    run(scenario())
