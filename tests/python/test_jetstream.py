"""nats-py's JetStream API, unchanged, against semaq-server: streams, publish acks, pull and push
consumers with acks, stream info, deletion, errors, and a restart on the same store."""

import asyncio

import nats
import pytest
from nats.js.api import AckPolicy, ConsumerConfig, StorageType
from nats.js.errors import NotFoundError

from conftest import wait_until_async


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, timeout=30))


def test_publish_acks_carry_stream_and_increasing_sequences(server):
    async def scenario():
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        info = await js.add_stream(name="ORDERS", subjects=["orders.>"], storage=StorageType.FILE)
        assert info.config.name == "ORDERS"
        assert info.config.subjects == ["orders.>"]
        assert info.state.messages == 0
        for i in range(1, 11):
            ack = await js.publish("orders.new", f"order {i}".encode())
            assert ack.stream == "ORDERS"
            assert ack.seq == i
            assert not ack.duplicate
        duplicate = await js.publish("orders.new", b"again", headers={"Nats-Msg-Id": "order-11"})
        again = await js.publish("orders.new", b"again", headers={"Nats-Msg-Id": "order-11"})
        assert (duplicate.seq, again.seq, again.duplicate) == (11, 11, True)
        await nc.close()

    run(scenario())


def test_pull_subscribe_fetch_and_ack(server):
    async def scenario():
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        await js.add_stream(name="JOBS", subjects=["jobs.>"])
        for i in range(10):
            await js.publish("jobs.render", f"job {i}".encode())
        psub = await js.pull_subscribe("jobs.render", durable="worker")
        received = []
        for _ in range(2):
            msgs = await psub.fetch(5, timeout=5)
            assert len(msgs) == 5
            for msg in msgs:
                received.append(msg.data.decode())
                assert msg.metadata.stream == "JOBS"
                assert msg.metadata.consumer == "worker"
                assert msg.metadata.num_delivered == 1
                await msg.ack()
        assert received == [f"job {i}" for i in range(10)]
        # An ack confirmed by the server (double ack) before looking at the consumer's state.
        await js.publish("jobs.render", b"job 10")
        (last,) = await psub.fetch(1, timeout=5)
        await last.ack_sync()
        info = await psub.consumer_info()
        assert info.name == "worker"
        assert info.num_ack_pending == 0
        assert info.num_pending == 0
        assert info.ack_floor.stream_seq == 11
        assert info.delivered.stream_seq == 11
        with pytest.raises(nats.errors.TimeoutError):
            await psub.fetch(1, timeout=0.5)
        await nc.close()

    run(scenario())


def test_pull_subscribe_with_a_wildcard_filter(server):
    async def scenario():
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        await js.add_stream(name="WILD", subjects=["wild.>"])
        await js.publish("wild.a", b"1")
        await js.publish("wild.b.c", b"2")
        psub = await js.pull_subscribe("wild.>", durable="any")
        msgs = await psub.fetch(2, timeout=5)
        assert [m.subject for m in msgs] == ["wild.a", "wild.b.c"]
        for msg in msgs:
            await msg.ack()
        await nc.close()

    run(scenario())


def test_pull_consumer_with_several_filter_subjects(server):
    async def scenario():
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        await js.add_stream(name="MULTI", subjects=["multi.>"])
        for subject in ["multi.a", "multi.b", "multi.c", "multi.a"]:
            await js.publish(subject, subject.encode())
        config = ConsumerConfig(
            durable_name="ac", ack_policy=AckPolicy.EXPLICIT, filter_subjects=["multi.a", "multi.c"]
        )
        info = await js.add_consumer("MULTI", config=config)
        assert info.config.filter_subjects == ["multi.a", "multi.c"]
        assert info.num_pending == 3
        psub = await js.pull_subscribe_bind(durable="ac", stream="MULTI")
        msgs = await psub.fetch(3, timeout=5)
        assert [m.subject for m in msgs] == ["multi.a", "multi.c", "multi.a"]
        assert [m.metadata.num_pending for m in msgs] == [2, 1, 0]
        for msg in msgs:
            await msg.ack()
        await nc.close()

    run(scenario())


def test_unacked_pulled_message_is_redelivered(server):
    async def scenario():
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        await js.add_stream(name="RETRY", subjects=["retry"])
        await js.publish("retry", b"once")
        config = ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, ack_wait=0.5)
        psub = await js.pull_subscribe("retry", durable="slow", config=config)
        (first,) = await psub.fetch(1, timeout=5)
        assert first.metadata.num_delivered == 1
        (second,) = await psub.fetch(1, timeout=5)
        assert second.data == b"once"
        assert second.metadata.num_delivered == 2
        assert second.metadata.sequence.stream == 1
        await second.ack_sync()
        await nc.close()

    run(scenario())


