"""Training stream parameters with the Speculative Streaming objective (SPECSTREAM.md §3).

    L = α0·CE(main_t → y_t) + Σ_j αj·CE(stream_{t,j} → y_{t+j}) + αp·CE(prune_t → y_t)

- lossless mode: the base model is frozen (its weights stay bit-identical); trained are the stream
  embeddings, the stream-rows-only adapters and the pruning head. Layers below N−Ns run without
  autograd since nothing there can change.
- shared mode: a peft LoRA on every linear layer, shared by main and stream rows, trained with the
  full loss together with the stream embeddings and the pruning head; saved as `lora/` beside the
  streams (merged into the base weights when loaded for decoding).

accelerate handles device placement, mixed precision and several GPUs.

Checkpoints (`OUT/checkpoint/checkpoint.pt`, every `checkpoint_every` steps) are one file replaced
atomically (`checkpoint.save_atomic`): a kill at any moment leaves the previous or the new complete
checkpoint. Each holds the trainable tensors, the optimizer, scheduler and data-order RNG states (so a
resumed run is bit-identical to an uninterrupted one) and the run's identity: the base model's
fingerprint, the training settings and the data's fingerprint. `resume=True` checks all of them and the
tensor shapes, and names whatever differs; it is an error when there is no checkpoint.
"""

from __future__ import annotations

import json
import os
import random
import time
from dataclasses import asdict, dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from . import checkpoint, compat, masks, msa
from .errors import SpecstreamError
from .streams import LORA_DIR, ADAPTER_TARGETS, StreamParams

IGNORE = -100
CHECKPOINT_DIR = "checkpoint"
CHECKPOINT_FILE = "checkpoint.pt"
CHECKPOINT_VERSION = 2
# settings a resumed run may change (more steps: the learning-rate schedule is stretched from there on)
RESUME_MAY_CHANGE = ("steps", "minutes", "checkpoint_every", "log_every")


@dataclass(frozen=True)
class TrainConfig:
    mode: str = "lossless"  # lossless | shared
    gamma: int = 4
    n_stream_layers: int = 2
    adapter_rank: int = 16  # stream-rows-only LoRA (lossless)
    lora_rank: int = 16  # shared LoRA
    prune_rank: int = 8
    steps: int = 600
    minutes: float = 0.0  # stop early after this many minutes (0 = no limit)
    batch_size: int = 8
    seq_len: int = 256
    lr: float = 2e-3
    warmup: int = 30
    alpha_main: float = 1.0
    alpha_stream: float = 0.1
    alpha_prune: float = 0.1
    precision: str = "fp32"  # fp32 | bf16 autocast (bf16 is far slower on CPUs without AMX)
    seed: int = 0
    checkpoint_every: int = 100
    log_every: int = 10
    draft_vocab_size: int = 0  # streams score only the K most frequent answer tokens (0 = all)
    feature_cache_gb: float = 4.0  # lossless: keep the frozen layers' output per sequence, up to this size

    def __post_init__(self):
        if self.mode not in ("lossless", "shared"):
            raise SpecstreamError(f"--mode must be lossless or shared, got {self.mode!r}")
        if not 1 <= self.gamma <= 8:
            raise SpecstreamError(f"--gamma must be between 1 and 8, got {self.gamma}")
        if self.steps < 1 or self.batch_size < 1 or self.seq_len < 8:
            raise SpecstreamError("steps and batch size must be >= 1 and seq_len >= 8")


