"""A draft model for transformers' assisted generation, made from the base model itself.

The draft is the base's first K decoder layers with a trained low-rank delta (a peft LoRA) on their
Linears and trained norms, followed by an LM head cut to a draft vocabulary: the K most frequent
answer tokens (logits elsewhere are the lowest float, so the draft never proposes them). It shares the
base's tokenizer and vocabulary ids, so transformers' `generate(assistant_model=draft)` takes it as is.

Why this shape: a separate small model would need its own pretraining, which this project cannot do
on a CPU for a real tokenizer; the base's own lower layers already read the prompt in the base's
terms. Its cost per drafted token is K/N of the layers plus a head of K_vocab rows instead of the
whole vocabulary (on SmolLM2 the full head alone is a fifth of a pass).

On disk the draft is only what training changed (`lora/`, a few MB) and `draft_config.json`
(layers, draft vocabulary); `load(directory, base_model)` rebuilds it from the base.
"""

from __future__ import annotations

import copy
import json
import os
import warnings

import torch
from torch import nn

from specstream_core.errors import SpecstreamError
from specstream_core.model import compat
from specstream_core.model.loading import LoadConfig, load_model

CONFIG_NAME = "draft_config.json"
FORMAT_VERSION = 1
LORA_SUBDIR = "lora"


class VocabHead(nn.Module):
    """Full-vocabulary logits computed from the draft vocabulary's rows only; every other id gets the
    lowest float (never the argmax, weight zero under sampling)."""

    def __init__(self, rows: torch.Tensor, ids: list[int] | torch.Tensor, vocab_size: int):
        super().__init__()
        self.weight = nn.Parameter(rows.detach().clone(), requires_grad=False)  # [k, d]
        self.register_buffer("ids", torch.as_tensor(ids, dtype=torch.long), persistent=False)
        self.vocab_size = vocab_size

    def draft_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[..., k]: logits over the draft vocabulary (training and evaluation)."""
        return nn.functional.linear(hidden, self.weight)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        sub = self.draft_logits(hidden)
        out = sub.new_full((*sub.shape[:-1], self.vocab_size), torch.finfo(sub.dtype).min)
        return out.index_copy_(-1, self.ids, sub)


def truncated(base_model, n_layers: int, vocab: list[int]):
    """A new causal LM of the base's class: its embedding, first `n_layers` layers and final norm (copies),
    and a `VocabHead` over `vocab`. The base is left untouched."""
    base = compat.causal_lm(base_model)
    layers = compat.decoder_layers(base)
    if not 1 <= n_layers < len(layers):
        raise SpecstreamError(f"a layer draft needs 1 to {len(layers) - 1} layers of this {len(layers)}-layer model, "
                              f"got {n_layers}")
    config = copy.deepcopy(base.config)
    config.num_hidden_layers = n_layers
    config.tie_word_embeddings = False
    if isinstance(getattr(config, "layer_types", None), list):
        config.layer_types = config.layer_types[:n_layers]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        draft = type(base)(config)
    state = {k: v for k, v in base.state_dict().items() if _kept(k, n_layers)}
    missing = [k for k in draft.load_state_dict(state, strict=False).missing_keys if not k.startswith("lm_head")]
    if missing:
        raise SpecstreamError(f"cannot build a layer draft of this model: {missing[:3]} have no source")
    head = compat.lm_head(base).weight.detach()
    ids = torch.as_tensor(vocab, dtype=torch.long)
    draft.lm_head = VocabHead(head[ids].float(), ids, config.vocab_size)
    draft.to(next(base.parameters()).device)
    return draft.eval()


def _kept(key: str, n_layers: int) -> bool:
    if key.startswith("lm_head"):
        return False
    marker = ".layers."
    if marker not in key:
        return True
    return int(key.split(marker, 1)[1].split(".", 1)[0]) < n_layers


def save_config(directory: str, n_layers: int, rank: int, vocab: list[int], extra: dict | None = None) -> None:
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, CONFIG_NAME), "w") as f:
        json.dump({"format_version": FORMAT_VERSION, "kind": "layer-draft", "n_layers": n_layers, "lora_rank": rank,
                   "extra": extra or {}, "vocab": [int(t) for t in vocab]}, f)


def read_config(directory: str) -> dict:
    path = os.path.join(directory, CONFIG_NAME)
    try:
        with open(path) as f:
            cfg = json.load(f)
    except (OSError, ValueError) as exc:
        raise SpecstreamError(f"cannot read the draft config {path}: {exc}") from None
    if not isinstance(cfg, dict) or cfg.get("kind") != "layer-draft" or cfg.get("format_version") != FORMAT_VERSION:
        raise SpecstreamError(f"{path} is not a layer draft of format {FORMAT_VERSION}")
    if not isinstance(cfg.get("n_layers"), int) or not isinstance(cfg.get("vocab"), list) or not cfg["vocab"]:
        raise SpecstreamError(f"{path} lacks n_layers or a draft vocabulary")
    return cfg


def is_layer_draft(directory: str) -> bool:
    return os.path.isfile(os.path.join(directory, CONFIG_NAME))


def load(directory: str, base_model):
    """The draft saved in `directory`, rebuilt from `base_model` (the same base it was trained on)."""
    cfg = read_config(directory)
    vocab_size = compat.causal_lm(base_model).config.vocab_size
    if max(cfg["vocab"]) >= vocab_size or min(cfg["vocab"]) < 0:
        raise SpecstreamError(f"the draft in {directory} has token ids outside this model's vocabulary")
    draft = truncated(base_model, cfg["n_layers"], cfg["vocab"])
    lora = os.path.join(directory, LORA_SUBDIR)
    if not os.path.isdir(lora):
        return draft
    try:
        from peft import PeftModel

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            merged = PeftModel.from_pretrained(draft, lora).merge_and_unload()
    except (OSError, ValueError, RuntimeError, KeyError) as exc:
        raise SpecstreamError(f"cannot load the draft's adapter in {lora}: {str(exc).splitlines()[0]}") from None
    return merged.eval()


def parameter_count(draft) -> int:
    """What the draft adds beside the base at decode time: its layers, norms and head rows (the
    embedding table is the base's own, copied)."""
    embed = compat.inner_model(draft).embed_tokens.weight
    return sum(p.numel() for p in draft.parameters() if p is not embed)


def load_assistant(directory: str, base: str, device: str = "cpu"):
    """(draft model, the parameters it adds) for `generate(assistant_model=...)`: a layer draft is rebuilt
    from the base (loaded here in fp32); any other directory is a causal LM of its own."""
    if is_layer_draft(directory):
        draft = load(directory, load_model(LoadConfig(base, precision="fp32", device=device)))
        return draft, parameter_count(draft)
    from transformers import AutoModelForCausalLM

    draft = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).to(device).eval()
    return draft, sum(p.numel() for p in draft.parameters())
