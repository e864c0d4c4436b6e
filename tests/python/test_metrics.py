"""`/metrics` read with the Prometheus project's own text parser (prometheus_client), after a
scripted nats-py workload: every counter equals what the workload did."""

import asyncio
import os
import tempfile
import urllib.request

import nats
from nats.js.api import ConsumerConfig
from nats.js.errors import APIError
from prometheus_client.parser import text_string_to_metric_families

from conftest import Server

CONFIG = "metrics { detail: true, subject_depth: 2 }\n"
SUBJECTS = {"sensors.eu.temp": 4, "sensors.us.temp": 2, "logs.app": 3}
STORED = 5
PAYLOAD = b"payload!"


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, timeout=30))


def scrape(server):
    with urllib.request.urlopen(server.http_url + "/metrics", timeout=10) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = response.read().decode()
    samples = {}
    families = {}
    for family in text_string_to_metric_families(text):
        families[family.name] = family
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return families, samples


def value(samples, name, **labels):
    key = (name, tuple(sorted(labels.items())))
    assert key in samples, f"no {key} among {sorted(samples)}"
    return samples[key]


def test_metrics_parse_with_prometheus_client_and_count_the_workload():
    config = tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False)
    config.write(CONFIG)
    config.close()
    server = Server("-c", config.name)
    try:
        async def workload():
            nc = await nats.connect(server.url)
            received = []

            async def collect(msg):
                received.append(msg)

            sub = await nc.subscribe("sensors.>", cb=collect)
            await nc.flush()
            for subject, count in SUBJECTS.items():
                for _ in range(count):
                    await nc.publish(subject, PAYLOAD)
            await nc.flush()
            for _ in range(100):
                if len(received) == 6:
                    break
                await asyncio.sleep(0.02)
            assert len(received) == 6
            await sub.unsubscribe()

            js = nc.jetstream()
            await js.add_stream(name="EVENTS", subjects=["events.>"])
            for n in range(STORED):
                ack = await js.publish(f"events.{n}", PAYLOAD)
                assert ack.seq == n + 1
            try:
                await js.publish("events.late", PAYLOAD, headers={"Nats-Expected-Last-Sequence": "99"})
                raise AssertionError("an unmet expected last sequence is refused")
            except APIError as error:
                assert error.err_code == 10071
            pull = await js.pull_subscribe("events.>", durable="worker", config=ConsumerConfig(max_ack_pending=100))
            messages = await pull.fetch(STORED, timeout=5)
            assert len(messages) == STORED
            for message in messages[:3]:
                await message.ack_sync()
            await nc.close()

        run(workload())
        families, samples = scrape(server)

        # Counters are parsed as counter families with their _total samples.
        assert families["semaq_stream_publishes"].type == "counter"
        assert families["semaq_jetstream_publish_ack_seconds"].type == "histogram"
        assert families["semaq_stream_messages"].type == "gauge"
        assert value(samples, "semaq_stream_publishes_total", stream="EVENTS") == STORED
        assert value(samples, "semaq_stream_refusals_total", stream="EVENTS", reason="expected") == 1
        assert sum(v for (name, _), v in samples.items() if name == "semaq_stream_refusals_total") == 1
        assert value(samples, "semaq_stream_duplicates_total", stream="EVENTS") == 0
        assert value(samples, "semaq_stream_messages", stream="EVENTS") == STORED
        assert value(samples, "semaq_stream_last_seq", stream="EVENTS") == STORED
        assert value(samples, "semaq_jetstream_publish_ack_seconds_count") == STORED + 1
        worker = {"stream": "EVENTS", "consumer": "worker"}
        assert value(samples, "semaq_consumer_ack_pending_messages", **worker) == STORED - 3
        assert value(samples, "semaq_consumer_pending_messages", **worker) == 0
        assert value(samples, "semaq_consumer_ack_floor_stream_seq", **worker) == 3

        # Subject prefixes two tokens deep (subject_depth: 2).
        assert value(samples, "semaq_subject_in_messages_total", prefix="sensors.eu") == 4
        assert value(samples, "semaq_subject_in_messages_total", prefix="sensors.us") == 2
        assert value(samples, "semaq_subject_in_messages_total", prefix="logs.app") == 3
        assert value(samples, "semaq_subject_in_bytes_total", prefix="logs.app") == 3 * len(PAYLOAD)
        assert value(samples, "semaq_subject_out_messages_total", prefix="sensors.eu") == 4
        assert value(samples, "semaq_subject_out_messages_total", prefix="sensors.us") == 2
        # Reply inboxes are one prefix, however deep: their second token is random.
        assert not any(labels and dict(labels).get("prefix", "").startswith("_INBOX.") for (_, labels) in samples)
        assert value(samples, "semaq_subject_out_messages_total", prefix="_INBOX") >= STORED + 1
        prefix_in = sum(v for (name, _), v in samples.items() if name == "semaq_subject_in_messages_total")
        assert prefix_in == value(samples, "semaq_in_messages_total")
        assert value(samples, "semaq_connections_accepted_total") == 1
        assert value(samples, "semaq_slow_consumers_total") == 0
    finally:
        server.stop()
        os.unlink(config.name)
