"""Training stream parameters with the Speculative Streaming objective (docs/METHOD.md §3, `objectives.py`).

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
from dataclasses import asdict, replace

import torch

from specstream_core.errors import SpecstreamError
from specstream_core.model import compat
from specstream_core.model.lora import read_shared_lora
from specstream_core.model.streams import ADAPTER_TARGETS, LORA_DIR, StreamParams, read_stream_weights
from specstream_core.training.config import TrainConfig
from specstream_core.training.evaluate import evaluate_streams
from specstream_core.training.features import FeatureCache
from specstream_core.training.loop import LoopState, TrainLoop, linear_schedule
from specstream_core.training.objectives import StreamObjective
from specstream_core.training.stream_checkpoint import (CHECKPOINT_DIR, _checkpoint_exists, _load_checkpoint,
                                                        _save_checkpoint, require_checkpoint, run_identity)


# ---- the loop -------------------------------------------------------------------------------------
def build_streams(model, cfg: TrainConfig, draft_vocab: list[int] | None = None):
    """(model, streams): in shared mode the model comes back wrapped with a trainable peft LoRA."""
    for p in model.parameters():
        p.requires_grad_(False)
    if cfg.mode == "shared":
        from peft import LoraConfig, get_peft_model

        n_layers = len(compat.decoder_layers(model))
        top = list(range(n_layers - cfg.lora_layers, n_layers)) if 0 < cfg.lora_layers < n_layers else None
        lora = LoraConfig(r=cfg.lora_rank, lora_alpha=2 * cfg.lora_rank, lora_dropout=0.0,
                          target_modules=list(ADAPTER_TARGETS), layers_to_transform=top,
                          layers_pattern="layers" if top else None)
        model = get_peft_model(model, lora)
    streams = StreamParams.fresh(model, gamma=cfg.gamma, n_stream_layers=cfg.n_stream_layers,
                                 adapter_rank=cfg.adapter_rank,
                                 prune_rank=cfg.prune_rank, mode=cfg.mode, seed=cfg.seed,
                                 draft_vocab=list(draft_vocab) if draft_vocab else None)
    if cfg.mode == "shared":
        streams.cfg = replace(streams.cfg, lora_rank=cfg.lora_rank)
    if cfg.init_from:
        warm_start(streams, cfg.init_from)
        if cfg.mode == "shared":
            with streams.unwrapped():  # peft's own module names, as the set saved them
                warm_start_lora(model, cfg.init_from)
    for p in streams.trainable_parameters():
        p.requires_grad_(True)
    return model, streams


def warm_start(streams: StreamParams, directory: str) -> None:
    """Copy a trained stream set's tensors into fresh `streams` of the same shapes (a longer run on more
    data continues from a shorter one). The draft vocabulary stays the new data's own.

    Row adapters may grow: a rank-r set warm-starts a larger rank. Its A rows and B columns fill the first r
    of each; the new B columns start at zero (as a fresh adapter's B does), so the grown set computes exactly
    what the smaller one did, and training starts where it stands.

    A set with more stream layers may start from one with fewer: the top layers' adapters come from it, the
    added lower layers' start fresh (B at zero). That is a head start, not the same function: the stream rows
    now enter the stack lower down and pass through the added layers before reaching the trained ones.

    A set with fewer streams may start from one with more: it takes the first γ stream embeddings. Stream j sees
    only streams 1..j, so its streams compute exactly what the source's first γ did (a γ-1 run trains stream 1, the
    one the default draft reads, alone)."""
    tensors = read_stream_weights(directory)
    targets = streams.named_tensors()
    missing = sorted(set(targets) - set(tensors))
    lower = _added_lower_layers(tensors, targets)
    missing = [name for name in missing if name not in lower]
    if missing:
        raise SpecstreamError(f"--init-from {directory}: it lacks {missing[:3]} (made with other settings?)")
    with torch.no_grad():
        for name, target in targets.items():
            if name in lower:
                continue
            source = tensors[name].to(target.dtype)
            if name == "embeddings" and source.shape[1:] == target.shape[1:] and source.shape[0] > target.shape[0]:
                source = source[:target.shape[0]]  # fewer streams: the first γ
            if source.shape != target.shape and not _grows_rank(name, source, target):
                raise SpecstreamError(f"--init-from {directory}: {name} has shape {tuple(source.shape)}, "
                                      f"these settings need {tuple(target.shape)}")
            if name.endswith(".B"):
                target.zero_()
            target[tuple(slice(0, n) for n in source.shape)].copy_(source)


def warm_start_lora(model, directory: str) -> None:
    """Shared mode continuing a shared set: its LoRA (`lora/`) replaces the fresh one, so a longer run goes on
    from the tensors it stopped with; a set without one (a lossless set) leaves the fresh LoRA as it is."""
    weights = read_shared_lora(directory)
    if weights is None:
        return
    from peft import set_peft_model_state_dict

    try:
        result = set_peft_model_state_dict(model, weights)
    except RuntimeError as exc:  # a tensor of another shape: another --lora-rank
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        first = next((line for line in lines if "size mismatch" in line), lines[0] if lines else "")
        raise SpecstreamError(f"--init-from {directory}: its LoRA does not fit these settings "
                              f"({first}; another --lora-rank?)") from None
    missing = [k for k in result.missing_keys if "lora_" in k]
    if result.unexpected_keys or missing:
        raise SpecstreamError(f"--init-from {directory}: its LoRA covers other layers than these settings "
                              f"({(result.unexpected_keys or missing)[0]}; another --lora-layers?)")


def _added_lower_layers(tensors: dict, targets: dict) -> set[str]:
    """The target's adapter names for layers below the source set's lowest stream layer (none if the source
    has no adapters or the target no lower layers)."""
    def layer(name: str) -> int:
        return int(name.split(".")[1].split("_")[0])

    have = [layer(n) for n in tensors if n.startswith("adapter.")]
    if not have:
        return set()
    return {n for n in targets if n.startswith("adapter.") and n not in tensors and layer(n) < min(have)}


def _grows_rank(name: str, source: torch.Tensor, target: torch.Tensor) -> bool:
    """An adapter of a smaller rank: A (rank, in) grows in rows, B (out, rank) in columns, nothing else."""
    if not name.startswith("adapter.") or source.dim() != 2:
        return False
    rank_axis = 0 if name.endswith(".A") else 1
    other = 1 - rank_axis
    return source.shape[other] == target.shape[other] and source.shape[rank_axis] < target.shape[rank_axis]


def trainable(model, streams: StreamParams) -> list[torch.Tensor]:
    return [p for group in _groups(model, streams) for p in group]


def _groups(model, streams: StreamParams) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(the streams' parameters, the shared LoRA's): the row adapters are the streams' own, not the LoRA's."""
    own = list(streams.trainable_parameters())
    if streams.cfg.mode != "shared":
        return own, []
    seen = {id(p) for p in own}
    return own, [p for n, p in model.named_parameters() if "lora_" in n and id(p) not in seen]


