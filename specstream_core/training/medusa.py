"""Training Medusa-style heads (`model/medusa_heads.py`) on the frozen base, and their τ estimate.

Head k is trained to predict y_{t+1+k} from the final-normed main hidden state at t, with loss weight
decay^(k-1) (Medusa's λ_k); the loop is the shared one (`training/loop.py`).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

from specstream_core.model import compat, masks, msa
from specstream_core.model.medusa_heads import MedusaConfig, MedusaHeads
from specstream_core.training.data import IGNORE, shifted_targets

# ---- training ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class MedusaTrainConfig:
    num_heads: int = 4
    steps: int = 400
    minutes: float = 0.0
    batch_size: int = 8
    seq_len: int = 256
    lr: float = 1e-3
    warmup: int = 20
    decay: float = 0.8  # loss weight of head k: decay^(k-1) (Medusa's λ_k)
    seed: int = 0
    log_every: int = 10


def base_hidden(model, ids: torch.Tensor) -> torch.Tensor:
    """Final-normed main hidden states [B, T, d] of the frozen base: exactly what decoding sees."""
    B, T = ids.shape
    positions = torch.arange(T, device=ids.device).expand(B, T)
    with torch.no_grad():
        return msa.forward(model, ids, positions, masks.causal_visibility(T, B, ids.device)).main


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
    """Per-head top-1 / top-k accuracy on answer tokens and a τ estimate for the tree `topk`
    (depth j counts when heads 1..j all hold the true token in their top-k_j, plus the bonus)."""
    K = heads.cfg.num_heads
    depth = min(K, len(topk))
    head = compat.lm_head(model)
    hits1, hitsk, counts = torch.zeros(K), torch.zeros(K), torch.zeros(K)
    accepted_sum, positions_n = 0.0, 0
    for start in range(0, ids.shape[0], batch_size):
        x, w = ids[start:start + batch_size], weight[start:start + batch_size]
        hidden = base_hidden(model, x)
        alive = shifted_targets(x, w, 1) != IGNORE
        base_valid = alive.clone()
        accepted = torch.zeros(x.shape, dtype=torch.float32)
        for k, block in enumerate(heads.blocks, start=1):
            t = shifted_targets(x, w, 1 + k)
            valid = t != IGNORE
            top = head(block(hidden)).topk(max(topk[k - 1] if k - 1 < len(topk) else 1, 1), dim=-1).indices
            in1, ink = top[..., 0] == t, (top == t[..., None]).any(-1)
            hits1[k - 1] += float(in1[valid].sum())
            hitsk[k - 1] += float(ink[valid].sum())
            counts[k - 1] += float(valid.sum())
            if k <= depth:
                alive &= ink & valid
                accepted += alive.float()
        accepted_sum += float(accepted[base_valid].sum())
        positions_n += int(base_valid.sum())
    safe = counts.clamp(min=1)
    return {"head_top1": (hits1 / safe).tolist(), "head_topk": (hitsk / safe).tolist(), "topk": list(topk[:depth]),
            "tau_estimate": 1.0 + accepted_sum / max(1, positions_n)}


def train_heads(model, cfg: MedusaTrainConfig, train_data, out_dir: str, eval_data=None, progress: bool = True,
                extra: dict | None = None, use_accelerate: bool = True, log=print) -> dict:
    """Train K heads on packed (ids, answer mask) with the base frozen; writes `out_dir`."""
    from tqdm.auto import tqdm

    torch.manual_seed(cfg.seed)
    for p in model.parameters():
        p.requires_grad_(False)
    model.eval()
    heads = MedusaHeads.fresh(model, cfg.num_heads).to(next(model.parameters()).device)
    optimizer = torch.optim.AdamW(heads.parameters(), lr=cfg.lr, weight_decay=0.0)

    def schedule(step):
        if step < cfg.warmup:
            return (step + 1) / cfg.warmup
        return max(0.05, 1 - (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    accelerator = None
    if use_accelerate:
        try:
            from accelerate import Accelerator

            accelerator = Accelerator()
            heads, optimizer = accelerator.prepare(heads, optimizer)
        except ImportError:
            accelerator = None
    device = next(model.parameters()).device
    ids, weight = train_data
    gen = torch.Generator().manual_seed(cfg.seed)
    deadline = time.time() + cfg.minutes * 60 if cfg.minutes else None
    t_start, history, tokens = time.time(), [], 0
    bar = tqdm(total=cfg.steps, disable=not progress, desc="train medusa", unit="step")
    step = 0
    raw = accelerator.unwrap_model(heads) if accelerator else heads
    for step in range(cfg.steps):
        idx = torch.randint(0, ids.shape[0], (cfg.batch_size,), generator=gen)
        x, w = ids[idx].to(device), weight[idx].to(device)
        loss, parts = medusa_loss(model, raw, x, w, cfg.decay)
        (accelerator.backward(loss) if accelerator else loss.backward())
        torch.nn.utils.clip_grad_norm_(raw.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        tokens += x.numel()
        if step % cfg.log_every == 0 or step == cfg.steps - 1:
            rec = {"step": step, "loss": loss.item(), **{k: v.item() for k, v in parts.items()},
                   "tokens_per_s": tokens / max(1e-9, time.time() - t_start)}
            history.append(rec)
            bar.set_postfix(loss=f"{rec['loss']:.3f}", tok_s=f"{rec['tokens_per_s']:.0f}")
        bar.update(1)
        if deadline and time.time() > deadline:
            log(f"time budget reached after {step + 1} steps")
            break
    bar.close()
    raw.cfg = MedusaConfig(**{**asdict(raw.cfg), "trained_steps": step + 1})
    summary = {"config": asdict(cfg), "steps": step + 1, "train_seconds": round(time.time() - t_start, 1),
               "history": history, "extra_parameters": raw.extra_parameter_count()}
    raw.eval()
    if eval_data is not None:
        summary["eval"] = {f"topk={','.join(map(str, t))}": evaluate_heads(model, raw, *eval_data, topk=t)
                           for t in ((1, 1, 1, 1), (2, 2, 1, 1), (3, 2, 2, 1))}
    raw.save(out_dir, extra={"eval": summary.get("eval"), "steps": summary["steps"], **(extra or {})})
    with open(os.path.join(out_dir, "train_log.json"), "w") as f:
        json.dump(summary, f, indent=1)
    return summary
