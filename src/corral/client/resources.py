"""The API's routes by resource, each declared once for both clients (see endpoint.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, Unpack

from corral.client.deployments import Deployments
from corral.client.endpoint import (
    Call,
    Later,
    M,
    Resource,
    Runner,
    Stream,
    as_dict,
    endpoint,
    many,
    nothing,
    one,
    query,
    seg,
    streaming,
)
from corral.client.requests import (
    GroupChanges,
    Json,
    PriorityRules,
    ProjectChanges,
    RetryPolicy,
    SessionRequest,
    UserChanges,
    WebhookChanges,
)

if TYPE_CHECKING:
    from corral.client import models as m
else:
    m = Later("corral.client.models")  # read when an answer is: `Client.raw` never loads them


class Sessions(Resource[M]):
    @endpoint
    def submit(self, **spec: Unpack[SessionRequest]) -> Call[m.Session]:
        """Create a session. With the same `creation_id` again, the earlier session is returned."""
        return Call("POST", "/sessions", one(m.Session), body=dict(spec))

    @endpoint
    def submit_many(self, specs: list[SessionRequest]) -> Call[m.Bulk]:
        """Create up to 1000 sessions in one transaction: all of them, or none."""
        return Call("POST", "/sessions/bulk", one(m.Bulk), body={"sessions": specs})

    @endpoint
    def counts(self) -> Call[dict[str, int]]:
        return Call("GET", "/sessions/counts", as_dict)

    @endpoint
    def get(self, session_id: str) -> Call[m.Session]:
        """One session by id (or a unique prefix of 8 or more characters)."""
        return Call("GET", f"/sessions/{seg(session_id)}", one(m.Session))

    @endpoint
    def attempts(self, session_id: str) -> Call[list[m.Session]]:
        """Every attempt of the session's retry chain, first to last."""
        return Call("GET", f"/sessions/{seg(session_id)}/attempts", many(m.Session))

    @endpoint
    def kernels(self, session_id: str) -> Call[list[m.Kernel]]:
        return Call("GET", f"/sessions/{seg(session_id)}/kernels", many(m.Kernel))

    @endpoint
    def history(self, session_id: str) -> Call[list[m.HistoryEntry]]:
        """Its status changes, each with the handler that made it."""
        return Call("GET", f"/sessions/{seg(session_id)}/history", many(m.HistoryEntry))

    @endpoint
    def errors(self, session_id: str) -> Call[list[m.ErrorRecord]]:
        """Every failed worker's error record, the root cause first."""
        return Call("GET", f"/sessions/{seg(session_id)}/errors", many(m.ErrorRecord))

    @endpoint
    def logs(self, session_id: str, after: int = 0, max_bytes: int | None = None) -> Call[m.LogPage]:
        """One page of its output; pass the page's `next` as `after` for the following one."""
        params = query(after=after, max_bytes=max_bytes)
        return Call("GET", f"/sessions/{seg(session_id)}/logs", one(m.LogPage), params)

    @streaming
    def stream_logs(self, session_id: str, kernel: int = 0, after: str | None = None) -> Stream[m.LogOutput]:
        """One kernel's output (by rank) as it is written, until the session has ended and all of it
        has been read: from the start, or after a piece's `position`; a dropped connection goes on
        from where it stopped, nothing missed or repeated."""
        path = f"/sessions/{seg(session_id)}/logs/stream"
        return Stream(path, one(m.LogOutput), query(kernel=kernel), after, end="end")

    @endpoint
    def cancel(self, session_id: str) -> Call[m.Session]:
        return Call("POST", f"/sessions/{seg(session_id)}/cancel", one(m.Session))

    @endpoint
    def retry(self, session_id: str, force: bool = False) -> Call[m.Session]:
        """A new attempt after the chain's latest (ended) one; a chain that succeeded needs `force`."""
        return Call("POST", f"/sessions/{seg(session_id)}/retry", one(m.Session), query(force=force or None))

    @endpoint
    def list(
        self, status: list[str] | None = None, limit: int = 100, offset: int = 0, array: str | None = None
    ) -> Call[list[m.Session]]:
        """The caller's visible sessions, newest first (an array's elements by index)."""
        params = query(status=status, limit=limit, offset=offset or None, array=array)
        return Call("GET", "/sessions", many(m.Session), params)


class Arrays(Resource[M]):
    @endpoint
    def submit(self, indices: str, **spec: Unpack[SessionRequest]) -> Call[m.Array]:
        """A job array: one session per index of `indices` ("0-9", "1,3,5-7", "0-99%10")."""
        return Call("POST", "/sessions", one(m.Array), body={**spec, "array": indices})

    @endpoint
    def get(self, array_id: str) -> Call[m.Array]:
        return Call("GET", f"/arrays/{seg(array_id)}", one(m.Array))

    @endpoint
    def cancel(self, array_id: str) -> Call[m.Array]:
        return Call("POST", f"/arrays/{seg(array_id)}/cancel", one(m.Array))

    @endpoint
    def retry(self, array_id: str) -> Call[m.Array]:
        """Retry every element whose latest attempt failed."""
        return Call("POST", f"/arrays/{seg(array_id)}/retry", one(m.Array))


