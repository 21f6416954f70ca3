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
from dataclasses import asdict

import torch
import torch.nn.functional as F

from specstream_core.model import compat, layer_draft
from specstream_core.model.stream_config import ADAPTER_TARGETS
from specstream_core.training import checkpoint as ckpt_io
from specstream_core.training.config import DraftTrainConfig
from specstream_core.training.data import IGNORE, shifted_targets
from specstream_core.training.loop import LoopState, TrainLoop, linear_schedule
from specstream_core.training.objectives import to_draft_ids

CHECKPOINT = os.path.join("checkpoint", "draft.pt")


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
    trained = {n: p for n, p in model.named_parameters() if p.requires_grad}
    params = list(trained.values())
    optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, linear_schedule(cfg.warmup, cfg.steps))
    gen = torch.Generator().manual_seed(cfg.seed)
    state = LoopState()
    path = os.path.join(out_dir, CHECKPOINT)
    if resume:
        state = LoopState(**ckpt_io.restore_run(path, cfg, trained, optimizer, scheduler, gen, "draft checkpoint"))
        log(f"resumed from step {state.step}")
    ids, weight = train_data
    device = next(model.parameters()).device

    def one_step(step: int):
        idx = torch.randint(0, ids.shape[0], (cfg.batch_size,), generator=gen)
        x, w = ids[idx].to(device), weight[idx].to(device)
        loss, parts = draft_loss(model, x, w)
        return loss, parts, x.numel()

    def save_checkpoint(st: LoopState) -> None:
        ckpt_io.save_run(path, cfg, st, trained, optimizer, scheduler, gen)

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

