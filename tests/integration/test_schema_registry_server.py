"""The local Schema Registry (`make registry-up`: Apicurio Registry 3 on 127.0.0.1:$REGISTRY_PORT) speaks the
Confluent Schema Registry API at $SCHEMA_REGISTRY_URL (…/apis/ccompat/v7) the way Tidemark's clients expect:

- registering an Avro schema under a subject returns an id; registering the same schema again returns the same
  id and no new version;
- a second schema that evolves the first BACKWARD-compatibly (an added optional field with a default) becomes
  version 2 with a new id; `versions`, `versions/latest` and `schemas/ids/{id}` report both;
- under BACKWARD compatibility (the registry's global default, as in Confluent's) a field added without a
  default is refused with 409.

Needs the server: `make registry-up` (or scripts/registry.sh up) and SCHEMA_REGISTRY_URL from
`scripts/registry.sh env`. Without it every test here fails.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
import uuid

import pytest

pytestmark = pytest.mark.integration

URL = os.environ.get("SCHEMA_REGISTRY_URL", f"http://127.0.0.1:{os.environ.get('REGISTRY_PORT', '8081')}"
                     "/apis/ccompat/v7").rstrip("/")
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


def _call(method: str, path: str, body: dict | None = None) -> tuple[int, object]:
    """One request to the registry: (HTTP status, decoded JSON body); error statuses are returned, not raised."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"{URL}{path}", data=data, method=method,
                                     headers={"Content-Type": CONTENT_TYPE, "Accept": CONTENT_TYPE})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def _record(*extra_fields: dict) -> str:
    return json.dumps({"type": "record", "name": "Order", "namespace": "io.tidemark.test",
                       "fields": [{"name": "id", "type": "long"}, {"name": "amount", "type": "double"},
                                  *extra_fields]})


V1 = _record()
V2 = _record({"name": "note", "type": ["null", "string"], "default": None})  # optional, with a default


@pytest.fixture(scope="session")
def registry() -> str:
    """The registry's ccompat URL; fails (never skips) when none answers."""
    try:
        status, _ = _call("GET", "/subjects")
    except OSError as exc:
        status = exc
    if status != 200:
        pytest.fail(f"no Schema Registry answers GET {URL}/subjects ({status}); run `make registry-up` and export "
                    "SCHEMA_REGISTRY_URL from `scripts/registry.sh env` first")
    return URL


@pytest.fixture
def subject(registry) -> str:
    return urllib.parse.quote(f"tidemark-test-{uuid.uuid4().hex[:12]}-value", safe="")


def _register(subject: str, schema: str) -> tuple[int, object]:
    return _call("POST", f"/subjects/{subject}/versions", {"schema": schema})


def test_two_versions_of_an_avro_schema_under_one_subject(subject):
    status, first = _register(subject, V1)
    assert status == 200, first
    assert isinstance(first, dict) and isinstance(first["id"], int), first
    assert _register(subject, V1) == (200, {"id": first["id"]})  # the same schema: the same id, no new version

    status, second = _register(subject, V2)
    assert status == 200, second
    assert isinstance(second["id"], int) and second["id"] != first["id"], (first, second)

    assert _call("GET", f"/subjects/{subject}/versions") == (200, [1, 2])
    status, latest = _call("GET", f"/subjects/{subject}/versions/latest")
    assert status == 200, latest
    assert latest["subject"] == urllib.parse.unquote(subject)
    assert (latest["version"], latest["id"]) == (2, second["id"])
    assert json.loads(latest["schema"]) == json.loads(V2)
    assert latest.get("schemaType", "AVRO") == "AVRO"  # Confluent leaves schemaType out for Avro

    for registered, text in ((first, V1), (second, V2)):
        status, by_id = _call("GET", f"/schemas/ids/{registered['id']}")
        assert status == 200, by_id
        assert json.loads(by_id["schema"]) == json.loads(text)
    status, version_1 = _call("GET", f"/subjects/{subject}/versions/1")
    assert status == 200 and version_1["id"] == first["id"], version_1


def test_backward_compatibility_refuses_a_new_field_without_a_default(subject):
    status, config = _call("PUT", f"/config/{subject}", {"compatibility": "BACKWARD"})
    assert status == 200 and config["compatibility"] == "BACKWARD", config
    assert _register(subject, V1)[0] == 200
    assert _register(subject, V2)[0] == 200

    required = _record({"name": "note", "type": ["null", "string"], "default": None},
                       {"name": "quantity", "type": "int"})  # required, no default: old data cannot be read
    status, check = _call("POST", f"/compatibility/subjects/{subject}/versions/latest", {"schema": required})
    assert (status, check) == (200, {"is_compatible": False})
    status, refused = _register(subject, required)
    assert status == 409, refused
    assert refused["error_code"] == 409, refused
    assert _call("GET", f"/subjects/{subject}/versions") == (200, [1, 2])