def test_push_subscription_with_durable_and_manual_ack(server):
    async def scenario():
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        await js.add_stream(name="EVENTS", subjects=["events.>"])
        sub = await js.subscribe("events.>", durable="pusher", manual_ack=True)
        for i in range(5):
            await js.publish(f"events.e{i}", f"event {i}".encode())
        for i in range(5):
            msg = await sub.next_msg(timeout=5)
            assert msg.subject == f"events.e{i}"
            assert msg.data == f"event {i}".encode()
            assert msg.metadata.sequence.stream == i + 1
            await msg.ack()
        await nc.flush()

        async def acks_applied():
            info = await js.consumer_info("EVENTS", "pusher")
            return info.num_ack_pending == 0 and info.ack_floor.stream_seq == 5

        await wait_until_async("every ack applied", 5, acks_applied)
        info = await js.consumer_info("EVENTS", "pusher")
        assert info.config.durable_name == "pusher"
        assert info.config.deliver_subject
        assert info.num_ack_pending == 0
        assert info.ack_floor.stream_seq == 5
        await sub.unsubscribe()
        await nc.close()

    run(scenario())


def test_push_subscription_with_callback(server):
    async def scenario():
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        await js.add_stream(name="TICKS", subjects=["ticks"])
        received = []
        done = asyncio.Event()

        async def handler(msg):
            received.append(msg.data)
            await msg.ack()
            if len(received) == 3:
                done.set()

        await js.subscribe("ticks", durable="ticker", cb=handler, manual_ack=True)
        for i in range(3):
            await js.publish("ticks", str(i).encode())
        await asyncio.wait_for(done.wait(), timeout=5)
        assert received == [b"0", b"1", b"2"]
        await nc.close()

    run(scenario())


def test_stream_info_and_delete_stream(server):
    async def scenario():
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        await js.add_stream(name="METRICS", subjects=["metrics.*"])
        for name in ["cpu", "mem", "cpu"]:
            await js.publish(f"metrics.{name}", b"1")
        info = await js.stream_info("METRICS")
        assert info.config.name == "METRICS"
        assert info.state.messages == 3
        assert info.state.first_seq == 1
        assert info.state.last_seq == 3
        filtered = await js.stream_info("METRICS", subjects_filter="metrics.cpu")
        assert filtered.state.subjects == {"metrics.cpu": 2}
        assert await js.delete_stream("METRICS") is True
        with pytest.raises(NotFoundError):
            await js.stream_info("METRICS")
        await nc.close()

    run(scenario())


def test_unknown_stream_errors_are_not_found(server):
    async def scenario():
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        with pytest.raises(NotFoundError) as info_error:
            await js.stream_info("NOPE")
        assert info_error.value.code == 404
        assert info_error.value.err_code == 10059
        with pytest.raises(NotFoundError):
            await js.delete_stream("NOPE")
        with pytest.raises(NotFoundError):
            await js.consumer_info("NOPE", "worker")
        with pytest.raises(NotFoundError):
            await js.pull_subscribe("nope.>", durable="worker")
        await nc.close()

    run(scenario())


def test_stream_and_durable_consumer_survive_a_restart(server):
    async def scenario():
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        await js.add_stream(name="KEEP", subjects=["keep.>"], storage=StorageType.FILE)
        for i in range(6):
            await js.publish("keep.it", f"m{i}".encode())
        psub = await js.pull_subscribe("keep.it", durable="keeper")
        for msg in await psub.fetch(3, timeout=5):
            await msg.ack_sync()
        await nc.close()

        server.restart()

        nc = await nats.connect(server.url)
        js = nc.jetstream()
        info = await js.stream_info("KEEP")
        assert (info.state.messages, info.state.last_seq) == (6, 6)
        consumer = await js.consumer_info("KEEP", "keeper")
        assert consumer.ack_floor.stream_seq == 3
        psub = await js.pull_subscribe("keep.it", durable="keeper")
        msgs = await psub.fetch(3, timeout=5)
        assert [m.data for m in msgs] == [b"m3", b"m4", b"m5"]
        for msg in msgs:
            await msg.ack_sync()
        ack = await js.publish("keep.it", b"m6")
        assert ack.seq == 7
        await nc.close()

    run(scenario())