def param_groups(model, streams: StreamParams, cfg: TrainConfig) -> list[dict]:
    """The optimizer's groups: the streams at `lr`; a shared LoRA at `lora_lr` (when set)."""
    own, lora = _groups(model, streams)
    return [{"params": own, "lr": cfg.lr}] + ([{"params": lora, "lr": cfg.lora_lr or cfg.lr}] if lora else [])


def train(model, cfg: TrainConfig, train_data: tuple[torch.Tensor, torch.Tensor], out_dir: str,
          eval_data: tuple[torch.Tensor, torch.Tensor] | None = None, resume: bool = False,
          progress: bool = True, log=print, extra: dict | None = None,
          draft_vocab: list[int] | None = None) -> dict:
    """Train streams on packed data; writes `out_dir` (streams, lora/ in shared mode, train_log.json)."""
    from accelerate import Accelerator

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
    optimizer = torch.optim.AdamW(param_groups(model, streams, cfg), weight_decay=0.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, linear_schedule(cfg.warmup, cfg.steps))
    objective = StreamObjective(model, streams, cfg)
    objective, optimizer = accelerator.prepare(objective, optimizer)
    gen = torch.Generator().manual_seed(cfg.seed)  # the order of training batches
    state = LoopState()
    if resume:
        state.step, state.history = _load_checkpoint(ckpt, identity, model, streams, optimizer, scheduler, gen, log)
        state.seconds_before = max((r.get("seconds", 0.0) for r in state.history), default=0.0)
        log(f"resumed from step {state.step}")
    elif _checkpoint_exists(ckpt):
        log(f"note: {ckpt} holds a checkpoint of an earlier run; it will be replaced (pass --resume to continue it)")
    t_start = time.time()
    model.train(False)  # no dropout; the objective runs in train mode only for autograd
    one_step = _step_function(model, streams, objective, cfg, train_data, gen, accelerator)

    def save_checkpoint(st: LoopState) -> None:
        _save_checkpoint(ckpt, st.step, st.history, identity, model, streams, optimizer, scheduler, gen)

    loop = TrainLoop(optimizer, params, cfg.steps, minutes=cfg.minutes, log_every=cfg.log_every,
                     scheduler=scheduler, backward=accelerator.backward, checkpoint=save_checkpoint,
                     checkpoint_every=cfg.checkpoint_every, progress=progress, desc=f"train {cfg.mode}", log=log,
                     state=state, evaluate=_evaluation(model, streams, cfg, eval_data, log), eval_every=cfg.eval_every)
    state = loop.run(one_step)
    history = state.history
    steps_done = state.step
    streams.cfg = replace(streams.cfg, trained_steps=steps_done)
    summary = {"config": asdict(cfg), "steps": steps_done, "history": history,
               "train_seconds": time.time() - t_start,
               "extra_parameters": sum(p.numel() for p in params)}
    if eval_data is not None:
        summary["eval"] = evaluate_streams(model, streams, *eval_data)
    save(out_dir, model, streams, summary, extra)
    return summary


