"""PostgreSQL plumbing: the embedded server, migrations, named queries and connections."""
