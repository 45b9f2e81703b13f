"""The deployment and route handlers, in the order a cycle runs them: routes first, so that the
deployments' handlers judge routes as this cycle left them."""

from __future__ import annotations

from corral.manager.deployment_handlers.apply_deletion import ApplyDeletion
from corral.manager.deployment_handlers.base import DeploymentHandler as DeploymentHandler
from corral.manager.deployment_handlers.base import RouteHandler as RouteHandler
from corral.manager.deployment_handlers.check_pending_deployment import CheckPendingDeployment
from corral.manager.deployment_handlers.check_replica_deployment import CheckReplicaDeployment
from corral.manager.deployment_handlers.destroying_deployment import DestroyingDeployment
from corral.manager.deployment_handlers.drain_route import DrainRoute
from corral.manager.deployment_handlers.health_check_route import HealthCheckRoute
from corral.manager.deployment_handlers.provisioning_route import ProvisioningRoute
from corral.manager.deployment_handlers.reconcile_deployment import ReconcileDeployment
from corral.manager.deployment_handlers.route_eviction import RouteEviction
from corral.manager.deployment_handlers.running_route import RunningRoute
from corral.manager.deployment_handlers.scaling_deployment import ScalingDeployment
from corral.manager.deployment_handlers.service_discovery_sync import ServiceDiscoverySync
from corral.manager.deployment_handlers.terminating_route import TerminatingRoute


def cycle_handlers() -> list[RouteHandler | DeploymentHandler]:
    return [
        ProvisioningRoute(),
        HealthCheckRoute(),
        ServiceDiscoverySync(),
        RunningRoute(),
        RouteEviction(),
        DrainRoute(),
        TerminatingRoute(),
        ApplyDeletion(),
        CheckPendingDeployment(),
        CheckReplicaDeployment(),
        ReconcileDeployment(),
        ScalingDeployment(),
        DestroyingDeployment(),
    ]
