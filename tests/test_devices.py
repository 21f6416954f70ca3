"""What runs differently on CUDA, tested on the CPU: nf4's compute dtype, fp16, the synchronizing clock the
race and the benches read, RoPE without a host sync, and the lab's badge where outputs differ."""

import types

import pytest
import torch

from specstream_core.model import compat, devices
from tiny_models import hf_greedy, tiny_model


@pytest.mark.parametrize("device,bf16,want", [("cpu", True, torch.float32), ("cuda", True, torch.bfloat16),
                                              ("cuda:1", False, torch.float16), ("cuda", False, torch.float16)])
def test_nf4_compute_dtype(device, bf16, want):
    assert devices.nf4_compute_dtype(device, bf16_supported=lambda: bf16) == want


def test_bnb_config_computes_in_the_device_dtype(monkeypatch):
    pytest.importorskip("bitsandbytes")
    from specstream_core.model.loading import bnb_config

    assert bnb_config("nf4", "cpu").bnb_4bit_compute_dtype == torch.float32
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert bnb_config("nf4", "cuda").bnb_4bit_compute_dtype == torch.float16  # a T4
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert bnb_config("nf4", "cuda").bnb_4bit_compute_dtype == torch.bfloat16


def test_fp16_is_a_cuda_precision():
    from specstream_core import SpecstreamError
    from specstream_core.model.loading import PRECISIONS, LoadConfig, is_exact

    assert "fp16" in PRECISIONS and not is_exact("fp16", "cuda")
    with pytest.raises(SpecstreamError, match="fp16 runs on CUDA"):
        LoadConfig("some/model", precision="fp16", device="cpu")


def test_synchronizer_syncs_cuda_only(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append(device))
    devices.synchronizer("cpu")()
    assert calls == []
    devices.synchronizer("cuda:0")()
    assert calls == [torch.device("cuda:0")]


class FakeDevice:
    """A device that queues work: `launch` returns at once, `sync` waits for what is queued."""

    def __init__(self):
        self.now, self.queued = 0.0, 0.0

    def launch(self, seconds):
        self.queued += seconds

    def run(self, seconds):  # work the host waits for (it first waits for what was queued before it)
        self.now += self.queued + seconds
        self.queued = 0.0

    def sync(self):
        self.now += self.queued
        self.queued = 0.0


class FakeDecoding:
    def __init__(self, work, device):
        self.work, self.device, self.forward_passes, self.output = work, device, 0, []

    @property
    def done(self):
        return self.forward_passes >= 3

    def step(self):
        self.work(self.device)
        self.forward_passes += 1
        self.output.append(7)
        return [7]

    def stats(self):
        return {"new_tokens": len(self.output), "forward_passes": self.forward_passes, "wall_s": -1.0}


def test_race_clocks_charge_queued_work_to_the_side_that_queued_it():
    """Side A queues 5 s of device work a pass and returns; side B runs 1 s a pass. Without a sync B's clock
    would include A's queued work; with the race's SyncTimer each side pays its own."""
    from app.race import Side

    dev = FakeDevice()
    sides = [Side(FakeDecoding(lambda d: d.launch(5.0), dev), lambda ids: "x" * len(ids),
                  devices.SyncTimer(sync=dev.sync, clock=lambda: dev.now)),
             Side(FakeDecoding(lambda d: d.run(1.0), dev), lambda ids: "x" * len(ids),
                  devices.SyncTimer(sync=dev.sync, clock=lambda: dev.now))]
    for _ in range(3):
        for side in sides:
            side.step(_NoLock())
    a, b = (s.stats() for s in sides)
    assert (a["wall_s"], b["wall_s"]) == (15.0, 3.0)
    assert b["tokens_per_s"] == 1.0

    unsynced = FakeDevice()  # the same passes read on a clock that does not wait: B pays A's work
    t = devices.SyncTimer(sync=lambda: None, clock=lambda: unsynced.now)
    with t:
        unsynced.launch(5.0)
    with t:
        unsynced.run(1.0)
    assert t.elapsed == 6.0


