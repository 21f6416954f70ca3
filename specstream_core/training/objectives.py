"""The Speculative Streaming objective (docs/METHOD.md §3) and the draft vocabulary's pieces.

    L = α0·CE(main_t → y_t) + Σ_j αj·CE(stream_{t,j} → y_{t+j}) + αp·CE(prune_t → y_t)

In shared mode the main term can instead be KL(base ‖ adapted) over the whole next-token distribution
(`main_target="kl"`): the LoRA then has to keep the base's every preference, not only its greedy token.
"""

from __future__ import annotations

from collections import Counter

import torch
import torch.nn.functional as F
from torch import nn

from specstream_core.model import compat, masks, msa
from specstream_core.model.streams import StreamParams
from specstream_core.training.config import TrainConfig
from specstream_core.training.data import IGNORE, shifted_targets


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
                          frozen_bottom=self.cfg.frozen_bottom, birth_hidden=birth_hidden,
                          window=compat.sliding_window(self.model.config))
        head = compat.lm_head(self.model)
        parts = {}
        loss = ids.new_zeros((), dtype=torch.float32)
        if self.cfg.mode == "shared" and self.cfg.alpha_main:
            targets = shifted_targets(ids, weight, 1)
            if self.cfg.main_target == "kl":
                base = self._base_main(ids, positions, visible, carriers, birth_hidden)
                main = _kl_to_base(head, out.main, base, targets != IGNORE)
            else:
                main = _ce(head, out.main, targets)
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

    @torch.no_grad()
    def _base_main(self, ids, positions, visible, carriers, birth_hidden):
        """The main rows' final hidden states as the base gives them (the shared LoRA switched off)."""
        with self.model.disable_adapter():
            out = msa.forward(self.model, ids, positions, visible, streams=self.streams, carriers=carriers[:, :1],
                              num_streams=1, frozen_bottom=True, birth_hidden=birth_hidden,
                              window=compat.sliding_window(self.model.config))
        return out.main


def _kl_to_base(head: nn.Module, hidden: torch.Tensor, base_hidden: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """KL(base ‖ adapted) of the next-token distributions on the rows that have a target, averaged."""
    if not bool(valid.any()):
        return hidden.sum() * 0.0
    logp = F.log_softmax(head(hidden[valid]).float(), dim=-1)
    with torch.no_grad():
        base = F.log_softmax(head(base_hidden[valid]).float(), dim=-1)
    return F.kl_div(logp, base, log_target=True, reduction="batchmean")


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
    sub_head = streams.draft_head(head)
    sub = to_draft_ids(streams.draft_vocab, targets, head.weight.shape[0])
    valid = sub != IGNORE
    if not bool(valid.any()):
        return hidden.sum() * 0.0
    logits = sub_head(hidden[valid])  # [rows, K]
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
