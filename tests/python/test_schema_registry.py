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


ADDRESS = {
    "type": "record",
    "name": "Address",
    "namespace": "geo",
    "fields": [{"name": "city", "type": "string"}],
}
ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [{"name": "id", "type": "long"}, {"name": "ship_to", "type": "geo.Address"}],
}


def test_a_schema_with_references_registers_and_protects_what_it_refers_to(registry):
    from confluent_kafka.schema_registry import SchemaReference

    address_id = registry.register_schema("geo-address", avro(ADDRESS))
    order = Schema(json.dumps(ORDER), "AVRO", [SchemaReference("geo.Address", "geo-address", 1)])
    order_id = registry.register_schema("orders-value", order)
    assert order_id != address_id
    fetched = registry.get_schema(order_id)
    assert [(r.name, r.subject, r.version) for r in fetched.references] == [("geo.Address", "geo-address", 1)]
    latest = registry.get_latest_version("orders-value")
    assert latest.schema.references[0].subject == "geo-address"
    assert registry.lookup_schema("orders-value", order).schema_id == order_id
    assert registry.get_referenced_by("geo-address", 1) == [order_id]
    with pytest.raises(SchemaRegistryError) as refused:
        registry.delete_version("geo-address", 1)
    assert refused.value.error_code == 42206
    # An order that changes the referenced type's field type is checked through the reference.
    broken = dict(ORDER, fields=[{"name": "id", "type": "string"}, ORDER["fields"][1]])
    breaking = Schema(json.dumps(broken), "AVRO", [SchemaReference("geo.Address", "geo-address", 1)])
    assert registry.test_compatibility("orders-value", breaking) is False
    with pytest.raises(SchemaRegistryError) as unresolved:
        registry.register_schema("lost", Schema(json.dumps(ORDER), "AVRO", [SchemaReference("geo.Address", "none", 1)]))
    assert unresolved.value.error_code == 42201


def test_protobuf_and_json_schema_references(registry):
    from confluent_kafka.schema_registry import SchemaReference

    address = 'syntax = "proto3";\npackage geo;\nmessage Address { string city = 1; }\n'
    order = (
        'syntax = "proto3";\npackage shop;\nimport "geo/address.proto";\n'
        "message Order { int64 id = 1; geo.Address ship_to = 2; }\n"
    )
    registry.register_schema("geo-address-proto", Schema(address, "PROTOBUF"))
    reference = SchemaReference("geo/address.proto", "geo-address-proto", 1)
    order_id = registry.register_schema("orders-proto", Schema(order, "PROTOBUF", [reference]))
    assert registry.get_schema(order_id).references[0].name == "geo/address.proto"

    city = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    registry.register_schema("city-json", Schema(json.dumps(city), "JSON"))
    shipment = {"type": "object", "properties": {"to": {"$ref": "city.json"}}}
    json_reference = SchemaReference("city.json", "city-json", 1)
    shipment_id = registry.register_schema("shipments", Schema(json.dumps(shipment), "JSON", [json_reference]))
    assert registry.get_referenced_by("city-json", "latest") == [shipment_id]


def test_modes_refuse_writes_and_report_themselves(registry):
    registry.register_schema("frozen", avro(EVENT_V1))
    assert registry.get_global_mode() == "READWRITE"
    assert registry.update_mode("frozen", "READONLY") == "READONLY"
    assert registry.get_mode("frozen") == "READONLY"
    v2 = with_field(EVENT_V1, {"name": "input_tokens", "type": "int", "default": 0})
    with pytest.raises(SchemaRegistryError) as refused:
        registry.register_schema("frozen", avro(v2))
    assert refused.value.error_code == 42205
    assert refused.value.http_status_code == 422
    assert registry.delete_mode("frozen") == "READONLY"
    assert registry.register_schema("frozen", avro(v2)) > 0
    with pytest.raises(SchemaRegistryError) as no_import:
        registry.update_global_mode("IMPORT")
    assert no_import.value.error_code == 42205


def test_listings_contexts_and_config(registry):
    first = registry.register_schema("orders-value", avro(EVENT_V1))
    registry.register_schema("users-value", avro({"type": "string"}))
    assert registry.get_contexts() == ["."]
    assert registry.get_subjects(subject_prefix="orders") == ["orders-value"]
    registry.delete_subject("users-value")
    assert registry.get_subjects(deleted=True) == ["orders-value", "users-value"]
    assert registry.get_subjects(deleted_only=True) == ["users-value"]
    versions = registry.get_schema_versions(first)
    assert [(v.subject, v.version) for v in versions] == [("orders-value", 1)]
    assert registry.get_subjects_by_schema_id(first) == ["orders-value"]
    # normalize=true: another spelling of the same schema finds it.
    spelled = dict(EVENT_V1, fields=[{"name": "model_id", "type": {"type": "string"}}, EVENT_V1["fields"][1]])
    normalized = registry.register_schema("normalized", avro(EVENT_V1), normalize_schemas=True)
    assert registry.lookup_schema("normalized", avro(spelled), normalize_schemas=True).schema_id == normalized
    assert registry.set_compatibility("orders-value", "FULL") == {"compatibility": "FULL"}
    assert registry.delete_config("orders-value").compatibility_level.value == "FULL"
    assert registry.get_compatibility() == "BACKWARD"
