"""Helpers more than one test module uses (plain functions and constants; the fixtures built on them are in
conftest.py). Test modules import from here, `tiny_models` and `hostile`, never from one another."""

from __future__ import annotations

import json
import os
import socket

import torch

from specstream_core import DecodeConfig, Engine, StreamParams
from tiny_models import prompts, save_tiny_model_dir, tiny_model

# the lossless checks' sizes: prompts per family and new tokens per prompt
N_PROMPTS = 20
NEW = 24


# ---- streams and engines ----------------------------------------------------------------------
def randomized(streams: StreamParams, seed: int, scale: float) -> StreamParams:
    """streams with random trainable tensors (their drafts then vary, as trained ones' do)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in streams.trainable_parameters():
            p.copy_(torch.randn(p.shape, generator=g) * scale)
    return streams


def perturbed_streams(model, gamma=4, adapter_rank=4, seed=1, draft_vocab=None) -> StreamParams:
    """Streams with random (non-trivial) embeddings, row adapters and pruning head."""
    streams = StreamParams.fresh(model, gamma=gamma, n_stream_layers=2, adapter_rank=adapter_rank, seed=seed,
                                 draft_vocab=draft_vocab)
    return randomized(streams, seed, 0.5)


def saved_base_and_streams(root) -> tuple[str, str]:
    """A tiny Llama saved under `root` as a user's --base, and a stream set for it with a draft vocabulary (an 8-bit
    head is laid out anew for it): (base, streams) directories."""
    base = save_tiny_model_dir(os.path.join(root, "base"))
    model = Engine.load(base, precision="fp32", fresh_streams=False).model
    perturbed_streams(model, gamma=3, draft_vocab=list(range(0, 128, 2))).save(os.path.join(root, "streams"))
    return base, os.path.join(root, "streams")


def near_tie_model(**kw):
    """Unscaled random logits and head_dim 64: near-ties everywhere, so any rounding difference between a
    speculative and a plain pass flips tokens."""
    return tiny_model("llama", seed=5, logit_scale=1.0, hidden=256, layers=4, num_attention_heads=4,
                      num_key_value_heads=2, **kw)


def near_tie_engine(precision: str) -> Engine:
    """`near_tie_model` on the row-invariant kernel's fp32 or bf16 Linears, with randomized streams."""
    from specstream_core.kernels.linears import rowinv

    model = near_tie_model()
    rowinv.install(model, "rowinv", torch.bfloat16 if precision == "bf16" else torch.float32)
    streams = StreamParams.fresh(model, gamma=3, n_stream_layers=2, adapter_rank=4, seed=1,
                                 draft_vocab=list(range(0, 128, 2)))
    return Engine(model, None, randomized(streams, 1, 0.5), precision=precision)


def mismatches(engine: Engine, topk, batch=False, lookup=0) -> int:
    """How many of 8 prompts decode differently speculatively (tree `topk`) and plainly, 32 tokens each."""
    ss = DecodeConfig(mode="ss", max_new_tokens=32, stop_on_eos=False, tree_topk=topk, lookup=lookup)
    ar = DecodeConfig(mode="ar", max_new_tokens=32, stop_on_eos=False)
    items = prompts(8, seed=6, max_len=60)
    plain = [engine.generate(ids, ar).token_ids for ids in items]
    spec = ([r.token_ids for r in engine.generate_batch(items, ss)] if batch
            else [engine.generate(ids, ss).token_ids for ids in items])
    return sum(a != b for a, b in zip(plain, spec))