class Agents(Resource[M]):
    @endpoint
    def list(self) -> Call[list[m.Agent]]:
        """Every agent with its capacity, usage and liveness (admin)."""
        return Call("GET", "/agents", many(m.Agent))


class Policies(Resource[M]):
    @endpoint
    def apply(self, document: Json) -> Call[m.Policy]:
        """Create or replace a named retry policy from its document (`kind: RetryPolicy`)."""
        return Call("POST", "/retry-policies", one(m.Policy), body=document)

    @endpoint
    def get(self, name: str) -> Call[m.Policy]:
        return Call("GET", f"/retry-policies/{seg(name)}", one(m.Policy))

    @endpoint
    def delete(self, name: str) -> Call[None]:
        return Call("DELETE", f"/retry-policies/{seg(name)}", nothing)

    @endpoint
    def list(self) -> Call[list[m.Policy]]:
        return Call("GET", "/retry-policies", many(m.Policy))


class Groups(Resource[M]):
    @endpoint
    def get(self, name: str) -> Call[m.Group]:
        return Call("GET", f"/resource-groups/{seg(name)}", one(m.Group))

    @endpoint
    def update(self, name: str, **changes: Unpack[GroupChanges]) -> Call[m.Group]:
        """Change a group's preemption settings (admin); effective from the next cycle."""
        return Call("PATCH", f"/resource-groups/{seg(name)}", one(m.Group), body=dict(changes))

    @endpoint
    def list(self) -> Call[list[m.Group]]:
        return Call("GET", "/resource-groups", many(m.Group))


class Projects(Resource[M]):
    @endpoint
    def create(
        self,
        name: str,
        retry_defaults: RetryPolicy | None = None,
        retry_policies: list[str] | None = None,
        priority_rules: PriorityRules | None = None,
    ) -> Call[m.Project]:
        given = {"name": name, "retry_defaults": retry_defaults, "priority_rules": priority_rules}
        body: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
        if retry_policies is not None:
            body["retry_policies"] = retry_policies
        return Call("POST", "/projects", one(m.Project), body=body)

    @endpoint
    def get(self, name: str) -> Call[m.Project]:
        return Call("GET", f"/projects/{seg(name)}", one(m.Project))

    @endpoint
    def update(self, name: str, **changes: Unpack[ProjectChanges]) -> Call[m.Project]:
        """Only the fields given change; `priority_rules` merge field by field, None clears."""
        return Call("PATCH", f"/projects/{seg(name)}", one(m.Project), body=dict(changes))

    @endpoint
    def list(self) -> Call[list[m.Project]]:
        return Call("GET", "/projects", many(m.Project))


class Users(Resource[M]):
    @endpoint
    def create(self, name: str, role: str = "user", projects: list[str] | None = None) -> Call[m.CreatedUser]:
        """A user and their first API key (shown this once, in `.key.key`)."""
        body = {"name": name, "role": role, "projects": projects or []}
        return Call("POST", "/users", one(m.CreatedUser), body=body)

    @endpoint
    def get(self, name: str) -> Call[m.User]:
        return Call("GET", f"/users/{seg(name)}", one(m.User))

    @endpoint
    def update(self, name: str, **changes: Unpack[UserChanges]) -> Call[m.User]:
        return Call("PATCH", f"/users/{seg(name)}", one(m.User), body=dict(changes))

    @endpoint
    def create_key(self, name: str) -> Call[m.NewKey]:
        return Call("POST", f"/users/{seg(name)}/keys", one(m.NewKey))

    @endpoint
    def keys(self, name: str) -> Call[list[m.Key]]:
        return Call("GET", f"/users/{seg(name)}/keys", many(m.Key))

    @endpoint
    def revoke_key(self, name: str, key_id: str) -> Call[None]:
        return Call("DELETE", f"/users/{seg(name)}/keys/{seg(key_id)}", nothing)

    @endpoint
    def me(self) -> Call[m.Me]:
        """Who the caller is: role, projects, and the priority rules that apply to them."""
        return Call("GET", "/me", one(m.Me))

    @endpoint
    def list(self) -> Call[list[m.User]]:
        return Call("GET", "/users", many(m.User))


