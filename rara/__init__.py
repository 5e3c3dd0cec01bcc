"""rara: a durable workflow runtime for ML/RAG data pipelines on PostgreSQL."""

__version__ = "0.1.0"
