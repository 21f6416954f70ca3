"""Pretrain the bundled base model: task-suite train split + offline text -> tokenizer -> small Llama.

    cfg = PRESETS["default"]
    pretrain(out_dir, cfg, minutes=75, threads=1)

Pipeline (each step a function): ``build_corpus`` -> ``build_tokenizer`` -> ``pack_documents`` -> ``make_model``
-> ``train_base`` (the shared loop) -> ``save``. Training is time-budgeted: the cosine learning-rate schedule runs over the
wall-clock budget (or ``max_steps``, whichever ends first), so a run of M minutes always finishes its
schedule. A checkpoint (model, optimizer, step, elapsed time) is written to ``DIR/checkpoint/`` every
few minutes; ``resume=True`` continues from it with the same corpus and tokenizer.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import shutil
import time
from pathlib import Path

import torch
from transformers import AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM

from specstream_core.training import checkpoint
from specstream_core.training.loop import LoopState, TrainLoop
from specstream_core.errors import SpecstreamError
from specstream_core.tasks import load_split
from specstream_core.tasks.offline_text import documents
from specstream_core.training.tokenizer_build import build_tokenizer


from specstream_core.training.pretrain_presets import PRESETS, Preset  # noqa: F401 - re-exported

CHECKPOINT = "checkpoint"


# --------------------------------------------------------------------------------------- data
def build_corpus(preset: Preset, seed: int = 0) -> list[tuple[str, ...]]:
    """Documents as tuples of segments, shuffled: (prompt, reference) per train example, (text,) for general text.

    Segments are tokenized separately, exactly as at inference time, where the prompt is encoded on
    its own and the model continues it. (Tokenizing prompt + reference as one string would let BPE merge
    across the boundary, e.g. the prompt's final newline with a code answer's indentation, and the
    model would never see the token sequence it gets at inference.)
    """
    tasks = [(ex["prompt"], ex["reference"]) for ex in load_split("train", n=preset.examples_per_category)]
    task_chars = sum(len(p) + len(r) for p, r in tasks)
    general_chars = int(task_chars * preset.general_fraction / (1 - preset.general_fraction))
    docs = tasks + [(text,) for text in documents(general_chars)]
    random.Random(seed).shuffle(docs)
    return docs


def pack_documents(tokenizer, docs: list[tuple[str, ...]], seq_len: int) -> torch.Tensor:
    """Concatenate documents, each preceded by EOS, and cut into rows of ``seq_len`` tokens: [rows, seq_len].

    The EOS before each document is also the end marker of the previous one: a task example is
    ``EOS prompt reference`` followed by the next document's EOS, and inference prompts start with EOS
    (the tokenizer's BOS), so training and generation see the same token sequences.
    """
    eos = tokenizer.eos_token_id
    flat = [seg for doc in docs for seg in doc]
    encoded = iter(tokenizer.backend_tokenizer.encode_batch(flat, add_special_tokens=False))
    ids: list[int] = []
    for doc in docs:
        ids.append(eos)
        for _ in doc:
            ids.extend(next(encoded).ids)
    n_rows = len(ids) // seq_len
    return torch.tensor(ids[: n_rows * seq_len], dtype=torch.long).view(n_rows, seq_len)


# -------------------------------------------------------------------------------------- model
def make_model(preset: Preset, tokenizer) -> LlamaForCausalLM:
    head_dim = preset.hidden_size // preset.num_heads
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=preset.hidden_size,
        num_hidden_layers=preset.num_layers,
        num_attention_heads=preset.num_heads,
        num_key_value_heads=preset.num_heads,
        head_dim=head_dim,
        intermediate_size=preset.intermediate_size,
        max_position_embeddings=preset.max_position_embeddings,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        initializer_range=0.02,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, do_sample=False, max_new_tokens=160,
    )
    return model


def count_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())  # tied weights are counted once


# ------------------------------------------------------------------------------------ training
def lr_at(progress: float, step: int, preset: Preset) -> float:
    """Linear warm-up, then cosine decay to 10% of the peak over ``progress`` in [0, 1]."""
    if step < preset.warmup_steps:
        return preset.lr * (step + 1) / preset.warmup_steps
    return preset.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0))))


def _batches(rows: int, batch_size: int, seed: int, start_step: int):
    """Endless stream of row-index batches; epoch ``e`` uses permutation seeded by (seed, e)."""
    per_epoch = max(1, rows // batch_size)
    step = start_step
    while True:
        epoch, offset = divmod(step, per_epoch)
        perm = torch.randperm(rows, generator=torch.Generator().manual_seed(seed * 1000 + epoch))
        for i in range(offset, per_epoch):
            yield perm[i * batch_size:(i + 1) * batch_size]
        step = (epoch + 1) * per_epoch


def train_base(model, data: torch.Tensor, preset: Preset, out_dir: Path, minutes: float, max_steps: int | None,
          resume: bool, checkpoint_minutes: float = 5.0, log_every: int = 25, seed: int = 0,
          autocast_bf16: bool = False) -> dict:
    """The shared loop (`training/loop.py`) over the time budget (and `max_steps`); a resumed run
    carries over its steps, time, tokens and losses."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=preset.lr, betas=(0.9, 0.95),
                                  weight_decay=preset.weight_decay)
    ckpt_file = out_dir / CHECKPOINT / "state.pt"
    state = _resume(ckpt_file, model, optimizer) if resume else LoopState()
    model.train()
    batches = _batches(data.shape[0], preset.batch_size, seed, state.step)

    def one_step(step: int):
        batch = data[next(batches)]  # [B, T]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast_bf16):
            loss = model(input_ids=batch, labels=batch).loss
        return loss, {}, batch.numel()

    def save_checkpoint(st: LoopState) -> None:  # atomic: a kill leaves the previous or the new complete checkpoint
        checkpoint.save_atomic({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": st.step,
                                "elapsed": st.elapsed, "tokens": st.tokens,
                                "losses": [(r["step"] + 1, round(r["loss"], 4)) for r in st.history]}, str(ckpt_file))

    loop = TrainLoop(optimizer, list(model.parameters()), max_steps or None, minutes=minutes, log_every=log_every,
                     lr_at=lambda lp: lr_at(lp.fraction(), lp.state.step, preset), checkpoint=save_checkpoint,
                     checkpoint_minutes=checkpoint_minutes, desc="pretrain", state=state)
    state = loop.run(one_step)
    losses = [(r["step"] + 1, round(r["loss"], 4)) for r in state.history]
    return {"steps": state.step, "train_seconds": round(state.elapsed, 1), "tokens": state.tokens,
            "final_loss": losses[-1][1] if losses else None, "losses": losses}


