"""The schema registry through Confluent's own Python client (confluent-kafka's
SchemaRegistryClient), against semaq-server's monitoring port."""

import json

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

EVENT_V1 = {
    "type": "record",
    "name": "AiEvent",
    "namespace": "ai",
    "fields": [
        {"name": "model_id", "type": "string"},
        {"name": "confidence", "type": "double"},
    ],
}


def with_field(schema, field):
    changed = json.loads(json.dumps(schema))
    changed["fields"].append(field)
    return changed


@pytest.fixture
def registry(server):
    assert server.http_url, "monitoring port not logged"
    return SchemaRegistryClient({"url": server.http_url})


def avro(schema):
    return Schema(json.dumps(schema), "AVRO")


def test_register_fetch_by_id_and_list_versions(registry):
    first = registry.register_schema("ai-events-value", avro(EVENT_V1))
    v2 = with_field(EVENT_V1, {"name": "input_tokens", "type": "int", "default": 0})
    second = registry.register_schema("ai-events-value", avro(v2))
    assert second != first
    assert registry.register_schema("ai-events-value", avro(v2)) == second
    fetched = registry.get_schema(first)
    assert json.loads(fetched.schema_str) == EVENT_V1
    assert fetched.schema_type == "AVRO"
    assert registry.get_versions("ai-events-value") == [1, 2]
    latest = registry.get_latest_version("ai-events-value")
    assert (latest.schema_id, latest.version, latest.subject) == (second, 2, "ai-events-value")
    assert registry.get_subjects() == ["ai-events-value"]
    found = registry.lookup_schema("ai-events-value", avro(EVENT_V1))
    assert (found.schema_id, found.version) == (first, 1)


def test_json_schemas_register_and_come_back_typed(registry):
    schema = {"type": "object", "properties": {"confidence": {"type": "number"}}, "required": ["confidence"]}
    schema_id = registry.register_schema("scores", Schema(json.dumps(schema), "JSON"))
    fetched = registry.get_schema(schema_id)
    assert fetched.schema_type == "JSON"
    assert json.loads(fetched.schema_str) == schema
    assert "JSON" in registry.get_schema_types() and "AVRO" in registry.get_schema_types()


def test_compatibility_is_tested_and_enforced(registry):
    registry.register_schema("checked", avro(EVENT_V1))
    breaking = with_field(EVENT_V1, {"name": "input_tokens", "type": "int"})
    compatible = with_field(EVENT_V1, {"name": "input_tokens", "type": "int", "default": 0})
    assert registry.test_compatibility("checked", avro(compatible)) is True
    assert registry.test_compatibility("checked", avro(breaking)) is False
    with pytest.raises(SchemaRegistryError) as refused:
        registry.register_schema("checked", avro(breaking))
    assert refused.value.http_status_code == 409
    assert refused.value.error_code == 409
    assert "input_tokens" in refused.value.error_message


def test_confluents_errors(registry):
    with pytest.raises(SchemaRegistryError) as missing_subject:
        registry.get_versions("nowhere")
    assert missing_subject.value.error_code == 40401
    registry.register_schema("errs", avro(EVENT_V1))
    with pytest.raises(SchemaRegistryError) as missing_version:
        registry.get_version("errs", 7)
    assert missing_version.value.error_code == 40402
    with pytest.raises(SchemaRegistryError) as missing_schema:
        registry.get_schema(4242)
    assert missing_schema.value.error_code == 40403
    with pytest.raises(SchemaRegistryError) as invalid:
        registry.register_schema("errs", Schema('{"type": "recrod"}', "AVRO"))
    assert invalid.value.error_code == 42201


def test_config_and_deletes(registry):
    from confluent_kafka.schema_registry import ConfigCompatibilityLevel
    from confluent_kafka.schema_registry.schema_registry_client import ServerConfig

    registry.register_schema("cfg", avro(EVENT_V1))
    registry.set_config("cfg", ServerConfig(compatibility=ConfigCompatibilityLevel.NONE))
    assert registry.get_config("cfg").compatibility_level.value == "NONE"
    registry.register_schema("cfg", avro({"type": "string"}))
    assert registry.delete_version("cfg", 2) == 2
    assert registry.get_versions("cfg") == [1]
    assert registry.delete_subject("cfg") == [1]
    # The hard delete removes every version, the one soft-deleted before too.
    assert registry.delete_subject("cfg", permanent=True) == [1, 2]
    assert "cfg" not in registry.get_subjects()


def test_protobuf_schemas_register_and_evolve(registry):
    v1 = 'syntax = "proto3";\nmessage AiEvent {\n  string model_id = 1;\n  double confidence = 2;\n}\n'
    v2 = v1.replace("  double confidence = 2;\n", "  double confidence = 2;\n  int32 input_tokens = 3;\n")
    breaking = v1.replace("double confidence", "string confidence")
    first = registry.register_schema("proto-events", Schema(v1, "PROTOBUF"))
    assert registry.get_schema(first).schema_type == "PROTOBUF"
    assert registry.test_compatibility("proto-events", Schema(v2, "PROTOBUF")) is True
    assert registry.test_compatibility("proto-events", Schema(breaking, "PROTOBUF")) is False
    assert registry.register_schema("proto-events", Schema(v2, "PROTOBUF")) != first
    assert "PROTOBUF" in registry.get_schema_types()
