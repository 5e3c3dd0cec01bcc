"""LoRA (QLoRA on CUDA + bitsandbytes) adaptation of all-MiniLM-L6-v2 for retrieval.

Design choices, and why:

* **Query-side adapter.** LoRA (peft) wraps the attention projections and is applied to the
  *query* tower only; passages are embedded once by the frozen base model. The index built
  before adaptation therefore stays valid afterwards (no corpus re-embedding on release), and
  training on 2 CPU cores costs short queries' forward+backward instead of 128-token passages'.
* **In-batch and hard negatives.** Loss = cross-entropy of ``q_i · c_j / temperature`` over
  the batch's candidates (InfoNCE / MultipleNegativesRanking): every positive in the batch
  plus every pair's *hard negatives* — BM25's best non-relevant train passages for that query
  (``evaluate.mine_hard_negatives``, from the ``index`` step's index), the passages a lexical
  retriever confuses with the answer. A candidate shared by several pairs counts once.
  ``negatives="all"`` scores against every cached passage instead (cheap: that tower is frozen).
* **Targets and rate.** LoRA on every linear layer of the encoder: attention query, key, value
  and output, and the feed-forward pair (``dense``), r=8, alpha 16, AdamW at 1e-3; the demo
  trains one epoch over 512 pairs. Chosen with ``python -m rara_rag.tune`` on validation
  queries, whose documents are apart from the train and the test ones: there no candidate
  (lr 3e-4 or 3e-3, two epochs, attention query/value only, rank 16, no hard negatives)
  could be told apart from another; one epoch scored highest and costs least.
* **Which hard negatives.** BM25's *top* non-relevant passages are mostly, in a docstring
  corpus, the same module's other passages describing the same thing — false negatives (in
  early experiments, scored on the test queries and so only indicative, they made MRR@10
  worse). Hence negatives from other documents and past BM25's first 10 hits
  (``mine_hard_negatives``' defaults, fixed before the validation sweep).
* **Exact resume.** Batch order is a pure function of ``(seed, epoch)``, so a checkpoint only
  needs adapter weights, AdamW state, the step and torch's RNG state (dropout). A run resumed
  from checkpoint k executes steps k+1.. with the same batches and RNG stream: it ends at the
  same step count with the same loss an uninterrupted run would have had.
* **Determinism and threads.** Seeded everything (``torch.manual_seed``, batch order from
  ``(seed, epoch)``), one intra-op thread by default (``num_threads``): a float sum split over
  a different number of threads rounds differently, and a resumed attempt may land on another
  executor. ``torch.use_deterministic_algorithms`` where torch has them.
* QLoRA (4-bit NF4 base, bf16 compute) only when CUDA *and* bitsandbytes are present (or
  ``quantize="always"``, which fails clearly otherwise); plain fp32 LoRA on CPU.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

from rara_rag import ProgressFn, SaveCheckpointFn, embed
from rara_rag.corpus import Passage
from rara_rag.evaluate import (
    DEFAULT_KS,
    LabelledQuery,
    QuerySet,
    Split,
    bm25_rankings,
    bootstrap,
    mine_hard_negatives,
    per_query,
    prefixed,
    rank_by_embeddings,
    rrf,
)
from rara_rag.index import BM25Index
from rara_rag.packing import pack_dir

STATE_FILE = "trainer_state.json"
RRF_DEPTH = 100  # how deep each ranking goes into reciprocal rank fusion
LEARNING_RATE = 1e-3


class AdaptCancelled(RuntimeError):
    """Stopped on request after saving a checkpoint at ``step``."""

    def __init__(self, step: int, checkpoint: Path | None) -> None:
        self.step, self.checkpoint = step, checkpoint
        super().__init__(f"adaptation cancelled at step {step} (checkpoint: {checkpoint})")


class ResumeMismatch(ValueError):
    """The checkpoint was made by a run with different data or hyper-parameters."""


@dataclass(frozen=True, slots=True)
class AdaptConfig:
    rank: int = 8
    alpha: int = 16
    dropout: float = 0.05
    target_modules: tuple[str, ...] = ("query", "key", "value", "dense")
    learning_rate: float = LEARNING_RATE
    epochs: int = 1
    batch_size: int = 16
    temperature: float = 0.05
    # "in-batch": the batch's positives and hard negatives are the candidates (MNRL).
    # "all": every cached passage is a candidate — free here because the passage tower is
    # frozen.
    negatives: Literal["in-batch", "all"] = "in-batch"
    max_query_length: int = 64
    max_passage_length: int = 128
    seed: int = 0
    # Not part of the run's identity (may change between attempts):
    checkpoint_every: int = 10
    num_threads: int | None = 1  # None: embed.limit_threads picks by load (not reproducible)
    quantize: Literal["auto", "never", "always"] = "auto"
    ks: tuple[int, ...] = DEFAULT_KS

    def fingerprint(
        self, pairs: Sequence[tuple[str, str]], negatives: Sequence[Sequence[str]] = ()
    ) -> str:
        ident = {
            k: v
            for k, v in asdict(self).items()
            if k not in ("checkpoint_every", "num_threads", "quantize", "ks")
        }
        h = hashlib.sha256(json.dumps(ident, sort_keys=True).encode())
        for q, p in pairs:
            h.update(b"\x00" + q.encode() + b"\x01" + p.encode())
        for negs in negatives:
            h.update(b"\x02" + b"\x03".join(n.encode() for n in negs))
        return h.hexdigest()


@dataclass(slots=True)
class AdaptResult:
    adapter_dir: Path
    steps: int
    total_steps: int
    resumed_from_step: int
    quantized: bool
    device: str
    losses: list[float]  # one per step, including steps done before a resume
    metrics: dict[str, float] = field(default_factory=dict)

    def adapter_bytes(self) -> bytes:
        """The adapter directory as a deterministic blob (``packing.pack_dir``)."""
        return pack_dir(self.adapter_dir)


def _quantization(cfg: AdaptConfig) -> tuple[str, Any]:
    import torch

    cuda = torch.cuda.is_available()
    bnb = importlib.util.find_spec("bitsandbytes") is not None
    if cfg.quantize == "always" and not (cuda and bnb):
        raise embed.ModelUnavailable("QLoRA needs CUDA and bitsandbytes")
    if cfg.quantize == "never" or not (cuda and bnb):
        return ("cuda" if cuda else "cpu"), None
    transformers: Any = importlib.import_module("transformers")
    return "cuda", transformers.BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=torch.bfloat16,
    )


def _batches(n: int, batch_size: int, seed: int, epoch: int) -> list[list[int]]:
    import numpy as np

    perm = np.random.default_rng([seed, epoch]).permutation(n).tolist()
    return [perm[i : i + batch_size] for i in range(0, n - batch_size + 1, batch_size)]


def adapt_query_set(
    qs: QuerySet,
    out_dir: str | Path,
    *,
    index: BM25Index | None = None,
    hard_negatives: int = 1,
    mining: dict[str, Any] | None = None,
    eval_split: Split = "test",
    **kwargs: Any,
) -> AdaptResult:
    """Train on ``qs``'s train pairs (with hard negatives mined from ``index`` when given);
    evaluate before/after, and BM25 + after fused, on a held-out split (``val`` to choose
    hyper-parameters, ``test`` to report)."""
    negatives = (
        mine_hard_negatives(qs, index, per_query=hard_negatives, **(mining or {}))
        if index is not None and hard_negatives > 0
        else None
    )
    return adapt(
        qs.pairs("train"),
        out_dir,
        hard_negatives=negatives,
        eval_queries=qs.split(eval_split),
        eval_pool=qs.pool(eval_split),
        eval_bm25=bm25_rankings(qs, eval_split, depth=RRF_DEPTH),
        **kwargs,
    )


def adapt(
    pairs: Sequence[tuple[str, str]],
    out_dir: str | Path,
    *,
    hard_negatives: Sequence[Sequence[str]] | None = None,
    eval_queries: Sequence[LabelledQuery] = (),
    eval_pool: Sequence[Passage] = (),
    eval_bm25: Sequence[Sequence[str]] | None = None,
    config: AdaptConfig | None = None,
    resume_from: str | Path | None = None,
    progress: ProgressFn | None = None,
    save_checkpoint: SaveCheckpointFn | None = None,
    cancelled: Callable[[], bool] | None = None,
    model_path: str | Path | None = None,
    embedding_cache: dict[tuple[str, ...], Any] | None = None,
) -> AdaptResult:
    """Train a LoRA adapter on (query, positive passage) pairs; returns its directory + metrics.

    Checkpoints go to ``out_dir/checkpoints/step-NNNNNN`` every ``checkpoint_every`` steps (and
    at the end / on cancel); ``save_checkpoint(state, dir)`` is called with each so the caller can
    store it durably — the previous checkpoint directory is removed once the callback returns.
    ``resume_from`` is such a directory (e.g. unpacked from the last checkpoint artifact).
    ``hard_negatives[i]`` are passages for pair ``i`` to rank below its positive. With
    ``eval_bm25`` (BM25's ranking of each eval query) a third, fused retriever is scored.
    Metrics come with seeded bootstrap 95% intervals (``_lo``/``_hi``), and ``diff/`` is
    after minus before, its interval paired over queries. ``embedding_cache`` keeps the frozen
    tower's embeddings of each passage list across calls (a hyper-parameter sweep): the same
    list gives the same tensor, bit for bit, as encoding it again.
    """
    import torch
    from peft import LoraConfig, get_peft_model
    from peft.utils import set_peft_model_state_dict
    from safetensors.torch import load_file

    cfg = config or AdaptConfig()
    if len(pairs) < 2:
        raise ValueError(f"need at least 2 training pairs for in-batch negatives, got {len(pairs)}")
    negatives = [tuple(n) for n in hard_negatives] if hard_negatives is not None else []
    if negatives and len(negatives) != len(pairs):
        raise ValueError("one tuple of hard negatives per training pair")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    report = progress or (lambda fraction, message, metrics: None)
    timings: dict[str, float] = {}
    t0 = time.perf_counter()

    def stop_if_cancelled() -> None:
        # The set-up phases take seconds each; a cancelled job must not finish them first
        # (an executor cannot kill a plugin thread, it can only ask).
        if cancelled is not None and cancelled():
            raise AdaptCancelled(0, None)

    threads = embed.limit_threads(cfg.num_threads)
    torch.manual_seed(cfg.seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    device, quant = _quantization(cfg)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    enc = embed.load(model_path, device=device, quantization_config=quant)
    timings["time/load_s"] = time.perf_counter() - t0
    stop_if_cancelled()
    report(0.0, "model loaded", None)

    # Frozen passage tower: embed each distinct positive, hard negative and the eval pool once.
    t = time.perf_counter()
    texts = sorted({p for _, p in pairs} | {n for negs in negatives for n in negs})
    pidx = {text: i for i, text in enumerate(texts)}

    # Embedding the passages before training takes minutes on a busy CPU: it reports as it
    # goes (every 10 s at most), or the step's heartbeatTimeout would end the attempt.
    last_report = time.monotonic()

    def embedding(done: int, total: int) -> None:
        nonlocal last_report
        if time.monotonic() - last_report >= 10.0:
            last_report = time.monotonic()
            stop_if_cancelled()
            report(0.0, f"embedding passages {done}/{total}", None)

    def encode_passages(texts: Sequence[str]) -> torch.Tensor:
        key = tuple(texts)
        if embedding_cache is not None and key in embedding_cache:
            return cast("torch.Tensor", embedding_cache[key])
        emb = embed.encode(enc, texts, max_length=cfg.max_passage_length, on_batch=embedding)
        if embedding_cache is not None:
            embedding_cache[key] = emb
        return emb

    passages = encode_passages(texts).to(device)
    target = [pidx[p] for _, p in pairs]
    hard = [[pidx[n] for n in negs] for negs in negatives] or [[] for _ in pairs]
    queries = [q for q, _ in pairs]
    pool_emb = encode_passages([p.text for p in eval_pool])
    timings["time/embed_passages_s"] = time.perf_counter() - t
    stop_if_cancelled()

    scored: dict[str, dict[str, list[float]]] = {}  # per-query metrics of each retriever

    def evaluate(prefix: str) -> dict[str, float]:
        if not eval_queries or not eval_pool:
            return {}
        q = embed.encode(enc, [x.text for x in eval_queries], max_length=cfg.max_query_length)
        ranks = rank_by_embeddings(q, pool_emb, [p.id for p in eval_pool], RRF_DEPTH)
        scored[prefix] = per_query(ranks, eval_queries, cfg.ks)
        out = prefixed(bootstrap(scored[prefix], seed=cfg.seed), prefix)
        if prefix == "after" and "before" in scored:
            diff = bootstrap(scored["after"], scored["before"], seed=cfg.seed)
            out.update(prefixed(diff, "diff"))
        if prefix == "after" and eval_bm25 is not None:
            fused = rrf([eval_bm25, ranks], depth=RRF_DEPTH)
            scored["hybrid"] = per_query(fused, eval_queries, cfg.ks)
            out.update(prefixed(bootstrap(scored["hybrid"], seed=cfg.seed), "hybrid"))
        return out

    metrics: dict[str, float] = {}
    t = time.perf_counter()
    metrics.update(evaluate("before"))
    timings["time/eval_before_s"] = time.perf_counter() - t
    stop_if_cancelled()
    report(0.0, "baseline evaluated", metrics or None)

    if quant is not None:
        peft: Any = importlib.import_module("peft")
        enc.model = peft.prepare_model_for_kbit_training(
            enc.model, use_gradient_checkpointing=False
        )
    torch.manual_seed(cfg.seed)  # LoRA A init
    lora = LoraConfig(
        r=cfg.rank,
        lora_alpha=cfg.alpha,
        lora_dropout=cfg.dropout,
        target_modules=list(cfg.target_modules),
        exclude_modules=["pooler.dense"],  # BertModel's pooler: unused by mean pooling
        bias="none",
    )
    enc.model = get_peft_model(enc.model, lora)
    params = [p for p in enc.model.parameters() if p.requires_grad]
    optim = torch.optim.AdamW(params, lr=cfg.learning_rate, weight_decay=0.0)

    batch_size = min(cfg.batch_size, len(pairs))
    per_epoch = len(pairs) // batch_size
    total = per_epoch * cfg.epochs
    fingerprint = cfg.fingerprint(pairs, negatives)
    step = 0
    losses: list[float] = []
    if resume_from is not None:
        ckpt = Path(resume_from)
        state = json.loads((ckpt / STATE_FILE).read_text())
        if state["fingerprint"] != fingerprint:
            raise ResumeMismatch(f"checkpoint {ckpt} was made with other data/config")
        set_peft_model_state_dict(enc.model, load_file(str(ckpt / "adapter_model.safetensors")))
        optim.load_state_dict(torch.load(ckpt / "optimizer.pt", weights_only=True))
        torch.set_rng_state(torch.load(ckpt / "rng.pt", weights_only=True))
        step, losses = int(state["step"]), [float(x) for x in state["losses"]]
    resumed_from = step

    ckpt_root = out / "checkpoints"
    last_ckpt: Path | None = None

    def checkpoint() -> Path:
        nonlocal last_ckpt
        path = ckpt_root / f"step-{step:06d}"
        if path.exists():
            shutil.rmtree(path)
        enc.model.save_pretrained(path)
        torch.save(optim.state_dict(), path / "optimizer.pt")
        torch.save(torch.get_rng_state(), path / "rng.pt")
        small = {
            "step": step,
            "total_steps": total,
            "loss": losses[-1] if losses else None,
            "fingerprint": fingerprint,
        }
        (path / STATE_FILE).write_text(json.dumps({**small, "losses": losses}))
        if save_checkpoint is not None:
            save_checkpoint(small, path)
        if last_ckpt is not None and last_ckpt != path:
            shutil.rmtree(last_ckpt, ignore_errors=True)
        last_ckpt = path
        return path

    t = time.perf_counter()
    enc.model.train()
    while step < total:
        epoch, i = divmod(step, per_epoch)
        idx = _batches(len(pairs), batch_size, cfg.seed, epoch)[i]
        q = embed.forward(enc, [queries[j] for j in idx], cfg.max_query_length)
        if cfg.negatives == "all":
            labels = torch.tensor([target[j] for j in idx], device=device)
            logits = q @ passages.T / cfg.temperature
        else:
            # The batch's positives, then its hard negatives; each distinct passage once, so
            # a positive shared by two pairs (or another pair's negative) is never a negative.
            cand = list(dict.fromkeys([target[j] for j in idx] + [n for j in idx for n in hard[j]]))
            slot = {c: i for i, c in enumerate(cand)}
            labels = torch.tensor([slot[target[j]] for j in idx], device=device)
            logits = q @ passages[torch.tensor(cand, device=device)].T / cfg.temperature
        loss = torch.nn.functional.cross_entropy(logits, labels)
        optim.zero_grad(set_to_none=True)
        cast(Any, loss).backward()  # Tensor.backward is untyped in torch's stubs
        optim.step()
        step += 1
        losses.append(float(loss.detach()))
        report(
            step / total,
            f"step {step}/{total} loss {losses[-1]:.4f}",
            {"loss": losses[-1], "step": float(step), "epoch": step / per_epoch},
        )
        if step % cfg.checkpoint_every == 0 or step == total:
            checkpoint()
        if step < total and cancelled is not None and cancelled():
            raise AdaptCancelled(step, checkpoint())
    train_s = time.perf_counter() - t
    timings["time/train_s"] = train_s
    done = step - resumed_from
    if done:
        timings["time/seconds_per_epoch"] = train_s * per_epoch / done
        timings["steps_per_s"] = done / train_s if train_s > 0 else float("nan")
    if device == "cuda":
        timings["gpu/peak_memory_mib"] = torch.cuda.max_memory_allocated() / 2**20

    t = time.perf_counter()
    metrics.update(evaluate("after"))
    timings["time/eval_after_s"] = time.perf_counter() - t
    adapter_dir = out / "adapter"
    if adapter_dir.exists():
        shutil.rmtree(adapter_dir)
    enc.model.save_pretrained(adapter_dir)
    metrics.update(timings)
    metrics.update(
        {
            "steps": float(step),
            "total_steps": float(total),
            "threads": float(threads),
            "train_pairs": float(len(pairs)),
            "hard_negatives": float(sum(len(n) for n in negatives)),
            "eval_queries": float(len(eval_queries)),
            # What the weights are: bitsandbytes 4-bit linears under LoRA (QLoRA), or none.
            "linear4bit_layers": float(
                sum(type(m).__name__ == "Linear4bit" for m in enc.model.modules())
            ),
            "lora_layers": float(sum(hasattr(m, "lora_A") for m in enc.model.modules())),
            "epochs": float(cfg.epochs),
        }
    )
    if losses:
        metrics.update(
            {
                "loss_first": losses[0],
                "loss_last": losses[-1],
                "loss_last_epoch_mean": _mean(losses[-per_epoch:]),
            }
        )
    report(1.0, "adapted", metrics)
    return AdaptResult(
        adapter_dir, step, total, resumed_from, quant is not None, device, losses, metrics
    )


def _mean(xs: Sequence[float]) -> float:
    return math.fsum(xs) / len(xs) if xs else float("nan")


def load_adapted(adapter_dir: str | Path, model_path: str | Path | None = None) -> embed.Encoder:
    """Base MiniLM + a trained adapter, for encoding *queries* (passages use the base model)."""
    from peft import PeftModel

    enc = embed.load(model_path)
    enc.model = PeftModel.from_pretrained(enc.model, str(adapter_dir))
    enc.model.eval()
    return enc
