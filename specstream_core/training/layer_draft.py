"""Training the layer draft (`model/layer_draft.py`) for transformers' assisted generation.

The draft (the base's first K layers, a LoRA on their Linears, trainable norms, a head over the draft
vocabulary) learns to predict the base's own greedy next token: cross-entropy on self-distilled
answers, over the draft vocabulary. The base stays frozen and is not used after the draft is built.
The loop is the shared one (`training/loop.py`); a checkpoint every `checkpoint_every` steps (atomic)
lets a killed run resume where it stopped, bit for bit.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

from specstream_core.errors import SpecstreamError
from specstream_core.model import compat, layer_draft
from specstream_core.model.stream_config import ADAPTER_TARGETS
from specstream_core.training import checkpoint as ckpt_io
from specstream_core.training.data import IGNORE, shifted_targets
from specstream_core.training.loop import LoopState, TrainLoop, linear_schedule
from specstream_core.training.objectives import to_draft_ids

CHECKPOINT = os.path.join("checkpoint", "draft.pt")


@dataclass(frozen=True)
class DraftTrainConfig:
    n_layers: int = 4
    lora_rank: int = 32
    steps: int = 600
    minutes: float = 0.0
    batch_size: int = 4
    seq_len: int = 256
    lr: float = 2e-3
    warmup: int = 20
    seed: int = 0
    log_every: int = 10
    checkpoint_every: int = 50


def with_adapter(draft, rank: int):
    """The draft wrapped with a trainable peft LoRA on its Linears; its norms train whole."""
    from peft import LoraConfig, get_peft_model

    for p in draft.parameters():
        p.requires_grad_(False)
    config = LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0, target_modules=list(ADAPTER_TARGETS),
                        modules_to_save=["input_layernorm", "post_attention_layernorm", "norm"])
    return get_peft_model(draft, config)


def draft_loss(model, ids: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """Cross-entropy of the draft's next token against the base's own (the distilled answer), over the
    draft vocabulary; answer tokens outside it are skipped (the draft could never propose them)."""
    head = compat.lm_head(model)
    hidden = compat.inner_model(model)(input_ids=ids).last_hidden_state
    targets = to_draft_ids(head.ids, shifted_targets(ids, weight, 1), head.vocab_size)
    valid = targets != IGNORE
    if not bool(valid.any()):
        return hidden.sum() * 0.0, {}
    logits = head.draft_logits(hidden[valid]).float()
    loss = F.cross_entropy(logits, targets[valid])
    return loss, {"top1": (logits.argmax(-1) == targets[valid]).float().mean().detach()}


@torch.no_grad()
def agreement(model, ids: torch.Tensor, weight: torch.Tensor, batch_size: int = 8) -> float:
    """Share of answer tokens whose draft argmax is the base's greedy token (tokens outside the draft
    vocabulary count as misses): the chance that one drafted token is accepted."""
    head = compat.lm_head(model)
    hits = total = 0
    for start in range(0, ids.shape[0], batch_size):
        x, w = ids[start:start + batch_size], weight[start:start + batch_size]
        targets = shifted_targets(x, w, 1)
        valid = targets != IGNORE
        hidden = compat.inner_model(model)(input_ids=x).last_hidden_state[valid]
        hits += int((head.ids[head.draft_logits(hidden).argmax(-1)] == targets[valid]).sum())
        total += int(valid.sum())
    return hits / max(1, total)


def train_draft(base_model, cfg: DraftTrainConfig, vocab: list[int], train_data, out_dir: str, eval_data=None,
                resume: bool = False, progress: bool = True, extra: dict | None = None, log=print) -> dict:
    """Build the draft from `base_model`, train it on packed (ids, answer mask), write `out_dir`."""
    torch.manual_seed(cfg.seed)
    model = with_adapter(layer_draft.truncated(base_model, cfg.n_layers, vocab), cfg.lora_rank)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, linear_schedule(cfg.warmup, cfg.steps))
    gen = torch.Generator().manual_seed(cfg.seed)
    state = LoopState()
    path = os.path.join(out_dir, CHECKPOINT)
    if resume:
        state = _restore(path, cfg, model, optimizer, scheduler, gen)
        log(f"resumed from step {state.step}")
    ids, weight = train_data
    device = next(model.parameters()).device

    def one_step(step: int):
        idx = torch.randint(0, ids.shape[0], (cfg.batch_size,), generator=gen)
        x, w = ids[idx].to(device), weight[idx].to(device)
        loss, parts = draft_loss(model, x, w)
        return loss, parts, x.numel()

    def save_checkpoint(st: LoopState) -> None:
        trained = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
        ckpt_io.save_atomic({"config": asdict(cfg), "step": st.step, "elapsed": st.elapsed, "tokens": st.tokens,
                             "history": st.history, "trained": trained, "optimizer": optimizer.state_dict(),
                             "scheduler": scheduler.state_dict(), "data_rng": gen.get_state()}, path)

    t_start = time.time()
    loop = TrainLoop(optimizer, params, cfg.steps, minutes=cfg.minutes, log_every=cfg.log_every,
                     scheduler=scheduler, checkpoint=save_checkpoint, checkpoint_every=cfg.checkpoint_every,
                     progress=progress, desc="train draft", log=log, state=state)
    state = loop.run(one_step)
    model.eval()
    summary = {"config": asdict(cfg), "steps": state.step, "train_seconds": round(state.elapsed, 1),
               "wall_seconds_this_run": round(time.time() - t_start, 1), "history": state.history,
               "draft_parameters": layer_draft.parameter_count(model)}
    if eval_data is not None:
        summary["eval"] = {"agreement": agreement(model, *eval_data)}
    model.save_pretrained(os.path.join(out_dir, layer_draft.LORA_SUBDIR))
    layer_draft.save_config(out_dir, cfg.n_layers, cfg.lora_rank, vocab,
                            extra={"eval": summary.get("eval"), "steps": state.step, **(extra or {})})
    with open(os.path.join(out_dir, "train_log.json"), "w") as f:
        json.dump(summary, f, indent=1)
    return summary


def _restore(path: str, cfg: DraftTrainConfig, model, optimizer, scheduler, gen) -> LoopState:
    saved = ckpt_io.load(path, "draft checkpoint")
    old = {k: v for k, v in saved["config"].items() if k not in ("steps", "minutes")}
    new = {k: v for k, v in asdict(cfg).items() if k not in ("steps", "minutes")}
    if old != new:
        changed = sorted(k for k in new if old.get(k) != new[k])
        raise SpecstreamError(f"the checkpoint in {path} was made with other settings ({', '.join(changed)})")
    named = dict(model.named_parameters())
    with torch.no_grad():
        for name, value in saved["trained"].items():
            named[name].copy_(value)
    optimizer.load_state_dict(saved["optimizer"])
    scheduler.load_state_dict(saved["scheduler"])
    gen.set_state(saved["data_rng"])
    return LoopState(step=saved["step"], elapsed=saved["elapsed"], tokens=saved["tokens"], history=saved["history"])
