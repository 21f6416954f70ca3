"""The default precision a user can check: on any base but the bundled model, `generate --mode ss` with no precision
flag runs the checkpoint's own dtype, so its output equals transformers' greedy `generate` on that checkpoint as
transformers loads it; faster precisions are named on stderr; every result says what its output equals."""

import json
import warnings

import pytest
import torch

from specstream_core.cli import main
from specstream_core.decoding.trace import load_trace
from specstream_core.kernels.linears import int4_a8, rowinv
from specstream_core.model import exactness, loading
from tiny_models import tiny_model

FAMILIES = ("llama", "qwen2", "mistral")
NEW_TOKENS = 16
needs_kernel = pytest.mark.skipif(not rowinv.available(), reason=rowinv.unavailable_reason() or "no kernel")


def save_checkpoint(path, family: str, dtype: torch.dtype = torch.float32, logit_scale: float = 4.0) -> str:
    """A tiny random checkpoint with a character tokenizer, saved as a user's model would be. logit_scale 4: the
    fp32 logits keep a clear top-2 margin (checked below), yet bf16 weights flip a token on some prompt."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **{chr(97 + i): 3 + i for i in range(26)}, " ": 29}
    vocab.update({f"w{i}": 30 + i for i in range(98)})
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), "isolated")
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                            pad_token="<pad>").save_pretrained(path)
    tiny_model(family, seed=3, logit_scale=logit_scale).to(dtype).save_pretrained(path)
    return str(path)


# random letters; on each family's checkpoint bf16 weights change the answer to at least one of them
PROMPTS = ("xlzw xuqa o", "ubfdlphmrd", "axgnifymfy", "ettoe", "cjl jpwkfppwf", "yh olq", "iulx nl fwolkq",
           "vnjtryuixagfsotufhy")


def cli_generate(capsys, base: str, prompt: str, *flags: str) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fresh streams
        code = main(["generate", "--base", base, "--prompt", prompt, "--mode", "ss", "--max-new-tokens",
                     str(NEW_TOKENS), "--gamma", "3", "--json", *flags])
    out = capsys.readouterr().out
    assert code == 0
    return json.loads(out)


def transformers_greedy(base: str, prompt: str, **load) -> tuple[list[int], float]:
    """transformers' own greedy generate on the checkpoint (its default dtype unless `load` says), cut after the
    first EOS as the CLI stops there; and the smallest top-2 logit margin along the way."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(base, **load).eval()
    ids = AutoTokenizer.from_pretrained(base)(prompt, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=NEW_TOKENS,
                             output_scores=True, return_dict_in_generate=True, pad_token_id=0)
    tokens = out.sequences[0, ids.shape[1]:].tolist()
    if 2 in tokens:
        tokens = tokens[: tokens.index(2) + 1]
    top2 = [s[0].float().topk(2).values for s in out.scores[: len(tokens)]]
    return tokens, min(float(t[0] - t[1]) for t in top2)


@pytest.mark.parametrize("family", FAMILIES)
def test_generate_by_default_equals_transformers_greedy_generate(tmp_path, capsys, family):
    """No precision flag: auto runs the fp32 checkpoint in fp32 and every prompt's tokens are transformers'. With
    --dtype bf16 (what auto used to choose) some prompt's tokens differ, so the test fails if auto picked bf16."""
    base = save_checkpoint(tmp_path / family, family)
    assert loading.checkpoint_dtype(base) == "float32"
    differs = 0
    for prompt in PROMPTS:
        reference, margin = transformers_greedy(base, prompt)
        assert margin > 5e-4, "a near-tie: rounding, not the precision, would decide this prompt"
        got = cli_generate(capsys, base, prompt)
        assert got["precision"] == "fp32" and got["exact"]
        assert got["token_ids"] == reference, prompt
        assert got["equals"] == got["stats"]["equals"] == "transformers greedy generate at fp32"
        if rowinv.available():
            bf16 = cli_generate(capsys, base, prompt, "--dtype", "bf16")
            assert bf16["equals"] == "plain decoding at bf16"
            differs += bf16["token_ids"] != reference
    assert differs or not rowinv.available(), "bf16 equals transformers here: the test could not see a wrong default"


@needs_kernel
def test_a_bf16_checkpoint_runs_its_own_weights_with_fp32_sums(tmp_path, capsys):
    """A bf16 checkpoint: bf16 weights on the kernel, every sum in fp32, which is transformers' generate on the
    checkpoint loaded in fp32 (its bf16 weights widened exactly)."""
    base = save_checkpoint(tmp_path / "bf16", "qwen2", torch.bfloat16)
    assert loading.checkpoint_dtype(base) == "bfloat16"
    assert loading.resolve_precision("auto", base=base) == "bf16"
    assert loading.resolve_precision("auto", "cpu", "torch", base=base) == "fp32"  # bf16 through torch: not exact
    for prompt in PROMPTS[:4]:
        reference, margin = transformers_greedy(base, prompt, dtype=torch.float32)
        assert margin > 5e-4
        got = cli_generate(capsys, base, prompt)
        assert got["precision"] == "bf16" and got["token_ids"] == reference
        assert got["equals"] == "transformers greedy generate at fp32 on the checkpoint's bf16 weights"


