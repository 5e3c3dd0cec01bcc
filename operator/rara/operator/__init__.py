"""rara's Kubernetes operator (kopf): WorkflowDefinition → immutable versions in PostgreSQL,
WorkflowRun → runs, WorkerPool → Deployment replicas scaled by the backlog of capabilities.

Imported as ``rara.operator`` from ``operator/rara/operator/``: the folder ``operator/`` is a
root of the ``rara`` namespace, never a package itself, because ``operator`` is a
standard-library module that a package of that name would shadow.
"""