class Cluster(Resource[M]):
    @endpoint
    def config(self) -> Call[dict[str, Any]]:
        """The cluster's retry settings and failure categories (admin)."""
        return Call("GET", "/cluster-config", as_dict)

    @endpoint
    def configure(self, changes: Json) -> Call[dict[str, Any]]:
        """Change the fields given, e.g. `{"retry": {"enabled": False}}` (admin)."""
        return Call("PATCH", "/cluster-config", as_dict, body=changes)

    @endpoint
    def audit(self, after: int = 0, limit: int = 100, action: str | None = None) -> Call[list[m.AuditEntry]]:
        """Administrative changes, oldest first (admin)."""
        return Call("GET", "/audit", many(m.AuditEntry), query(after=after, limit=limit, action=action))


class Events(Resource[M]):
    @endpoint
    def list(
        self,
        after: str | None = None,
        type: list[str] | None = None,
        session: str | None = None,
        limit: int = 100,
        wait: float = 0,
        newest: bool = False,
        array: str | None = None,
        project: str | None = None,
    ) -> Call[list[m.Event]]:
        """Events after the position `after` (an event's `position`; None: from the first), in
        commit order; `type` takes globs (`session.retry_*`); `wait` seconds (≤ 30) for one."""
        params = query(
            after=after or None,
            type=type,
            session=session,
            array=array,
            project=project,
            limit=limit,
            wait=wait or None,
        )
        if newest:
            params["newest"] = "true"
        return Call("GET", "/events", many(m.Event), params)


class Webhooks(Resource[M]):
    @endpoint
    def create(
        self,
        url: str,
        events: list[str],
        project: str | None = None,
        description: str = "",
        enabled: bool = True,
    ) -> Call[m.CreatedWebhook]:
        """Events matching `events` (globs) are POSTed to `url`, signed; the answer alone shows
        the secret to verify them with."""
        body: dict[str, Any] = {"url": url, "events": events, "description": description, "enabled": enabled}
        if project is not None:
            body["project"] = project
        return Call("POST", "/webhooks", one(m.CreatedWebhook), body=body)

    @endpoint
    def get(self, webhook_id: str) -> Call[m.Webhook]:
        return Call("GET", f"/webhooks/{seg(webhook_id)}", one(m.Webhook))

    @endpoint
    def update(self, webhook_id: str, **changes: Unpack[WebhookChanges]) -> Call[m.Webhook]:
        """Only the fields given change; `enabled=True` on a disabled one retries at once."""
        return Call("PATCH", f"/webhooks/{seg(webhook_id)}", one(m.Webhook), body=dict(changes))

    @endpoint
    def delete(self, webhook_id: str) -> Call[None]:
        return Call("DELETE", f"/webhooks/{seg(webhook_id)}", nothing)

    @endpoint
    def rotate_secret(self, webhook_id: str) -> Call[m.CreatedWebhook]:
        """A new secret; the old one signs beside it for 24 h."""
        return Call("POST", f"/webhooks/{seg(webhook_id)}/rotate-secret", one(m.CreatedWebhook))

    @endpoint
    def test(self, webhook_id: str) -> Call[dict[str, Any]]:
        """Queue a `webhook.test` event for this webhook alone (see `deliveries`)."""
        return Call("POST", f"/webhooks/{seg(webhook_id)}/test", as_dict)

    @endpoint
    def deliveries(
        self, webhook_id: str, limit: int = 100, status: str | None = None
    ) -> Call[list[m.Delivery]]:
        """Its deliveries, the latest first."""
        params = query(limit=limit, status=status)
        return Call("GET", f"/webhooks/{seg(webhook_id)}/deliveries", many(m.Delivery), params)

    @endpoint
    def redeliver(self, webhook_id: str, event_id: int) -> Call[m.Delivery]:
        """Send an event again, with the same `webhook-id`."""
        path = f"/webhooks/{seg(webhook_id)}/deliveries/{int(event_id)}/redeliver"
        return Call("POST", path, one(m.Delivery))

    @endpoint
    def list(self) -> Call[list[m.Webhook]]:
        return Call("GET", "/webhooks", many(m.Webhook))


class Resources(Generic[M]):
    """Every resource of a client, on the runner given (the client itself, or its raw view)."""

    def __init__(self, runner: Runner) -> None:
        self.sessions: Sessions[M] = Sessions(runner)
        self.arrays: Arrays[M] = Arrays(runner)
        self.agents: Agents[M] = Agents(runner)
        self.policies: Policies[M] = Policies(runner)
        self.groups: Groups[M] = Groups(runner)
        self.projects: Projects[M] = Projects(runner)
        self.users: Users[M] = Users(runner)
        self.cluster: Cluster[M] = Cluster(runner)
        self.events: Events[M] = Events(runner)
        self.webhooks: Webhooks[M] = Webhooks(runner)
        self.deployments: Deployments[M] = Deployments(runner)