# ---- data ------------------------------------------------------------------------------------
def pack(examples: list[tuple[list[int], list[int]]], seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(prompt ids, answer ids) pairs -> packed ids [N, seq_len] and loss mask (answer tokens only)."""
    ids, weight = [], []
    for prompt, answer in examples:
        ids += prompt + answer
        weight += [0] * len(prompt) + [1] * len(answer)
    n = len(ids) // seq_len
    if n == 0:
        raise SpecstreamError(f"not enough training text for one sequence of {seq_len} tokens")
    ids_t = torch.tensor(ids[: n * seq_len]).view(n, seq_len)
    w_t = torch.tensor(weight[: n * seq_len], dtype=torch.bool).view(n, seq_len)
    return ids_t, w_t


def one_per_row(examples: list[tuple[list[int], list[int]]], seq_len: int,
                pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(prompt ids, answer ids) pairs -> ids [N, seq_len], one example a row, and the loss mask.

    Unlike `pack`, every answer token is seen after exactly its own prompt, as in decoding: a packed
    row would show an example after the tail of another one, and streams trained on the base model's
    own answers would learn predictions the base never makes. Longer examples lose their end; padding
    (right) carries no loss, and causal attention keeps it from touching the tokens before it."""
    rows = [(p + a)[:seq_len] for p, a in examples if a and len(p) < seq_len]
    if not rows:
        raise SpecstreamError(f"no example has answer tokens within {seq_len} tokens")
    ids = torch.full((len(rows), seq_len), pad_id, dtype=torch.long)
    weight = torch.zeros((len(rows), seq_len), dtype=torch.bool)
    i = 0
    for p, a in examples:
        if not a or len(p) >= seq_len:
            continue
        row = rows[i]
        ids[i, : len(row)] = torch.tensor(row)
        weight[i, len(p): len(row)] = True
        i += 1
    return ids, weight


def shifted_targets(ids: torch.Tensor, weight: torch.Tensor, shift: int) -> torch.Tensor:
    """Targets `shift` tokens ahead ([B, T]); positions without a (weighted) target are IGNORE."""
    B, T = ids.shape
    out = torch.full_like(ids, IGNORE)
    if shift < T:
        tgt = ids[:, shift:].clone()
        tgt[~weight[:, shift:]] = IGNORE
        out[:, : T - shift] = tgt
    return out


# ---- the objective -----------------------------------------------------------------------------
class StreamObjective(nn.Module):
    """Wraps model + streams so accelerate can prepare one module; forward returns (loss, parts)."""

    def __init__(self, model, streams: StreamParams, cfg: TrainConfig):
        super().__init__()
        self.model, self.streams, self.cfg = model, streams, cfg

    def forward(self, ids: torch.Tensor, weight: torch.Tensor, birth_hidden: torch.Tensor | None = None):
        B, T = ids.shape
        gamma = self.streams.cfg.gamma
        positions = torch.arange(T, device=ids.device).expand(B, T)
        visible = masks.causal_visibility(T, B, ids.device)
        # only positions with a stream target carry streams: fewer rows in the (1+γ)-wide layers
        carriers, pad = stream_carriers(weight, gamma)
        out = msa.forward(self.model, ids, positions, visible, streams=self.streams, carriers=carriers,
                          frozen_bottom=self.cfg.mode == "lossless", birth_hidden=birth_hidden)
        head = compat.lm_head(self.model)
        parts = {}
        loss = ids.new_zeros((), dtype=torch.float32)
        if self.cfg.mode == "shared" and self.cfg.alpha_main:
            main = _ce(head, out.main, shifted_targets(ids, weight, 1))
            loss = loss + self.cfg.alpha_main * main
            parts["main"] = main.detach()
        for j in range(1, gamma + 1):
            # stream j at t predicts y_{t+j}, the token j places after the main stream's next token
            targets = torch.gather(shifted_targets(ids, weight, 1 + j), 1, carriers).masked_fill(pad, IGNORE)
            lj = _stream_ce(self.streams, head, out.streams[:, :, j - 1], targets)
            loss = loss + self.cfg.alpha_stream * lj
            parts[f"s{j}"] = lj.detach()
        if self.streams.prune is not None and self.cfg.alpha_prune:
            early = msa.prune_hidden(self.model, self.streams, out.birth)
            lp = _ce(head, early, shifted_targets(ids, weight, 1))
            loss = loss + self.cfg.alpha_prune * lp
            parts["prune"] = lp.detach()
        return loss, parts


def stream_carriers(weight: torch.Tensor, gamma: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions t whose streams have at least one weighted target (t+2 .. t+1+γ), per row.

    Returns carriers [B, s] (rows padded by repeating their last carrier) and pad [B, s] (True = padding).
    """
    B, T = weight.shape
    useful = torch.zeros_like(weight)
    for j in range(1, gamma + 1):
        useful[:, : max(0, T - 1 - j)] |= weight[:, 1 + j:]
    counts = useful.sum(dim=1)
    s = max(1, int(counts.max()))
    order = torch.argsort((~useful).to(torch.int8), dim=1, stable=True)[:, :s]  # useful positions first, in order
    pad = torch.arange(s, device=weight.device)[None] >= counts[:, None]
    last = order.gather(1, (counts.clamp(min=1) - 1)[:, None])
    carriers = torch.where(pad, last, order)
    return carriers, pad


def _ce(head: nn.Module, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of the LM head on the rows that have a target (the head is the costly part)."""
    valid = targets != IGNORE  # [B, T]
    if not bool(valid.any()):
        return hidden.sum() * 0.0
    logits = head(hidden[valid])  # [rows, V]
    return F.cross_entropy(logits.float(), targets[valid])


def _stream_ce(streams: StreamParams, head: nn.Module, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Stream cross-entropy, over the draft vocabulary when the streams have one (targets outside it
    are skipped: the streams could never draft them)."""
    if streams.draft_vocab is None:
        return _ce(head, hidden, targets)
    weight, bias = streams.draft_head(head)
    sub = to_draft_ids(streams.draft_vocab, targets, head.weight.shape[0])
    valid = sub != IGNORE
    if not bool(valid.any()):
        return hidden.sum() * 0.0
    logits = F.linear(hidden[valid], weight, bias)  # [rows, K]
    return F.cross_entropy(logits.float(), sub[valid])


def to_draft_ids(draft_vocab: torch.Tensor, targets: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Full-vocabulary targets -> positions in the draft vocabulary (IGNORE when absent)."""
    lookup = torch.full((vocab_size,), IGNORE, dtype=torch.long, device=targets.device)
    lookup[draft_vocab.to(targets.device)] = torch.arange(draft_vocab.numel(), device=targets.device)
    out = lookup[targets.clamp(min=0)]
    return out.masked_fill(targets == IGNORE, IGNORE)


def frequent_tokens(pairs: list[tuple[list[int], list[int]]], k: int, always: tuple[int, ...] = (),
                    vocab_size: int | None = None) -> list[int]:
    """A draft vocabulary of k token ids: `always`, then answer tokens by frequency, then prompt tokens
    (answers copy from prompts), then — when the data holds fewer distinct tokens — the lowest ids (a
    BPE vocabulary's earliest, most common merges). Ties by id, so the result is deterministic."""
    from collections import Counter

    answers = Counter(t for _, answer in pairs for t in answer)
    prompts = Counter(t for prompt, _ in pairs for t in prompt)
    chosen = dict.fromkeys(t for t in always if t is not None)
    for counts in (answers, prompts):
        for token, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
            if len(chosen) >= k:
                break
            chosen.setdefault(token)
    filler = iter(range(vocab_size if vocab_size is not None else k + len(chosen)))
    while len(chosen) < k:
        token = next(filler, None)
        if token is None:
            break
        chosen.setdefault(token)
    return sorted(chosen)


def draft_vocab_coverage(pairs: list[tuple[list[int], list[int]]], vocab: list[int]) -> float:
    """Share of answer tokens that fall inside the draft vocabulary."""
    keep = set(vocab)
    total = sum(len(a) for _, a in pairs)
    return sum(1 for _, a in pairs for t in a if t in keep) / max(1, total)


# ---- evaluation ----------------------------------------------------------------------------------
@torch.no_grad()
def evaluate_streams(model, streams: StreamParams, ids: torch.Tensor, weight: torch.Tensor,
                     topk: tuple[int, ...] = (4, 3, 2, 1), batch_size: int = 8) -> dict:
    """Per-stream top-1 / top-k accuracy on answer tokens and an estimate of τ.

    τ estimate: at each answer position, depth j counts when streams 1..j all hold the true token in
    their top-k_j (exactly the acceptance condition of the Cartesian draft tree), plus the bonus token.
    """
    gamma = streams.cfg.gamma
    depth = min(gamma, len(topk))
    hits1 = torch.zeros(gamma)
    hitsk = torch.zeros(gamma)
    counts = torch.zeros(gamma)
    main_hits = main_count = 0
    accepted_sum = 0.0
    positions_n = 0
    head = compat.lm_head(model)
    device = next(model.parameters()).device
    for start in range(0, ids.shape[0], batch_size):
        x = ids[start:start + batch_size].to(device)
        w = weight[start:start + batch_size].to(device)
        B, T = x.shape
        pos = torch.arange(T, device=device).expand(B, T)
        out = msa.forward(model, x, pos, masks.causal_visibility(T, B, device), streams=streams, carriers=pos)
        main_t = shifted_targets(x, w, 1)
        valid_main = main_t != IGNORE
        main_pred = head(out.main).argmax(-1)
        main_hits += int((main_pred == main_t)[valid_main].sum())
        main_count += int(valid_main.sum())
        chain_alive = valid_main.clone()
        accepted = torch.zeros(B, T, device=device)
        for j in range(1, gamma + 1):
            t = shifted_targets(x, w, 1 + j)
            valid = t != IGNORE
            logits = (head(out.streams[:, :, j - 1]) if streams.draft_vocab is None else
                      streams.draft_logits(head, out.streams[:, :, j - 1], head.weight.shape[0]))
            k = topk[j - 1] if j - 1 < len(topk) else 1
            top = logits.topk(max(k, 1), dim=-1).indices
            in_top1 = top[..., 0] == t
            in_topk = (top == t[..., None]).any(-1)
            hits1[j - 1] += float(in_top1[valid].sum())
            hitsk[j - 1] += float(in_topk[valid].sum())
            counts[j - 1] += float(valid.sum())
            if j <= depth:
                chain_alive &= in_topk & valid
                accepted += chain_alive.float()
        accepted_sum += float(accepted[valid_main].sum())
        positions_n += int(valid_main.sum())
    safe = counts.clamp(min=1)
    return {
        "main_top1": main_hits / max(1, main_count),
        "stream_top1": (hits1 / safe).tolist(),
        "stream_topk": (hitsk / safe).tolist(),
        "topk": list(topk[:depth]),
        "tau_estimate": 1.0 + accepted_sum / max(1, positions_n),
    }


class FeatureCache:
    """Lossless training: what the frozen layers below N−Ns give for each training sequence.

    Nothing below the stream-birth layer trains in lossless mode, so each sequence's layer-(N−Ns)
    state is computed once (sequence by sequence, so the values do not depend on the batch) and reused
    every time the sequence is drawn again, within a memory budget. On a 30-layer model with Ns = 4
    this skips 26 of 30 layers' forward work on every repeat draw."""

    def __init__(self, model, n_bottom: int, budget_bytes: float):
        self.model, self.n_bottom, self.budget = model, n_bottom, budget_bytes
        self.rows: dict[int, torch.Tensor] = {}
        self.used = 0
        self.hits = self.misses = 0

    def get(self, ids: torch.Tensor, idx: list[int]) -> torch.Tensor:
        missing = [i for i in dict.fromkeys(idx) if i not in self.rows]
        self.hits += len(idx) - len(missing)
        self.misses += len(missing)
        fresh = {}
        if missing:
            pos = {i: n for n, i in enumerate(idx)}
            h = msa.bottom_hidden(self.model, ids[[pos[i] for i in missing]], self.n_bottom)
            for i, row in zip(missing, h):
                fresh[i] = row
                if self.used + row.numel() * row.element_size() <= self.budget:
                    self.rows[i] = row
                    self.used += row.numel() * row.element_size()
        return torch.stack([self.rows[i] if i in self.rows else fresh[i] for i in idx])


# ---- the loop -------------------------------------------------------------------------------------
def build_streams(model, cfg: TrainConfig, draft_vocab: list[int] | None = None):
    """(model, streams): in shared mode the model comes back wrapped with a trainable peft LoRA."""
    for p in model.parameters():
        p.requires_grad_(False)
    if cfg.mode == "shared":
        from peft import LoraConfig, get_peft_model

        lora = LoraConfig(r=cfg.lora_rank, lora_alpha=2 * cfg.lora_rank, lora_dropout=0.0,
                          target_modules=list(ADAPTER_TARGETS))
        model = get_peft_model(model, lora)
    streams = StreamParams.fresh(model, gamma=cfg.gamma, n_stream_layers=cfg.n_stream_layers,
                                 adapter_rank=cfg.adapter_rank if cfg.mode == "lossless" else 0,
                                 prune_rank=cfg.prune_rank, mode=cfg.mode, seed=cfg.seed,
                                 draft_vocab=list(draft_vocab) if draft_vocab else None)
    if cfg.mode == "shared":
        streams.cfg = replace(streams.cfg, lora_rank=cfg.lora_rank)
    for p in streams.trainable_parameters():
        p.requires_grad_(True)
    return model, streams


def trainable(model, streams: StreamParams) -> list[torch.Tensor]:
    params = list(streams.trainable_parameters())
    if streams.cfg.mode == "shared":
        params += [p for n, p in model.named_parameters() if "lora_" in n]
    return params


def train(model, cfg: TrainConfig, train_data: tuple[torch.Tensor, torch.Tensor], out_dir: str,
          eval_data: tuple[torch.Tensor, torch.Tensor] | None = None, resume: bool = False,
          progress: bool = True, log=print, extra: dict | None = None,
          draft_vocab: list[int] | None = None) -> dict:
    """Train streams on packed data; writes `out_dir` (streams, lora/ in shared mode, train_log.json)."""
    from accelerate import Accelerator
    from tqdm.auto import tqdm

    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    ckpt = os.path.join(out_dir, CHECKPOINT_DIR)
    if resume:
        require_checkpoint(out_dir, cfg.checkpoint_every)
    identity = run_identity(model, cfg, train_data)  # before streams or LoRA wrap the base model
    accelerator = Accelerator(mixed_precision="bf16" if cfg.precision == "bf16" else "no")
    if cfg.draft_vocab_size and (not draft_vocab or len(draft_vocab) != cfg.draft_vocab_size):
        raise SpecstreamError(f"draft_vocab_size {cfg.draft_vocab_size} needs a draft vocabulary of that many ids")
    model, streams = build_streams(model, cfg, draft_vocab)
    params = trainable(model, streams)
    optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0)

    def schedule(step):  # linear warm-up, then linear decay (the paper's linear schedule)
        if step < cfg.warmup:
            return (step + 1) / cfg.warmup
        return max(0.05, 1 - (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    objective = StreamObjective(model, streams, cfg)
    objective, optimizer = accelerator.prepare(objective, optimizer)
    start_step, history = 0, []
    gen = torch.Generator().manual_seed(cfg.seed)  # the order of training batches
    if resume:
        start_step, history = _load_checkpoint(ckpt, identity, model, streams, optimizer, scheduler, gen, log)
        log(f"resumed from step {start_step}")
    elif _checkpoint_exists(ckpt):
        log(f"note: {ckpt} holds a checkpoint of an earlier run; it will be replaced (pass --resume to continue it)")
    ids, weight = train_data
    deadline = time.time() + cfg.minutes * 60 if cfg.minutes else None
    tokens_done, t_start = 0, time.time()
    bar = tqdm(total=cfg.steps, initial=start_step, disable=not progress, desc=f"train {cfg.mode}", unit="step")
    step = start_step - 1  # steps_done = start_step when a resumed run has no steps left
    model.train(False)  # no dropout; the objective runs in train mode only for autograd
    features = (FeatureCache(model, streams.cfg.birth_layer, cfg.feature_cache_gb * 2**30)
                if cfg.mode == "lossless" and cfg.feature_cache_gb > 0 else None)
    for step in range(start_step, cfg.steps):
        idx = torch.randint(0, ids.shape[0], (cfg.batch_size,), generator=gen)
        x, w = ids[idx].to(accelerator.device), weight[idx].to(accelerator.device)
        birth = features.get(x, idx.tolist()) if features is not None else None
        with accelerator.autocast():
            loss, parts = objective(x, w, birth)
        accelerator.backward(loss)
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        tokens_done += x.numel()
        if step % cfg.log_every == 0 or step == cfg.steps - 1:
            record = {"step": step, "loss": loss.item(), **{k: v.item() for k, v in parts.items()},
                      "tokens_per_s": tokens_done / max(1e-9, time.time() - t_start)}
            history.append(record)
            bar.set_postfix(loss=f"{record['loss']:.3f}", tok_s=f"{record['tokens_per_s']:.0f}")
        bar.update(1)
        if cfg.checkpoint_every and (step + 1) % cfg.checkpoint_every == 0:
            _save_checkpoint(ckpt, step + 1, history, identity, model, streams, optimizer, scheduler, gen)
        if deadline and time.time() > deadline:
            log(f"time budget reached after {step + 1} steps")
            if cfg.checkpoint_every and (step + 1) % cfg.checkpoint_every and step + 1 < cfg.steps:
                _save_checkpoint(ckpt, step + 1, history, identity, model, streams, optimizer, scheduler, gen)
            break
    bar.close()
    steps_done = step + 1
    streams.cfg = replace(streams.cfg, trained_steps=steps_done)
    summary = {"config": asdict(cfg), "steps": steps_done, "history": history,
               "train_seconds": time.time() - t_start,
               "extra_parameters": sum(p.numel() for p in params)}
    if eval_data is not None:
        summary["eval"] = evaluate_streams(model, streams, *eval_data)
    save(out_dir, model, streams, summary, extra)
    return summary


def save(out_dir: str, model, streams: StreamParams, summary: dict, extra: dict | None = None) -> None:
    os.makedirs(out_dir, exist_ok=True)
    streams.save(out_dir, extra={"eval": summary.get("eval"), "steps": summary.get("steps"), **(extra or {})})
    if streams.cfg.mode == "shared":
        model.save_pretrained(os.path.join(out_dir, LORA_DIR))
    with open(os.path.join(out_dir, "train_log.json"), "w") as f:
        json.dump(summary, f, indent=1)


def run_identity(model, cfg: TrainConfig, train_data) -> dict:
    """What a checkpoint must match to be resumed: the base model, the settings and the training data."""
    return {"base_model": checkpoint.model_fingerprint(model),
            "base_name": str(getattr(model, "name_or_path", "") or getattr(model.config, "_name_or_path", "")),
            "settings": asdict(cfg),
            "data": checkpoint.tensor_fingerprint(*train_data)}


def require_checkpoint(out_dir: str, every: int) -> None:
    """--resume with nothing to resume is an error (not a silent fresh start)."""
    ckpt = os.path.join(out_dir, CHECKPOINT_DIR)
    if not _checkpoint_exists(ckpt):
        raise SpecstreamError(f"--resume: there is no checkpoint in {ckpt} to resume from (one is written every "
                              f"{every} steps); run without --resume to start fresh")


def _checkpoint_exists(ckpt: str) -> bool:
    return os.path.isfile(os.path.join(ckpt, CHECKPOINT_FILE)) or os.path.isfile(os.path.join(ckpt, "state.json"))


def _lora_state(model) -> dict[str, torch.Tensor]:
    from peft import get_peft_model_state_dict

    return {k: v.detach().cpu().clone() for k, v in get_peft_model_state_dict(model).items()}


def _save_checkpoint(ckpt, step, history, identity, model, streams, optimizer, scheduler, gen) -> None:
    state = {"version": CHECKPOINT_VERSION, "step": step, "history": history, "identity": identity,
             "streams": streams.state_tensors(),
             "lora": _lora_state(model) if streams.cfg.mode == "shared" else {},
             "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(), "data_rng": gen.get_state()}
    checkpoint.save_atomic(state, os.path.join(ckpt, CHECKPOINT_FILE))


def _identity_differences(saved: dict, current: dict) -> list[str]:
    diffs = []
    if saved.get("base_model") != current["base_model"]:
        diffs.append(f"base model {saved.get('base_name') or '?'!r} (fingerprint {saved.get('base_model')}) -> "
                     f"{current['base_name'] or '?'!r} (fingerprint {current['base_model']})")
    old, new = saved.get("settings", {}), current["settings"]
    for key in sorted(set(old) | set(new)):
        if key not in RESUME_MAY_CHANGE and old.get(key) != new.get(key):
            diffs.append(f"{key} {old.get(key)!r} -> {new.get(key)!r}")
    if saved.get("data") != current["data"]:
        diffs.append(f"training data (fingerprint {saved.get('data')} -> {current['data']})")
    return diffs


def _check_tensors(ckpt: str, what: str, saved: dict, own: dict) -> None:
    missing, unexpected = sorted(set(own) - set(saved)), sorted(set(saved) - set(own))
    if missing or unexpected:
        raise SpecstreamError(f"cannot resume from {ckpt}: its {what} tensors do not match this run "
                              f"(missing {missing[:3]}, unexpected {unexpected[:3]})")
    for name, tensor in own.items():
        if tuple(saved[name].shape) != tuple(tensor.shape):
            raise SpecstreamError(f"cannot resume from {ckpt}: {what} tensor {name} has shape {tuple(saved[name].shape)} "
                                  f"there and {tuple(tensor.shape)} in this run")


def _load_checkpoint(ckpt, identity, model, streams, optimizer, scheduler, gen, log=print):
    path = os.path.join(ckpt, CHECKPOINT_FILE)
    if os.path.isfile(path):
        state = checkpoint.load(path)
        if not isinstance(state, dict) or state.get("version") != CHECKPOINT_VERSION:
            raise SpecstreamError(f"cannot resume from {path}: not a version-{CHECKPOINT_VERSION} training checkpoint")
        diffs = _identity_differences(state.get("identity", {}), identity)
        if diffs:
            raise SpecstreamError(f"cannot resume from {ckpt}: it was made with a different " + "; ".join(diffs) +
                                  ". Resume with the same base model, settings and data, or remove the folder "
                                  "to start over")
        planned = state["identity"]["settings"].get("steps")
        if planned != identity["settings"]["steps"]:
            log(f"note: steps changed from {planned} to {identity['settings']['steps']}: the learning-rate schedule "
                f"follows the new number from here on")
    else:
        state = _read_legacy_checkpoint(ckpt)
        log(f"note: {ckpt} was written by an older version (several files, no record of the base model, "
            f"settings or data): only tensor names and shapes can be checked")
    _check_tensors(ckpt, "stream", state["streams"], streams.state_tensors())
    if streams.cfg.mode == "shared":
        _check_tensors(ckpt, "LoRA", state["lora"], _lora_state(model))
    with torch.no_grad():
        tensors = state["streams"]
        streams.embeddings.copy_(tensors["embeddings"])
        if streams.prune is not None:
            streams.prune.down.weight.copy_(tensors["prune.down"])
            streams.prune.up.weight.copy_(tensors["prune.up"])
        for key, wrapper in streams.adapters.items():
            wrapper.lora_A.weight.copy_(tensors[f"adapter.{key}.A"])
            wrapper.lora_B.weight.copy_(tensors[f"adapter.{key}.B"])
    if streams.cfg.mode == "shared":
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(model, state["lora"])
    try:
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
    except (ValueError, KeyError, RuntimeError) as exc:
        raise SpecstreamError(f"cannot resume from {ckpt}: its optimizer state does not fit this run ({exc})") from None
    step = int(state["step"])
    if state.get("data_rng") is not None:
        gen.set_state(state["data_rng"])
    else:  # an older checkpoint: the batch order continues as the older version did
        gen.manual_seed(int(identity["settings"]["seed"]) + step)
    return step, list(state["history"])


def _read_legacy_checkpoint(ckpt: str) -> dict:
    """A checkpoint folder of the older multi-file format (state.json, streams, lora/, optimizer.pt)."""
    from safetensors.torch import load_file

    try:
        with open(os.path.join(ckpt, "state.json")) as f:
            state = json.load(f)
        lora_file = os.path.join(ckpt, LORA_DIR, "adapter_model.safetensors")
        opt = checkpoint.load(os.path.join(ckpt, "optimizer.pt"))
        return {"step": state["step"], "history": state["history"],
                "streams": load_file(os.path.join(ckpt, "streams.safetensors")),
                "lora": load_file(lora_file) if os.path.isfile(lora_file) else {},
                "optimizer": opt["optimizer"], "scheduler": opt["scheduler"], "data_rng": None}
    except SpecstreamError:
        raise
    except Exception as exc:  # noqa: BLE001 - a half-written old-format checkpoint: say so
        raise SpecstreamError(f"cannot resume from {ckpt}: an incomplete older-format checkpoint "
                              f"({type(exc).__name__}: {exc}); remove the folder to start over") from None