def test_checkpoint_dtype_as_transformers_reads_it(tmp_path):
    """The config's dtype, else the weights' own (transformers' dtype="auto"); fp16 and unknown run fp32."""
    base = save_checkpoint(tmp_path / "m", "llama", torch.float16)
    assert loading.checkpoint_dtype(base) == "float16"
    assert loading.resolve_precision("auto", base=base) == "fp32"
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    config.pop("dtype", None)
    config.pop("torch_dtype", None)
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    assert loading.checkpoint_dtype(base) == "float16"  # from the safetensors header
    assert loading.checkpoint_dtype(str(tmp_path / "nowhere")) is None
    assert loading.resolve_precision("auto") == loading.resolve_precision("auto", base=str(tmp_path)) == "fp32"
    assert loading.checkpoint_precision("bfloat16", "cuda") == "bf16"  # as transformers computes it there
    assert loading.checkpoint_precision("float32", "cuda") == "fp32"


def test_the_label_says_what_the_output_equals():
    label = exactness.label
    assert label("fp32") == label("fp32", kernel=True) == "transformers greedy generate at fp32"
    assert label("bf16", kernel=True, checkpoint="bfloat16") == ("transformers greedy generate at fp32 on the "
                                                                 "checkpoint's bf16 weights")
    assert label("bf16", kernel=True, checkpoint="float32") == "plain decoding at bf16"
    assert label("int4-a8", kernel=True, bundled=True) == ("plain decoding at int4-a8 (the bundled model's fastest "
                                                           "measured precision)")
    assert label("int4-a8", kernel=True) == "plain decoding at int4-a8"
    assert label("fp32", greedy=False) == "the model's sampling distribution at fp32"
    assert label("bf16") == "measured, not proven: plain decoding at bf16 (a near-tie can flip a token)"
    assert label("bf16", speculative=False) == "plain decoding at bf16"  # plain decoding is itself
    assert label("fp32", "cuda") == "measured, not proven: transformers greedy generate at fp32"
    assert label("nf4", "cuda:0").startswith("measured, not proven: plain decoding at nf4")
    assert label("nf4", "cuda:0", speculative=False) == "plain decoding at nf4"
    assert label("fp32", "cuda", speculative=False).startswith("measured, not proven: transformers")
    assert label("fp32", adapted=True) == ("transformers greedy generate at fp32, with the shared set's LoRA merged "
                                           "into the base")


@needs_kernel
def test_the_cli_names_faster_precisions_on_one_stderr_line(tmp_path, capsys):
    base = save_checkpoint(tmp_path / "m", "llama")
    args = ["generate", "--base", base, "--prompt", "abc", "--max-new-tokens", "4", "--gamma", "2"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(args) == 0
        err = capsys.readouterr().err
        hint = [line for line in err.splitlines() if line.startswith("note: auto ran fp32")]
        four = "int4-a8" if int4_a8.available() else "int4"
        assert len(hint) == 1, err
        assert "--precision bf16 (plain decoding at bf16)" in hint[0]
        assert f"--precision {four} (plain decoding at {four})" in hint[0]
        assert "equals transformers greedy generate at fp32" in hint[0]
        assert "output equals transformers greedy generate at fp32" in err  # the summary line
        for flags in (["--precision", "fp32"], ["--precision", "bf16"], ["--precision", four]):  # asked for: no hint
            assert main(args + flags) == 0
            assert "note: auto ran" not in capsys.readouterr().err


def test_traces_carry_the_label_and_older_traces_still_load(tmp_path, capsys):
    base = save_checkpoint(tmp_path / "m", "mistral")
    trace = tmp_path / "trace.json"
    got = cli_generate(capsys, base, "abc", "--dtype", "fp32", "--trace", str(trace))
    assert load_trace(str(trace))["meta"]["equals"] == got["equals"] == "transformers greedy generate at fp32"
    data = json.loads(trace.read_text())
    del data["meta"]["equals"]
    assert "equals" not in load_trace(data)["meta"]
    data["meta"]["equals"] = 5
    with pytest.raises(Exception, match="meta.equals"):
        load_trace(data)


def test_the_lab_model_line_says_what_the_output_equals(tmp_path):
    from app.models import ModelSpec
    from app.render import model_info

    base = save_checkpoint(tmp_path / "m", "llama")
    line = model_info(ModelSpec("m", base), "lossless")
    assert "precision fp32" in line and "greedy output equals transformers greedy generate at fp32" in line
    assert exactness.for_base(base, "int4-a8").startswith("plain decoding at int4-a8")
