"""A preallocated key/value cache: one buffer per layer and a length pointer per sequence.

Layout per layer: keys and values `[B, H_kv, capacity, D]`. Row `b` holds its accepted tokens in
slots `[0, length[b])`; slot `i` is the token at position `i` (no padding anywhere).

A forward step writes its q new rows (tree nodes and, in the multi-stream layers, stream rows) into
the scratch slots `[length[b], length[b] + q)` and attends over a view that ends at
`max(length) + q`; masks hide what a row must not see. `commit()` then moves the accepted rows of
each layer into place right after the valid prefix and advances the length — rejected rows are
simply overwritten by the next step. Nothing is reallocated and the prefix is never copied.

The object is duck-typed for transformers' attention modules: they call
`update(key_states, value_states, layer_idx, ...)` and use what it returns.
"""

from __future__ import annotations

import torch
from specstream_core.model import compat


class KVCache:
    def __init__(self, num_layers: int, batch: int, kv_heads: int, head_dim: int, capacity: int,
                 dtype: torch.dtype, device: torch.device | str):
        # one buffer for every layer's keys and values: [L, 2, B, H_kv, capacity, D], so accepting a
        # path is one gather per group of layers that saw the same rows, not one per layer and tensor
        self.buffer = torch.zeros(num_layers, 2, batch, kv_heads, capacity, head_dim, dtype=dtype, device=device)
        self.keys = [self.buffer[i, 0] for i in range(num_layers)]
        self.values = [self.buffer[i, 1] for i in range(num_layers)]
        self.lengths = [0] * batch  # host-side ints: no device sync to read them
        self.capacity = capacity
        self._slots_key = None  # (lengths, q) of the cached ragged-write indices

    @classmethod
    def for_model(cls, model, batch: int, capacity: int) -> "KVCache":
        config = model.config
        kv_heads, head_dim = compat.kv_shape(config)
        param = next(p for p in model.parameters() if p.is_floating_point())
        dtype = param.dtype if param.dtype in (torch.float32, torch.bfloat16, torch.float16) else torch.float32
        if getattr(model, "is_loaded_in_4bit", False) or getattr(model, "is_loaded_in_8bit", False):
            dtype = getattr(config, "dtype", None) or torch.float32
            dtype = dtype if isinstance(dtype, torch.dtype) else torch.float32
        return cls(config.num_hidden_layers, batch, kv_heads, head_dim, capacity, dtype, param.device)

    @property
    def batch(self) -> int:
        return len(self.lengths)

    @property
    def max_length(self) -> int:
        return max(self.lengths)

    # ---- called by the attention modules ---------------------------------------------------
    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        # key_states: [B, H_kv, q, D], already rotated
        q = key_states.shape[2]
        where = self.slots(layer_idx, q)
        if where is not None:  # every row after the same prefix: one slice write per tensor
            k_buf, v_buf, start, end = where
            k_buf[:, :, start:end] = key_states
            v_buf[:, :, start:end] = value_states
            return k_buf[:, :, :end], v_buf[:, :, :end]
        end = self._end(q)
        k_buf, v_buf = self.keys[layer_idx], self.values[layer_idx]
        rows, slots = self._ragged_slots(q)  # ragged batch: each row after its own prefix, [B, 1], [B, q]
        k_buf.transpose(1, 2)[rows, slots] = key_states.transpose(1, 2)  # [B, q, H_kv, D] into [B, cap, H_kv, D]
        v_buf.transpose(1, 2)[rows, slots] = value_states.transpose(1, 2)
        return k_buf[:, :, :end], v_buf[:, :, :end]

    def slots(self, layer_idx: int, q: int):
        """Where q new rows of every sequence go when all sequences share a length (`update`'s slice write,
        or a caller that writes them itself: `rowinv_steps.rope_store`): (keys buffer, values buffer, first
        slot, end of the view attention reads); None for a ragged batch."""
        start = self.lengths[0]
        if any(n != start for n in self.lengths):
            return None
        return self.keys[layer_idx], self.values[layer_idx], start, self._end(q)

    def _end(self, q: int) -> int:
        """End of the view a step of q rows attends over: the longest prefix + q (checked against capacity)."""
        end = self.max_length + q
        if end > self.capacity:
            raise RuntimeError(f"KV cache overflow: need {end} slots, have {self.capacity}")
        return end

    def _ragged_slots(self, q: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Row and slot indices of this step's writes ([B, 1], [B, q]); built once per step, not per layer."""
        key = (tuple(self.lengths), q)
        if self._slots_key != key:
            device = self.buffer.device
            starts = torch.tensor(self.lengths, device=device)[:, None]
            self._slots = (torch.arange(self.batch, device=device)[:, None], starts + torch.arange(q, device=device))
            self._slots_key = key
        return self._slots

    # ---- called by the engine --------------------------------------------------------------
    def commit(self, groups: list[tuple[int, int, torch.Tensor | list[torch.Tensor]]]) -> None:
        """Move accepted scratch rows into place and advance the lengths.

        groups: (first layer, end layer, keep) for runs of layers that saw the same rows; keep is a
        LongTensor [B, m] of scratch-row indices (ascending) or a list of B 1-D tensors when sequences
        keep different numbers of tokens. Every layer keeps the same count per sequence (the accepted
        tokens); indices differ between groups because pruning changes which rows a layer saw.
        """
        new_lengths = list(self.lengths)
        for lo, hi, keep in groups:
            rows = keep if isinstance(keep, list) else [keep[b] for b in range(self.batch)]
            for b, row_idx in enumerate(rows):
                m = row_idx.numel()
                start = self.lengths[b]
                if m and not _already_in_place(row_idx):
                    # gather first (advanced indexing copies), then write: safe although ranges overlap
                    block = self.buffer[lo:hi, :, b]  # [layers, 2, H, cap, D]
                    block[:, :, :, start:start + m] = block[:, :, :, start + row_idx]
                new_lengths[b] = start + m
        self.lengths = new_lengths

    def advance(self, n: int) -> None:
        """Accept the first n scratch rows of every layer as they are (plain decoding, prefill)."""
        self.lengths = [length + n for length in self.lengths]

    def retain(self, rows: list[int]) -> None:
        """Keep only these rows, in this order (finished sequences leave a batch). The kept rows move to
        the front of the buffer once per change, not per step; no row is padded or re-allocated."""
        if rows == list(range(self.batch)):
            return
        used = self.max_length
        index = torch.tensor(rows, dtype=torch.long, device=self.buffer.device)
        kept = self.buffer[..., :used, :].index_select(2, index)  # [L, 2, k, H_kv, used, D]
        self.buffer = self.buffer[:, :, :len(rows)]  # a view: the same storage, fewer rows
        self.buffer[..., :used, :] = kept
        self.keys = [self.buffer[i, 0] for i in range(len(self.keys))]
        self.values = [self.buffer[i, 1] for i in range(len(self.values))]
        self.lengths = [self.lengths[r] for r in rows]

    def valid(self, layer_idx: int, b: int = 0):
        """(keys, values) of row b's accepted prefix: [H_kv, length, D]."""
        n = self.lengths[b]
        return self.keys[layer_idx][b, :, :n], self.values[layer_idx][b, :, :n]

    def nbytes(self) -> int:
        """Bytes of the storage this cache holds (all rows it was allocated with)."""
        return self.buffer.untyped_storage().nbytes()


class SharedPrefixCache:
    """n continuations of one prompt: the prompt's K/V stored once, plus one suffix buffer per row.

    prefix: `[L, 2, 1, H_kv, P, D]` (filled by a batch-1 prefill, then frozen); suffix: a `KVCache`
    of B rows holding each row's own tokens after the prompt. `lengths` count the prefix too, so
    positions and masks are built exactly as for `KVCache` (key columns `[prefix | suffix]`), but
    `update` returns only the suffix: the shared-prefix attention (`compat.shared_prefix_attention`)
    reads `prefix_kv(layer)` and attends over both with one softmax. Nothing of the prefix is copied
    per row, per layer or per step.
    """

    def __init__(self, prefill: KVCache, batch: int, capacity: int):
        if prefill.batch != 1:
            raise ValueError("the shared prefix comes from a batch-1 prefill")
        self.prefix_len = prefill.lengths[0]
        # one compact copy of the prompt's K/V; the prefill cache (with its scratch slots) can go
        self.prefix = prefill.buffer[..., :self.prefix_len, :].clone()  # [L, 2, 1, H_kv, P, D]
        L, _, _, kv_heads, _, head_dim = self.prefix.shape
        self.suffix = KVCache(L, batch, kv_heads, head_dim, capacity, self.prefix.dtype, self.prefix.device)
        self.keys = self.suffix.keys  # layer count for callers that use len(cache.keys)

    @property
    def lengths(self) -> list[int]:
        return [self.prefix_len + n for n in self.suffix.lengths]

    @property
    def batch(self) -> int:
        return self.suffix.batch

    @property
    def max_length(self) -> int:
        return max(self.lengths)

    def prefix_kv(self, layer_idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(keys, values) of the shared prompt in one layer: [H_kv, P, D] each."""
        return self.prefix[layer_idx, 0, 0], self.prefix[layer_idx, 1, 0]

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        return self.suffix.update(key_states, value_states, layer_idx)  # [B, H_kv, suffix + q, D]

    def commit(self, groups) -> None:
        self.suffix.commit(groups)  # scratch-row indices are relative to each row's own writes

    def advance(self, n: int) -> None:
        self.suffix.advance(n)

    def retain(self, rows: list[int]) -> None:
        self.suffix.retain(rows)

    def nbytes(self) -> int:
        return self.prefix.untyped_storage().nbytes() + self.suffix.nbytes()


def _already_in_place(row_idx: torch.Tensor) -> bool:
    """Ascending distinct indices ending at m-1 are exactly 0..m-1: nothing to move (checked on CPU only,
    where reading one element costs no device sync)."""
    if row_idx.device.type != "cpu":
        return False
    return bool(row_idx[-1].item() == row_idx.numel() - 1)
