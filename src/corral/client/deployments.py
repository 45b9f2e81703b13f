"""The deployment routes, declared once for both clients (see endpoint.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from corral.client.endpoint import Call, Later, M, Resource, endpoint, many, one, seg
from corral.client.requests import Json

if TYPE_CHECKING:
    from corral.client import models as m
else:
    m = Later("corral.client.models")


class Deployments(Resource[M]):
    @endpoint
    def create(self, body: Json) -> Call[m.Deployment]:
        """`body` as POST /deployments takes it: name, replicas, session, health, rollout fields."""
        return Call("POST", "/deployments", one(m.Deployment), body=body)

    @endpoint
    def get(self, name: str) -> Call[m.Deployment]:
        return Call("GET", f"/deployments/{seg(name)}", one(m.Deployment))

    @endpoint
    def update(self, name: str, changes: Json) -> Call[m.Deployment]:
        """Only the fields given change; a new `session` or `health` rolls out a new revision."""
        return Call("PATCH", f"/deployments/{seg(name)}", one(m.Deployment), body=changes)

    @endpoint
    def scale(self, name: str, replicas: int) -> Call[m.Deployment]:
        return Call("PATCH", f"/deployments/{seg(name)}", one(m.Deployment), body={"replicas": replicas})

    @endpoint
    def undo(self, name: str) -> Call[m.Deployment]:
        """Roll back to the revision before the current one (as a new revision)."""
        return Call("POST", f"/deployments/{seg(name)}/rollout/undo", one(m.Deployment))

    @endpoint
    def delete(self, name: str) -> Call[m.Deployment]:
        """Drain and stop every replica; the deployment ends DESTROYED."""
        return Call("DELETE", f"/deployments/{seg(name)}", one(m.Deployment))

    @endpoint
    def routes(self, name: str) -> Call[list[m.Route]]:
        return Call("GET", f"/deployments/{seg(name)}/routes", many(m.Route))

    @endpoint
    def history(self, name: str) -> Call[list[m.DeploymentHistoryEntry]]:
        return Call("GET", f"/deployments/{seg(name)}/history", many(m.DeploymentHistoryEntry))

    @endpoint
    def list(self) -> Call[list[m.Deployment]]:  # last: the name shadows `list` below it
        return Call("GET", "/deployments", many(m.Deployment))


def spec_of(document: Any) -> Json:
    """The POST body of a `kind: Deployment` document (`apiVersion: corral/v1`, `metadata.name`,
    `spec`); ValueError saying what is wrong."""
    if not isinstance(document, dict):
        raise ValueError("a deployment document is a mapping (apiVersion, kind, metadata, spec)")
    if document.get("apiVersion") != "corral/v1" or document.get("kind") != "Deployment":
        raise ValueError("expected apiVersion: corral/v1 and kind: Deployment")
    meta, spec = document.get("metadata"), document.get("spec")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
        raise ValueError("metadata.name: give the deployment's name")
    if not isinstance(spec, dict):
        raise ValueError("spec: give the deployment's spec (replicas, session, health, ...)")
    if "name" in spec and spec["name"] != meta["name"]:
        raise ValueError("spec.name differs from metadata.name: give the name once, in metadata")
    return {**spec, "name": meta["name"]}
