"""Several operator replicas, one at work: kopf's peering (docs/operator.md).

Every replica keeps its own entry alive in one shared KopfPeering object (ClusterKopfPeering
when cluster-wide); a replica that sees a live entry of higher priority pauses, and a paused
one resumes when the entries above it expire, at most ``lifetime`` seconds after their owner
stopped renewing them (a SIGKILLed pod). A replica that stops gracefully removes its entry,
so the next one resumes at once.

The default priority is below zero and lower the later a replica starts: the oldest replica
works, a pod started by a rollout or a reschedule stands by instead of taking over, and an
operator started by hand with any priority >= 0 (say, to debug) takes over from all of them.
Equal priorities would pause every replica (kopf's rule), hence the random sub-millisecond part.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # rara.operator.settings imports this for `rara --help`: keep kopf lazy
    import kopf
    from kubernetes import client

GROUP, VERSION = "kopf.dev", "v1"


@dataclass(frozen=True)
class Peering:
    name: str  # the KopfPeering (ClusterKopfPeering) object the replicas share
    priority: int | None = None  # None: by start time, the older replica wins
    lifetime: int = 15  # seconds an entry holds without renewal: the longest hand-over


def start_priority(now: float | None = None) -> int:
    """Below zero, decreasing with the start time (ms); exact in a JSON number (< 2**53)."""
    ms = int((time.time() if now is None else now) * 1000)
    return -(ms * 1000 + random.randrange(1000))


def configure(settings: kopf.OperatorSettings, peering: Peering | None) -> None:
    if peering is None:
        settings.peering.standalone = True
        return
    settings.peering.standalone = False
    # Mandatory: without the peering CRD or object, stay paused rather than work unpeered
    # next to other replicas.
    settings.peering.mandatory = True
    settings.peering.name = peering.name
    settings.peering.priority = start_priority() if peering.priority is None else peering.priority
    settings.peering.lifetime = peering.lifetime
    settings.peering.stealth = True  # no log line per keep-alive (one a second when short)


def warn_if_missing(
    api: client.ApiClient, peering: Peering, namespaces: tuple[str, ...], logger: Any
) -> None:
    """kopf waits, silently, for a peering object that does not exist: say so once."""
    from kubernetes.client import CustomObjectsApi
    from kubernetes.client.exceptions import ApiException

    objects = CustomObjectsApi(api)
    for namespace in namespaces or (None,):
        where = (
            f"KopfPeering {namespace}/{peering.name}"
            if namespace
            else f"ClusterKopfPeering {peering.name}"
        )
        try:
            if namespace:
                objects.get_namespaced_custom_object(
                    GROUP, VERSION, namespace, "kopfpeerings", peering.name
                )
            else:
                objects.get_cluster_custom_object(
                    GROUP, VERSION, "clusterkopfpeerings", peering.name
                )
        except ApiException as exc:
            if exc.status == 404:
                logger.warning(
                    f"{where} not found (nor, perhaps, its CRD): paused until it "
                    f"exists (the chart creates both; docs/operator.md)"
                )
            else:
                logger.warning(
                    f"{where} unreadable ({exc.status} {exc.reason}): paused "
                    f"until kopf can watch and patch it"
                )