# ---- weights ------------------------------------------------------------------------------------
def q8_exact(n, k, seed=0, scale=1.0) -> torch.Tensor:
    """A weight that is 8-bit groups exactly, as a Q8_0 file's head: int8 times fp16 scales, each group's
    largest |q| 127 (Q8_0's rule puts it there)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randint(-126, 127, (n, k // 32, 32), generator=g)
    q[..., 0] = 127 * torch.where(torch.rand(n, k // 32, generator=g) < 0.5, -1, 1)
    d = (torch.rand(n, k // 32, 1, generator=g) * 0.02 * scale + 1e-3).half().float()
    return (q * d).reshape(n, k)


def _llama_cpp_permute(w, n_head):
    """llama.cpp's convert script stores q/k rows in this order (transformers' GGUF reader undoes it)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_tiny_gguf(model, path: str) -> str:
    """Write `model`'s decoder Linears as Q4_1 and its head as Q8_0 to a GGUF file at `path`, and give the model
    the file's weights (dequantized), as after transformers' GGUF load: the default model's form, in small."""
    import gguf
    from gguf import quants

    from specstream_core.kernels.linears import int4

    cfg = model.config
    writer = gguf.GGUFWriter(path, "llama")
    names = {v: k for k, v in int4._GGUF_NAMES.items()}
    with torch.no_grad():
        for li, layer in enumerate(model.model.layers):
            for name, linear in layer.named_modules():
                if not isinstance(linear, torch.nn.Linear):
                    continue
                kind = names[name]
                raw = quants.quantize(linear.weight.numpy(), gguf.GGMLQuantizationType.Q4_1)
                linear.weight.copy_(torch.from_numpy(quants.dequantize(raw, gguf.GGMLQuantizationType.Q4_1)))
                if kind in ("attn_q", "attn_k"):
                    heads = cfg.num_attention_heads if kind == "attn_q" else cfg.num_key_value_heads
                    raw = _llama_cpp_permute(raw, heads)
                writer.add_tensor(f"blk.{li}.{kind}.weight", raw, raw_shape=raw.shape,
                                  raw_dtype=gguf.GGMLQuantizationType.Q4_1)
        raw = quants.quantize(model.lm_head.weight.numpy(), gguf.GGMLQuantizationType.Q8_0)  # an 8-bit head
        model.lm_head.weight.copy_(torch.from_numpy(quants.dequantize(raw, gguf.GGMLQuantizationType.Q8_0)))
        writer.add_tensor("output.weight", raw, raw_shape=raw.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


# ---- the lab ------------------------------------------------------------------------------------
LAB_PROMPT = "### Task: sql\n### Input:\nCREATE TABLE t (id INTEGER, name TEXT)\nQuestion: names?\n### Output:\n"


def make_lab_model(path: str, seed: int = 5, gamma: int = 3) -> str:
    """A tiny Llama + byte-level BPE tokenizer + fresh streams saved to `path` (no assets/ needed).

    Tokens that are not printable ASCII get zero LM-head rows, so greedy text is readable, and fresh
    streams (stream j ≈ the main stream) get drafts accepted whenever the model repeats itself.
    """
    from specstream_core.tasks import load_split
    from specstream_core.training.tokenizer_build import build_tokenizer

    texts = [e["prompt"] + e["reference"] for e in load_split("eval", n=10)]
    tok = build_tokenizer(texts, vocab_size=400)
    tok.save_pretrained(path)
    model = tiny_model("llama", seed=seed, vocab=len(tok), max_position_embeddings=1024, bos_token_id=0,
                       eos_token_id=0, pad_token_id=0)
    with torch.no_grad():
        for i in range(len(tok)):
            text = tok.decode([i])
            if not text or not all(32 <= ord(c) < 127 or c == "\n" for c in text):
                model.lm_head.weight[i].zero_()
    model.save_pretrained(path)
    streams = StreamParams.fresh(model, gamma=gamma, n_stream_layers=2, seed=1)
    streams.save(os.path.join(path, "streams"))
    streams.detach()
    return path


def lab_models_env(path: str) -> str:
    """$SPECSTREAM_MODELS (the lab's allow-list) for one tiny model saved by `make_lab_model`."""
    return json.dumps({"tiny": {"base": path, "streams": os.path.join(path, "streams"), "precision": "fp32"}})


def handler(demo, name):
    """The Gradio demo's event function called `name`."""
    return next(f.fn for f in demo.fns.values() if getattr(f.fn, "__name__", "") == name)


def component(demo, elem_id):
    """The Gradio demo's block with this elem_id."""
    return next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == elem_id)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_server(url: str, proc, log, limit: float) -> None:
    """Return once `url` answers 200; fail the test (with the server's log tail) if `proc` exits or `limit` s pass."""
    import time
    import urllib.request

    import pytest

    deadline = time.time() + limit
    while time.time() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            pytest.fail(f"the lab exited early:\n{log.read()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    proc.kill()
    log.seek(0)
    pytest.fail(f"the lab did not start within {limit} s:\n{log.read()[-3000:]}")


def serve_lab(tmp_path_factory, env: dict, port: int, limit: float = 120):
    """Run the lab (`app.py`, a subprocess on 127.0.0.1:`port` with `env`) for a module's browser tests: yields its
    URL once it answers, then stops it (a fixture's `yield from`)."""
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    log = open(tmp_path_factory.mktemp("server") / "server.log", "w+")
    proc = subprocess.Popen([sys.executable, "app.py"], cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    wait_for_server(url, proc, log, limit=limit)
    yield url
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


def headless_chromium(executable: str, args: list[str]):
    """A headless Chromium through playwright for a module's browser tests (a fixture's `yield from`)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=args, headless=True)
        yield browser
        browser.close()


def require_chromium(executable: str) -> None:
    """Fail (skip only with SPECSTREAM_ALLOW_NO_BROWSER=1) before a module's browser tests start anything, when the
    browser at `executable` or the playwright package is missing."""
    import pytest

    missing = None
    if not os.path.exists(executable):
        missing = f"{executable} is missing (install chromium: apt-get install -y chromium)"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            missing = "the playwright python package is missing (pip install -r requirements-dev.txt)"
    if missing and os.environ.get("SPECSTREAM_ALLOW_NO_BROWSER") == "1":
        pytest.skip(missing)
    if missing:
        pytest.fail(f"{missing}; set SPECSTREAM_ALLOW_NO_BROWSER=1 to skip the browser tests", pytrace=False)
