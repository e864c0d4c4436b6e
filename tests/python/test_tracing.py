"""OpenTelemetry traces through semaq-server, read the way a collector reads them: an OTLP/HTTP
receiver inside the test (POST /v1/traces) decodes each body with the official protobuf
definitions (opentelemetry-proto). A publisher sends a `traceparent` for its own span; the
broker's publish, store and deliver spans join that trace, and the `traceparent` a consumer
receives names the broker's deliver span as its parent."""

import asyncio
import http.server
import secrets
import threading
import time

import nats
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from conftest import Server

SPANS_TIMEOUT = 10


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, timeout=30))


class Collector:
    """An OTLP/HTTP trace receiver on a random port, keeping every request it decodes."""

    def __init__(self):
        self.requests = []
        self.lock = threading.Lock()
        collector = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                with collector.lock:
                    collector.requests.append((self.path, dict(self.headers), request))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.http.serve_forever, daemon=True).start()
        self.endpoint = f"http://127.0.0.1:{self.http.server_address[1]}"

    def spans(self, trace_id=None):
        """Every span received (of `trace_id` when given), with its resource's attributes."""
        found = []
        with self.lock:
            for _, _, request in self.requests:
                for resource_spans in request.resource_spans:
                    resource = attributes(resource_spans.resource)
                    for scope_spans in resource_spans.scope_spans:
                        for span in scope_spans.spans:
                            if trace_id is None or span.trace_id == trace_id:
                                found.append((resource, span))
        return found

    def wait_for(self, trace_id, names):
        """The spans of `trace_id` once one of each name in `names` has arrived."""
        deadline = time.monotonic() + SPANS_TIMEOUT
        while True:
            spans = [span for _, span in self.spans(trace_id)]
            if all(any(span.name == name for span in spans) for name in names):
                return spans
            assert time.monotonic() < deadline, f"spans {names} not received; got {[s.name for s in spans]}"
            time.sleep(0.05)

    def close(self):
        self.http.shutdown()
        self.http.server_close()


def attributes(holder):
    values = {}
    for pair in holder.attributes:
        value = pair.value
        values[pair.key] = getattr(value, value.WhichOneof("value")) if value.WhichOneof("value") else None
    return values


def one(spans, name):
    named = [span for span in spans if span.name == name]
    assert len(named) == 1, f"{name}: {[s.name for s in spans]}"
    return named[0]


def publisher_context():
    """A publisher's own span: its trace id and span id, and the traceparent naming it."""
    trace_id, span_id = secrets.token_bytes(16), secrets.token_bytes(8)
    return trace_id, span_id, f"00-{trace_id.hex()}-{span_id.hex()}-01"


def parent_of(traceparent):
    """(trace id, parent span id) of a delivered `traceparent`."""
    version, trace_id, span_id, flags = traceparent.split("-")
    assert (version, flags) == ("00", "01"), traceparent
    return bytes.fromhex(trace_id), bytes.fromhex(span_id)


@pytest.fixture
def collector():
    running = Collector()
    yield running
    running.close()


@pytest.fixture
def traced_server(collector):
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint,
        "OTEL_EXPORTER_OTLP_HEADERS": "x-api-key=secret",
        "OTEL_SERVICE_NAME": "semaq-under-test",
    }
    running = Server(env=env)
    yield running
    running.stop()


