"""rara's Kubernetes operator (kopf): WorkflowDefinition → immutable versions in PostgreSQL,
WorkflowRun → runs, WorkerPool → Deployment replicas scaled by the backlog of capabilities.

Imported as ``rara.operator`` (``rara/operator`` links here). The code sits one level below
``operator/`` on purpose: ``operator`` is a standard-library module, and a package of that name
at the repository root would shadow it for any Python started there.
"""