def _evaluation(model, streams, cfg: TrainConfig, eval_data, log):
    """The loop's check during the run: `evaluate_streams` on the first `eval_rows` held-out rows (τ estimate and
    per-stream accuracy against training time, `TrainLoop.eval_every`), or None without held-out data."""
    if eval_data is None or not cfg.eval_every:
        return None
    ids, weight = (t[:cfg.eval_rows] for t in eval_data)

    def check(state) -> dict:
        ev = evaluate_streams(model, streams, ids, weight)
        log(f"step {state.step} ({state.seconds() / 60:.1f} training minutes): τ estimate {ev['tau_estimate']:.3f}, "
            f"stream 1 top-1 {ev['stream_top1'][0]:.3f} on {ids.shape[0]} held-out rows")
        return {**ev, "rows": int(ids.shape[0])}
    return check


def _step_function(model, streams, objective, cfg: TrainConfig, train_data, gen, accelerator):
    """step -> (loss, parts, tokens) of one random batch (drawn from `gen`, so a resumed run draws the same)."""
    ids, weight = train_data
    features = (FeatureCache(model, streams.cfg.birth_layer, cfg.feature_cache_gb * 2**30)
                if cfg.frozen_bottom and cfg.feature_cache_gb > 0 else None)

    def one_step(step: int):
        idx = torch.randint(0, ids.shape[0], (cfg.batch_size,), generator=gen)
        x, w = ids[idx].to(accelerator.device), weight[idx].to(accelerator.device)
        birth = features.get(x, idx.tolist()) if features is not None else None
        with accelerator.autocast():
            loss, parts = objective(x, w, birth)
        return loss, parts, x.numel()
    return one_step


def save(out_dir: str, model, streams: StreamParams, summary: dict, extra: dict | None = None) -> None:
    os.makedirs(out_dir, exist_ok=True)
    streams.save(out_dir, extra={"eval": summary.get("eval"), "steps": summary.get("steps"), **(extra or {})})
    if streams.cfg.mode == "shared":
        with streams.unwrapped():
            model.save_pretrained(os.path.join(out_dir, LORA_DIR))
    with open(os.path.join(out_dir, "train_log.json"), "w") as f:
        json.dump(summary, f, indent=1)


