"""make gpu-check on a machine without a CUDA GPU: says so, runs nothing, exits 0."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the GPU check needs rara-rag's ML stack")

from rara_rag.demo import gpu_check  # noqa: E402


def test_without_a_gpu_it_says_so_and_exits_0(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_check.main([]) == 0
    out = capsys.readouterr().out
    assert "no GPU here" in out
    assert "nothing was run" in out
    assert "steps/s" not in out  # no pretending


def test_report_fails_a_quantization_that_did_not_happen(
    capsys: pytest.CaptureFixture[str], tmp_path: object
) -> None:
    metrics = {
        "gpu/peak_memory_mib": 900.0,
        "linear4bit_layers": 0.0,
        "lora_layers": 36.0,
        "steps_per_s": 5.0,
        "eval_queries": 1373.0,
        "diff/mrr@10": 0.01,
    }
    result = {"device": "cuda", "quantized": False, "steps": 28, "metrics": metrics}
    ok = [{"mode": "LoRA", "wall_s": 30.0, "result": result}]
    assert gpu_check.report(ok, tmp_path) == 0  # type: ignore[arg-type]
    bad = [{"mode": "QLoRA 4-bit", "wall_s": 30.0, "result": result}]
    assert gpu_check.report(bad, tmp_path) == 1  # type: ignore[arg-type]
    out = capsys.readouterr().out
    assert "CHECK FAILED: quantized as asked" in out
    assert "CHECK FAILED: 4-bit linears as asked" in out