def _resume(ckpt_file: Path, model, optimizer) -> LoopState:
    if not ckpt_file.is_file():
        raise SpecstreamError(f"--resume: no checkpoint at {ckpt_file}")
    state = checkpoint.load(str(ckpt_file))  # weights_only: tensors and plain values, never code from the file
    try:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        history = [{"step": step - 1, "loss": loss} for step, loss in state["losses"]]
        loop_state = LoopState(state["step"], state["elapsed"], state["tokens"], history)
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SpecstreamError(f"--resume: {ckpt_file} does not fit this model and preset ({first})") from None
    print(f"resumed at step {loop_state.step}, {loop_state.elapsed / 60:.1f} min trained")
    return loop_state


# ------------------------------------------------------------------------------------- command
def sized(preset: Preset, layers: int | None = None, hidden: int | None = None, heads: int | None = None,
          intermediate: int | None = None) -> Preset:
    """The preset with some dimensions replaced (e.g. a small draft model for assisted generation).

    Heads default to hidden/64 (head_dim 64) and the MLP to 4x hidden when only ``hidden`` is given.
    """
    if not any(v is not None for v in (layers, hidden, heads, intermediate)):
        return preset
    hidden = hidden or preset.hidden_size
    heads = heads or (max(1, hidden // 64) if hidden != preset.hidden_size else preset.num_heads)
    intermediate = intermediate or (4 * hidden if hidden != preset.hidden_size else preset.intermediate_size)
    layers = layers or preset.num_layers
    if min(layers, hidden, heads, intermediate) < 1 or hidden % heads:
        raise SpecstreamError(f"bad model size: layers {layers}, hidden {hidden}, heads {heads}, "
                              f"intermediate {intermediate} (hidden must be divisible by heads)")
    return dataclasses.replace(preset, num_layers=layers, hidden_size=hidden, num_heads=heads,
                               intermediate_size=intermediate)


def _tokenizer(tok_dir: Path, docs, preset: Preset, resume: bool, init_from, tokenizer_from):
    """The run's tokenizer: the checkpoint's (resume), the model's or donor's (init_from, tokenizer_from), or
    a new one trained on the corpus; saved beside the checkpoint so a resumed run reads the same."""
    if init_from is not None and not (Path(init_from) / "config.json").is_file():
        raise SpecstreamError(f"--init-from: {init_from} is not a model directory (no config.json)")
    if resume:
        return AutoTokenizer.from_pretrained(tok_dir)
    if init_from is not None or tokenizer_from is not None:
        tokenizer = AutoTokenizer.from_pretrained(init_from if init_from is not None else tokenizer_from)
    else:
        # The tokenizer is trained on a sample (enough for 4k merges); the corpus order is already shuffled.
        sample = ["".join(doc) for doc in docs[: max(2000, len(docs) // 3)]]
        tokenizer = build_tokenizer(sample, vocab_size=preset.vocab_size)
    tokenizer.save_pretrained(tok_dir)
    return tokenizer


def pretrain(out_dir: str | Path, preset_name: str = "default", minutes: float | None = None,
             threads: int | None = None, resume: bool = False, max_steps: int | None = None,
             bf16: bool = False, seed: int = 0, init_from: str | Path | None = None,
             tokenizer_from: str | Path | None = None, layers: int | None = None, hidden: int | None = None,
             heads: int | None = None, intermediate: int | None = None) -> dict:
    """Train and save a model into ``out_dir``; returns the training summary (also in training_info.json).

    ``init_from`` continues pretraining from a saved model directory (its weights and tokenizer) with a
    fresh optimizer and a fresh schedule over the new budget; ``resume`` continues an interrupted run.
    ``tokenizer_from`` reuses another model's tokenizer (a draft model must share its target's), and
    ``layers``/``hidden``/``heads``/``intermediate`` override the preset's size.
    """
    if preset_name not in PRESETS:
        raise SpecstreamError(f"unknown preset {preset_name!r}; choose from {', '.join(PRESETS)}")
    preset = sized(PRESETS[preset_name], layers, hidden, heads, intermediate)
    out = Path(out_dir)
    if threads:
        torch.set_num_threads(threads)
    minutes = preset.minutes if minutes is None else minutes
    max_steps = preset.max_steps if max_steps is None else max_steps
    if minutes <= 0 and not max_steps:
        raise SpecstreamError("--minutes must be positive (or give --max-steps)")
    if resume and not (out / CHECKPOINT / "state.pt").is_file():
        raise SpecstreamError(f"--resume: no checkpoint at {out / CHECKPOINT / 'state.pt'}")
    if not resume and (out / CHECKPOINT).exists():
        raise SpecstreamError(f"{out / CHECKPOINT} exists: pass --resume to continue, or remove it")
    out.mkdir(parents=True, exist_ok=True)

    t0 = time.time()
    docs = build_corpus(preset, seed)
    tokenizer = _tokenizer(out / CHECKPOINT / "tokenizer", docs, preset, resume, init_from, tokenizer_from)
    data = pack_documents(tokenizer, docs, preset.seq_len)
    model = make_model(preset, tokenizer)
    previous = None
    if init_from is not None and not resume:
        model.load_state_dict(LlamaForCausalLM.from_pretrained(init_from, dtype=torch.float32).state_dict())
        info_file = Path(init_from) / "training_info.json"
        previous = json.loads(info_file.read_text()) if info_file.is_file() else None
    n_params = count_parameters(model)
    print(f"corpus: {len(docs)} documents, {data.numel() / 1e6:.2f}M tokens in {data.shape[0]} rows of "
          f"{preset.seq_len}; model: {n_params / 1e6:.2f}M parameters; threads {torch.get_num_threads()}; "
          f"prepared in {time.time() - t0:.0f}s", flush=True)

    stats = train_base(model, data, preset, out, minutes, max_steps, resume, autocast_bf16=bf16, seed=seed)
    model.eval()
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    info = {"preset": preset_name, **dataclasses.asdict(preset), "parameters": n_params,
            "corpus_documents": len(docs), "corpus_tokens": int(data.numel()), "threads": torch.get_num_threads(),
            "bf16_autocast": bf16, "seed": seed, "budget_minutes": minutes, "budget_max_steps": max_steps, **stats}
    if tokenizer_from is not None:
        info["tokenizer_from"] = str(tokenizer_from)
    if init_from is not None:
        info["init_from"] = str(init_from)
        info["previous_run"] = previous
    (out / "training_info.json").write_text(json.dumps(info, indent=1) + "\n")
    shutil.rmtree(out / CHECKPOINT, ignore_errors=True)
    return info