class _NoLock:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_rope_without_a_host_sync_keeps_the_logits(monkeypatch):
    """On a SYNC_FREE_ROPE device the table covers every position at once (no `int(position_ids.max())` per
    pass); the tokens and the table's values are those of the CPU path."""
    model = tiny_model("llama", max_position_embeddings=5000)
    ids = [5, 9, 11, 3, 40]
    before = hf_greedy(model, ids, 12)
    from specstream_core.decoding.engine import Engine
    from specstream_core.decoding.config import DecodeConfig

    cfg = DecodeConfig(mode="ar", max_new_tokens=12, stop_on_eos=False)
    plain = Engine(model, streams=None).generate(ids, cfg).token_ids
    module = compat.inner_model(model).rotary_emb
    small = module.__dict__.pop("_specstream_rope")[1]
    monkeypatch.setattr(devices, "SYNC_FREE_ROPE", ("cpu",))
    assert Engine(model, streams=None).generate(ids, cfg).token_ids == plain == before
    table = module.__dict__["_specstream_rope"][1]
    assert table[0].shape[0] == 5000 > small[0].shape[0]
    assert torch.equal(table[0][: small[0].shape[0]], small[0])


def _view(ar, ss, **kw):
    from app.race import Piece, RaceView, SideView

    return RaceView(SideView([Piece(t, i) for i, t in enumerate(ar)], done=True),
                    SideView([Piece(t, i) for i, t in enumerate(ss)], done=True), finished=True, **kw)


def test_badge_shows_where_outputs_differ_and_the_margin():
    from app.render import render_badge

    diff = {"position": 1, "plain_token": 17, "speculative_token": 23, "margin": 0.0123, "runner_up_gap": 0.0123}
    html = render_badge(_view(["a", "b"], ["a", "c"], exact=False, precision="bf16", device="cuda:0", difference=diff))
    assert 'data-equal="false"' in html and "first difference at token 1" in html
    assert "0.0123" in html and "bf16 on cuda:0" in html and "report" not in html and "unexpected" not in html
    exact = render_badge(_view(["a", "b"], ["a", "c"], exact=True, precision="fp32", device="cpu", difference=diff))
    assert "should not happen" in exact and "first difference at token 1" in exact
    same = render_badge(_view(["a"], ["a"], exact=False, precision="fp16", device="cuda:0"))
    assert 'data-equal="true"' in same and "not exact" in same
    assert "lossless" in render_badge(_view(["a"], ["a"], exact=True, precision="fp32", device="cpu"))


def test_difference_at_measures_the_plain_pass_margin():
    from specstream_core.decoding.mismatch import difference_at, first_difference

    model = tiny_model("llama")
    prompt = [5, 9, 11]
    plain = hf_greedy(model, prompt, 6)
    with torch.no_grad():
        logits = model(torch.tensor([prompt + plain[:3]])).logits[0, -1]
    runner_up = int(torch.topk(logits, 2).indices[1])
    spec = plain[:3] + [runner_up] + plain[4:]  # a constructed mismatch: the runner-up at token 3
    assert first_difference(plain, spec) == 3 and first_difference(plain, plain[:4]) is None
    got = difference_at(types.SimpleNamespace(model=model, device=torch.device("cpu")), prompt, plain, spec)
    gap = float(logits[plain[3]] - logits[runner_up])
    assert got["position"] == 3 and got["speculative_token"] == runner_up
    assert got["margin"] == pytest.approx(gap, rel=1e-5) and got["runner_up_gap"] == pytest.approx(gap, rel=1e-5)
    assert difference_at(types.SimpleNamespace(model=model, device=torch.device("cpu")), prompt, plain, plain) is None


def test_a_gpu_host_never_builds_the_cpu_kernel(monkeypatch, tmp_path):
    """On a host with CUDA the lab's model line and draft settings resolve for cuda: the C kernel (CPU
    precisions only) is not asked for, so it is not compiled there."""
    from app import models, render
    from specstream_core.kernels.linears import rowinv

    def refuse():
        raise AssertionError("the CPU kernel was asked for on a GPU host")

    monkeypatch.setattr(rowinv, "available", refuse)
    monkeypatch.setattr(models, "default_device", lambda: "cuda")
    monkeypatch.setattr(render, "default_device", lambda: "cuda")
    from specstream_core.model import defaults

    streams = defaults.default_streams("lossless")
    if streams is None:
        pytest.skip("no bundled stream set")
    spec = models.ModelSpec("m", str(tmp_path), {"lossless": streams})
    assert render.shown_precision(spec) == "fp32"
    assert models.recommended_for(spec, "lossless")["topk"]  # resolved for cuda: the kernel is not asked for


def test_nothing_is_labelled_exact_on_cuda():
    """cuBLAS picks its kernels by row count: on CUDA speculative == plain is measured, never claimed."""
    from specstream_core.model.loading import is_exact

    for precision in ("fp32", "bf16", "fp16", "nf4", "int8"):
        assert not is_exact(precision, "cuda", "torch")
    assert is_exact("fp32", "cpu", "torch") and is_exact("nf4", "cpu") and is_exact("bf16", "cpu", "rowinv")
