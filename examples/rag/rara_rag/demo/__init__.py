"""The RAG refresh demo: capabilities over ``rara_rag`` and the ``make demo`` driver.

``handlers`` (worker, in-process): ``corpus.collect@1``, ``corpus.clean@1``.
``plugins`` (executor, gRPC): ``index.shard@1`` (the children of the ``index-shard`` map),
``index.build@1``, ``eval.retrieval@1``, ``adapt.lora@1``.
Artifacts flow between steps by name (``documents.jsonl``, ``passages.jsonl`` and its shards
``passages-NNN.jsonl``, each child's ``tokens.json.gz``, ``index.bm25``, ``queries.jsonl``,
``adapter.tar.gz``); the deterministic steps produce identical digests on every run, whatever
crashed in between.
"""
