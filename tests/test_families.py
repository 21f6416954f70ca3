"""Qwen3, Phi-3, Gemma 3 and OLMo 2 checkpoints, saved by transformers and loaded as a user loads them (--base):
greedy speculative output equals transformers' own greedy `generate` at fp32 and at the default precision, and
equals plain decoding at every precision the CPU offers, alone and in batches."""

import pytest
import torch

from specstream_core import DecodeConfig, Engine, cli
from specstream_core.backends import a8_available
from specstream_core.model import compat
from helpers import randomized
from tiny_models import FAMILIES, hf_greedy, prompts, save_tiny_family_dir

pytestmark = pytest.mark.filterwarnings("ignore:using 3 fresh")  # fresh streams, randomized below
NEW = 16
PROMPTS = prompts(3, seed=7, min_len=6, max_len=20)  # the tiny models' logits are scaled up: no near-ties
SS = DecodeConfig(mode="ss", max_new_tokens=NEW, stop_on_eos=False, tree_topk=(4, 3, 2, 1))
AR = DecodeConfig(mode="ar", max_new_tokens=NEW, stop_on_eos=False)


@pytest.fixture(scope="module", params=FAMILIES)
def family_dir(request, tmp_path_factory):
    """(family, checkpoint directory, transformers' greedy output of each prompt from the fp32 checkpoint)."""
    from transformers import AutoModelForCausalLM

    path = save_tiny_family_dir(tmp_path_factory.mktemp(request.param), request.param)
    ref = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    ref.generation_config.eos_token_id = None
    return request.param, path, [hf_greedy(ref, p, NEW) for p in PROMPTS]


def _engine(path: str, precision: str, **kw) -> Engine:
    engine = Engine.load(path, precision=precision, gamma=3, chat=False, **kw)
    randomized(engine.streams, seed=1, scale=0.3)  # drafts that vary, as trained ones' do
    return engine


@pytest.mark.parametrize("precision,kernel", [("auto", None), ("fp32", "torch")])
def test_ss_equals_transformers_generate(family_dir, precision, kernel):
    """The default precision of an fp32 checkpoint (auto: fp32, on the kernel's Linears where it runs) and fp32 on
    torch's Linears: speculative and plain output equal transformers' greedy generate, alone and in a batch."""
    family, path, refs = family_dir
    engine = _engine(path, precision, kernel=kernel)
    assert engine.precision == "fp32"
    for ids, ref in zip(PROMPTS, refs):
        assert engine.generate(ids, SS).token_ids == ref, f"{family} {precision}: prompt {ids}"
        assert engine.generate(ids, AR).token_ids == ref, f"{family} {precision}: prompt {ids}"
    assert [r.token_ids for r in engine.generate_batch(PROMPTS, SS)] == refs, family


@pytest.mark.parametrize("precision", ["bf16", "int4", "int4-a8", "nf4", "int8"])
def test_ss_equals_ar_at_every_precision(family_dir, precision):
    """Every precision the engine offers on a CPU (`loading.is_exact`: bitsandbytes' int8 there quantizes each row's
    activations on its own and has no outlier split, so it is row-invariant too)."""
    if precision == "int4-a8" and not a8_available():
        pytest.skip("int4-a8 needs AVX512-VNNI and the kernel")
    if precision in ("nf4", "int8"):
        pytest.importorskip("bitsandbytes")
    family, path, _ = family_dir
    engine = _engine(path, precision)
    plain = [engine.generate(ids, AR).token_ids for ids in PROMPTS]
    assert [engine.generate(ids, SS).token_ids for ids in PROMPTS] == plain, f"{family} {precision}"
    assert [r.token_ids for r in engine.generate_batch(PROMPTS, SS)] == plain, f"{family} {precision} batch"


def test_the_layer_path_is_named(family_dir):
    """`--json` and the lab's model line say which path the layers take; a module path says why."""
    family, path, _ = family_dir
    where = compat.layer_path(_engine(path, "fp32").model)
    assert where["path"] in ("kernel", "modules")
    if where["path"] == "modules":
        assert where["why"] and "\n" not in where["why"]
    if not compat.families.FAMILIES[family].kernel_steps:  # layer forms the kernel's whole-layer steps do not compute
        assert where["path"] == "modules" and compat.families.FAMILIES[family].name in where["why"], where
    else:  # Qwen3, Phi-3, OLMo 2: every layer one kernel call (kernels/steps/layer_forms.py)
        assert where["path"] == "kernel", where


def test_medusa_heads_and_traces(family_dir):
    """Medusa heads draft on each family's final hidden states, the tree verifier keeps the output exact, and the
    speculative trace of a family's decoding is one the lab and `trace` accept."""
    from dataclasses import replace

    from specstream_core.decoding.drafters.medusa import MedusaDrafter
    from specstream_core.decoding.trace import validate
    from specstream_core.model.medusa_heads import MedusaHeads

    family, path, refs = family_dir
    engine = _engine(path, "fp32")
    heads = MedusaHeads.fresh(engine.model, 3)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in heads.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    for ids, ref in zip(PROMPTS, refs):
        assert engine.generate(ids, SS, MedusaDrafter(heads, engine.logits, (3, 2, 1), budget=16)).token_ids == ref
    trace = engine.generate(PROMPTS[0], replace(SS, trace=True)).trace
    assert validate(trace) and [t for s in trace["steps"] for t in s["emitted"]] == refs[0], family


def test_json_names_the_layer_path(family_dir, capsys):
    """`generate --json` says which path the decoder layers took, and why where it is the modules."""
    import json

    family, path, _ = family_dir
    argv = ["generate", "--base", path, "--raw", "--prompt", "abc", "--gamma", "3", "--max-new-tokens", "4",
            "--precision", "fp32", "--json", "--no-warmup"]
    capsys.readouterr()
    assert cli.main(argv) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["layers"] == compat.layer_path(_engine(path, "fp32").model), family
