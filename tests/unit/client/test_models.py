"""Each result type holds exactly the fields of its response schema in the app's OpenAPI document,
so a field the server adds or renames fails here, not in a user's script."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from corral.client import models as m
from tests.unit.client.conftest import app_at

SCHEMAS: dict[type[BaseModel], str] = {
    m.Session: "SessionOut",
    m.Kernel: "KernelOut",
    m.Waiting: "WaitingOut",
    m.ErrorRecord: "ErrorRecordOut",
    m.HistoryEntry: "HistoryOut",
    m.LogChunk: "LogChunkOut",
    m.LogPage: "LogsOut",
    m.Array: "ArrayOut",
    m.BulkItem: "BulkItemOut",
    m.Bulk: "BulkOut",
    m.Agent: "AgentOut",
    m.Policy: "PolicyOut",
    m.Webhook: "WebhookOut",
    m.CreatedWebhook: "WebhookSecretOut",
    m.Delivery: "DeliveryOut",
    m.Group: "GroupOut",
    m.Project: "ProjectOut",
    m.User: "UserOut",
    m.Key: "KeyOut",
    m.NewKey: "NewKeyOut",
    m.CreatedUser: "CreatedUserOut",
    m.Me: "MeOut",
    m.Event: "EventOut",
    m.AuditEntry: "AuditOut",
    m.Deployment: "DeploymentOut",
    m.Route: "RouteOut",
    m.DeploymentHistoryEntry: "DeploymentHistoryOut",
}
AGENT_WIRE = {"RegisterOut", "OrdersOut", "HealthOut", "ReportsOut", "ReplicasOut"}


@pytest.fixture(scope="module")
def components(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    app = app_at(Path(tmp_path_factory.mktemp("openapi")))
    return app.openapi()["components"]["schemas"]


@pytest.mark.parametrize("model", list(SCHEMAS), ids=lambda t: t.__name__)
def test_a_result_type_has_its_schemas_fields(model: type[BaseModel], components: dict[str, dict]) -> None:
    schema = components[SCHEMAS[model] + "-Output"] if SCHEMAS[model] + "-Output" in components else None
    schema = schema or components[SCHEMAS[model]]
    ours = {f.alias or name for name, f in model.model_fields.items()}
    assert ours == set(schema["properties"]), f"{model.__name__} vs {SCHEMAS[model]}"
    required = {f.alias or name for name, f in model.model_fields.items() if f.is_required()}
    assert required <= set(schema.get("required", [])), f"{model.__name__} requires what the API may omit"


def test_every_response_schema_has_a_result_type(components: dict[str, dict]) -> None:
    """A new `…Out` schema the client does not read yet fails here (the agents' wire is protocol/'s)."""
    outs = {n.removesuffix("-Output") for n in components if n.removesuffix("-Output").endswith("Out")}
    assert outs - AGENT_WIRE == set(SCHEMAS.values())