def test_a_core_delivery_joins_the_publishers_trace(traced_server, collector):
    trace_id, publisher_span, traceparent = publisher_context()

    async def scenario():
        nc = await nats.connect(traced_server.url)
        sub = await nc.subscribe("orders.*")
        await nc.flush()
        headers = {"traceparent": traceparent, "Nats-Msg-Id": "order-1", "App": "kept"}
        await nc.publish("orders.new", b"hello", headers=headers)
        message = await sub.next_msg(timeout=5)
        await nc.close()
        return message

    message = run(scenario())
    assert message.headers["App"] == "kept"
    assert message.headers["Nats-Msg-Id"] == "order-1"
    delivered_trace, delivered_parent = parent_of(message.headers["traceparent"])
    assert delivered_trace == trace_id

    spans = collector.wait_for(trace_id, ["publish orders.new", "deliver orders.new"])
    publish = one(spans, "publish orders.new")
    deliver = one(spans, "deliver orders.new")
    assert publish.parent_span_id == publisher_span
    assert publish.kind == Span.SPAN_KIND_SERVER
    published = attributes(publish)
    assert published["messaging.system"] == "nats"
    assert published["messaging.destination.name"] == "orders.new"
    assert published["messaging.operation.type"] == "receive"
    assert published["messaging.operation.name"] == "publish"
    assert published["messaging.message.id"] == "order-1"
    assert published["messaging.message.body.size"] == 5
    assert publish.end_time_unix_nano >= publish.start_time_unix_nano > 0

    assert deliver.parent_span_id == publish.span_id
    assert deliver.span_id == delivered_parent, "the consumer's parent is the broker's deliver span"
    assert deliver.kind == Span.SPAN_KIND_PRODUCER
    delivered = attributes(deliver)
    assert delivered["messaging.operation.type"] == "send"
    assert delivered["messaging.operation.name"] == "deliver"
    assert delivered["messaging.destination.subscription.name"] == "orders.*"
    assert [(link.trace_id, link.span_id) for link in deliver.links] == [(trace_id, publisher_span)]

    resource, _ = collector.spans(trace_id)[0]
    assert resource["service.name"] == "semaq-under-test"
    path, request_headers, _ = collector.requests[0]
    assert path == "/v1/traces"
    assert request_headers.get("x-api-key") == "secret"
    assert request_headers.get("Content-Type") == "application/x-protobuf"


def test_a_jetstream_delivery_joins_the_publishers_trace(traced_server, collector):
    trace_id, publisher_span, traceparent = publisher_context()

    async def scenario():
        nc = await nats.connect(traced_server.url)
        js = nc.jetstream()
        await js.add_stream(name="TRACED", subjects=["traced.>"])
        ack = await js.publish("traced.one", b"stored", headers={"traceparent": traceparent, "Nats-Msg-Id": "t-1"})
        assert ack.seq == 1
        consumer = await js.pull_subscribe("traced.>", durable="worker")
        messages = await consumer.fetch(1, timeout=5)
        await messages[0].ack()
        await nc.close()
        return messages[0]

    message = run(scenario())
    delivered_trace, delivered_parent = parent_of(message.headers["traceparent"])
    assert delivered_trace == trace_id
    assert message.headers["Nats-Msg-Id"] == "t-1"

    spans = collector.wait_for(trace_id, ["publish traced.one", "store TRACED", "deliver traced.one"])
    publish = one(spans, "publish traced.one")
    store = one(spans, "store TRACED")
    deliver = one(spans, "deliver traced.one")
    assert publish.parent_span_id == publisher_span
    assert store.parent_span_id == publish.span_id
    assert store.kind == Span.SPAN_KIND_INTERNAL
    assert store.end_time_unix_nano >= store.start_time_unix_nano >= publish.start_time_unix_nano
    stored = attributes(store)
    assert stored["messaging.operation.type"] == "process"
    assert stored["messaging.operation.name"] == "store"
    assert stored["messaging.nats.stream.sequence"] == 1
    assert stored["semaq.stream"] == "TRACED"
    assert stored["messaging.message.id"] == "t-1"
    assert [(link.trace_id, link.span_id) for link in store.links] == [(trace_id, publisher_span)]

    assert deliver.span_id == delivered_parent, "the consumer's parent is the broker's deliver span"
    assert deliver.parent_span_id == publisher_span
    assert deliver.kind == Span.SPAN_KIND_PRODUCER
    delivered = attributes(deliver)
    assert delivered["messaging.nats.stream.sequence"] == 1
    assert delivered["messaging.consumer.group.name"] == "worker"
    assert delivered["messaging.system"] == "nats"


def test_with_tracing_off_nothing_is_exported_and_traceparent_is_untouched(collector):
    server = Server()
    try:
        _, _, traceparent = publisher_context()

        async def scenario():
            nc = await nats.connect(server.url)
            sub = await nc.subscribe("quiet")
            await nc.flush()
            await nc.publish("quiet", b"x", headers={"traceparent": traceparent})
            message = await sub.next_msg(timeout=5)
            await nc.close()
            return message

        message = run(scenario())
        assert message.headers["traceparent"] == traceparent
        time.sleep(1)
        assert collector.requests == []
    finally:
        server.stop()
