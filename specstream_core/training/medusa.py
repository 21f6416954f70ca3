"""Training Medusa-style heads (`model/medusa_heads.py`) on the frozen base, and their τ estimate.

Head k is trained to predict y_{t+1+k} from the final-normed main hidden state at t, with loss weight
decay^(k-1) (Medusa's λ_k); the loop is the shared one (`training/loop.py`), and a checkpoint every
`checkpoint_every` steps (atomic, `checkpoint.save_run`) lets a killed run resume where it stopped.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict

import torch
import torch.nn.functional as F

from specstream_core.model import compat, masks, msa
from specstream_core.model.medusa_heads import MedusaConfig, MedusaHeads
from specstream_core.training import checkpoint as ckpt_io
from specstream_core.training.config import MedusaTrainConfig
from specstream_core.training.data import IGNORE, shifted_targets
from specstream_core.training.evaluate import Tally
from specstream_core.training.loop import LoopState, TrainLoop, linear_schedule

CHECKPOINT = os.path.join("checkpoint", "medusa.pt")


def base_hidden(model, ids: torch.Tensor) -> torch.Tensor:
    """Final-normed main hidden states [B, T, d] of the frozen base: exactly what decoding sees."""
    B, T = ids.shape
    positions = torch.arange(T, device=ids.device).expand(B, T)
    with torch.no_grad():
        return msa.forward(model, ids, positions, masks.causal_visibility(T, B, ids.device),
                           window=compat.sliding_window(model.config)).main


def medusa_loss(model, heads: MedusaHeads, ids: torch.Tensor, weight: torch.Tensor, decay: float = 0.8):
    hidden = base_hidden(model, ids)
    head = compat.lm_head(model)
    loss = hidden.new_zeros((), dtype=torch.float32)
    parts = {}
    for k, block in enumerate(heads.blocks, start=1):
        targets = shifted_targets(ids, weight, 1 + k)
        valid = targets != IGNORE
        if not bool(valid.any()):
            continue
        lk = F.cross_entropy(head(block(hidden[valid])).float(), targets[valid])
        loss = loss + decay ** (k - 1) * lk
        parts[f"h{k}"] = lk.detach()
    return loss, parts


@torch.no_grad()
def evaluate_heads(model, heads: MedusaHeads, ids: torch.Tensor, weight: torch.Tensor,
                   topk: tuple[int, ...] = (1, 1, 1, 1), batch_size: int = 8) -> dict:
    """Per-head top-1 / top-k accuracy on answer tokens and the τ estimate for the tree `topk`
    (`evaluate.Tally`, as for stream sets)."""
    tally = Tally(heads.cfg.num_heads, topk)
    head = compat.lm_head(model)
    for start in range(0, ids.shape[0], batch_size):
        x, w = ids[start:start + batch_size], weight[start:start + batch_size]
        hidden = base_hidden(model, x)
        tally.start(shifted_targets(x, w, 1) != IGNORE)
        for k, block in enumerate(heads.blocks, start=1):
            tally.add(k, head(block(hidden)).topk(tally.k(k), dim=-1).indices, shifted_targets(x, w, 1 + k))
        tally.end()
    return tally.summary("head")


def train_heads(model, cfg: MedusaTrainConfig, train_data, out_dir: str, eval_data=None, progress: bool = True,
                extra: dict | None = None, use_accelerate: bool = True, log=print, resume: bool = False) -> dict:
    """Train K heads on packed (ids, answer mask) with the base frozen; writes `out_dir` (`resume`: continue
    from its checkpoint)."""
    torch.manual_seed(cfg.seed)
    for p in model.parameters():
        p.requires_grad_(False)
    model.eval()
    heads = MedusaHeads.fresh(model, cfg.num_heads).to(next(model.parameters()).device)
    optimizer = torch.optim.AdamW(heads.parameters(), lr=cfg.lr, weight_decay=0.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, linear_schedule(cfg.warmup, cfg.steps))
    accelerator, heads, optimizer = _accelerated(heads, optimizer, use_accelerate)
    device = next(model.parameters()).device
    ids, weight = train_data
    gen = torch.Generator().manual_seed(cfg.seed)
    raw = accelerator.unwrap_model(heads) if accelerator else heads
    trained, path, state = dict(raw.named_parameters()), os.path.join(out_dir, CHECKPOINT), LoopState()
    if resume:
        state = LoopState(**ckpt_io.restore_run(path, cfg, trained, optimizer, scheduler, gen, "Medusa checkpoint"))
        log(f"resumed from step {state.step}")
    t_start = time.time()

    def one_step(step: int):
        idx = torch.randint(0, ids.shape[0], (cfg.batch_size,), generator=gen)
        x, w = ids[idx].to(device), weight[idx].to(device)
        loss, parts = medusa_loss(model, raw, x, w, cfg.decay)
        return loss, parts, x.numel()

    def save_checkpoint(st: LoopState) -> None:
        ckpt_io.save_run(path, cfg, st, trained, optimizer, scheduler, gen)

    state = TrainLoop(optimizer, list(raw.parameters()), cfg.steps, minutes=cfg.minutes, log_every=cfg.log_every,
                      scheduler=scheduler, backward=accelerator.backward if accelerator else None,
                      checkpoint=save_checkpoint, checkpoint_every=cfg.checkpoint_every,
                      progress=progress, desc="train medusa", log=log, state=state).run(one_step)
    raw.cfg = MedusaConfig(**{**asdict(raw.cfg), "trained_steps": state.step})
    summary = {"config": asdict(cfg), "steps": state.step, "train_seconds": round(state.elapsed, 1),
               "wall_seconds_this_run": round(time.time() - t_start, 1), "history": state.history,
               "extra_parameters": raw.extra_parameter_count()}
    raw.eval()
    if eval_data is not None:
        summary["eval"] = {f"topk={','.join(map(str, t))}": evaluate_heads(model, raw, *eval_data, topk=t)
                           for t in ((1, 1, 1, 1), (2, 2, 1, 1), (3, 2, 2, 1))}
    raw.save(out_dir, extra={"eval": summary.get("eval"), "steps": summary["steps"], **(extra or {})})
    with open(os.path.join(out_dir, "train_log.json"), "w") as f:
        json.dump(summary, f, indent=1)
    return summary


def _accelerated(heads, optimizer, use: bool):
    """(accelerator or None, heads, optimizer): prepared by accelerate when asked and installed."""
    if use:
        try:
            from accelerate import Accelerator
        except ImportError:
            return None, heads, optimizer
        accelerator = Accelerator()
        heads, optimizer = accelerator.prepare(heads, optimizer)
        return accelerator, heads, optimizer
    return None, heads, optimizer
