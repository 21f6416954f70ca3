"""The LM head of an int4 model in 8-bit groups, as GGUF's Q8_0 keeps it: 32 signed bytes and a scale per
group along the input, w = q * scale (`rowinv.linear_q8`).

The head is the largest single matrix of a small model (SmolLM2: 49,152 x 576, 113 MB in fp32, 30 MB in
Q8_0) and every pass reads it, so in an int4 model it was the one fp32 matrix and cost a third of a plain
pass. llama.cpp keeps heads and token embeddings at 8 bits for the same reason: 4 bits there change the
output (on the default model 14 of 15 prompts, docs/BENCHMARKS.md; tests/test_int4_head.py shows it in small). Where the base was converted from a
GGUF file whose head is Q8_0 (the default model's tied token embedding), these are the file's own groups,
so the head holds the fp32 model's weights exactly (its fp16 scales times int8 are exact in fp32); the
kernel sums them per group, a different order from the fp32 kernel's.

On the kernel the activations and sums stay fp32 and each row is summed in one fixed order (row-invariant,
like every Linear of the decoding path). Without it (no kernel here, `SPECSTREAM_KERNEL=torch`, inside
`rowinv.torch_linears()`, or with gradients) the layer multiplies by its dequantized fp32 weight, made on
first use; that matmul is not row-invariant, so int4 models without the kernel keep a 4-bit head
(`int4.quantize_model`).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from specstream_core.errors import SpecstreamError
from specstream_core.model import compat
from specstream_core.kernels.linears import int4_a8, pack_cache, rowinv

GROUP = 32  # elements per scale (Q8_0's block size)
# where loading leaves a model's reader of its weights' rows from the checkpoint files (`loading.CheckpointRows`)
WEIGHT_ROWS = "_specstream_weight_rows"


def weight_rows(model: nn.Module | None, weight: torch.Tensor, start: int, stop: int) -> torch.Tensor:
    """Rows [start, stop) of one of `model`'s weights, for a check: read from its checkpoint file where loading left a
    reader (the weight's memory-mapped pages are then never touched, so never resident), else from the weight."""
    reader = model.__dict__.get(WEIGHT_ROWS) if model is not None else None
    rows = reader(weight, start, stop) if reader is not None else None
    return weight.detach()[start:stop] if rows is None else rows


class Int8Linear(nn.Module):
    """y = x W^T (+ b) with W in 8-bit groups (module docstring). Output rows are padded to a multiple of 4
    (the last row repeated, its outputs dropped). `rows` cuts it to some outputs (a draft vocabulary)."""

    def __init__(self, q: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None = None,
                 kernel: bool | None = None, a8: bool = False):
        """q: integers -128..127 [N, K]; scale: [N, K / GROUP] (w = q * scale). a8: against 8-bit activations
        (int4-a8, `kernels/linears/int4_a8.py`; another layout of the same groups)."""
        n, k = q.shape
        if k % GROUP or scale.shape != (n, k // GROUP):
            raise SpecstreamError(f"8-bit weights need groups of {GROUP} along the input (got {tuple(q.shape)})")
        self._settle(n, k, kernel, a8)
        if a8:
            q8, d = int4_a8.pack_q8(q, scale)  # [N' / 16, G, 8, 64], [N' / 16, G, 2, 16]
        else:
            q, scale = rowinv.pad_rows(q.to(torch.int8)), rowinv.pad_rows(scale.float())
            q8, d = rowinv.to_blocks(q, k // GROUP), rowinv.to_blocks(scale, k // GROUP)  # [N'/4, G, 4, 32], [N'/4, G, 4, 1]
        pack_cache.COUNTS["packed"] += 1
        self._hold(q8, d, None if bias is None else bias.detach().float())

    def _settle(self, n: int, k: int, kernel: bool | None, a8: bool) -> None:
        """The layer's shape and where it runs, or the reason it cannot run here."""
        super().__init__()
        self.in_features, self.out_features = k, n
        self.kernel = rowinv.available() if kernel is None else kernel
        self.a8 = a8
        if a8 and not (self.kernel and int4_a8.available()):
            raise SpecstreamError(int4_a8.unavailable_reason() or "int4-a8 runs on the row-invariant kernel only")
        self._weight: torch.Tensor | None = None  # the dequantized weight, for the torch path
        self.order: torch.Tensor | None = None  # a8: stored row i is output order[i] (`lay_out`); None: in order
        self._inverse: torch.Tensor | None = None  # output j's stored row
        self.pack_key: str | None = None  # the kernel cache's entry it was packed for (`lay_out` keeps its layouts)

    def _hold(self, q8: torch.Tensor, d: torch.Tensor, bias: torch.Tensor | None) -> None:
        for name, t in (("q8", q8), ("d", d), ("bias", bias)):
            self.register_buffer(name, t, persistent=False)

    def layout(self) -> tuple[dict[str, torch.Tensor], dict]:
        """(the packed tensors the kernel reads, what `from_layout` needs besides them), for the kernel cache; a head
        laid out (`lay_out`) keeps its order."""
        tensors = {"q8": self.q8, "d": self.d, **({"bias": self.bias} if self.bias is not None else {})}
        tensors.update({"order": self.order} if self.order is not None else {})
        return tensors, {"n": self.out_features, "k": self.in_features, "a8": self.a8, "kernel": self.kernel}

    @classmethod
    def from_layout(cls, tensors: dict[str, torch.Tensor], meta: dict) -> "Int8Linear":
        """The layer whose `layout()` this was (the kernel cache's copy of it): nothing packed again."""
        self = cls.__new__(cls)
        self._settle(meta["n"], meta["k"], meta["kernel"], meta["a8"])
        self._hold(tensors["q8"], tensors["d"], tensors.get("bias"))
        if "order" in tensors:
            self._laid_out(tensors["order"])
        return self

    def groups(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(q, scale) of the layer's N output rows, in output order."""
        if self.a8:
            q, scale = int4_a8.unpack_q8(self.q8, self.d, self.out_features)
            return (q, scale) if self.order is None else (q[self._inverse], scale[self._inverse])
        return rowinv.from_blocks(self.q8, self.out_features), rowinv.from_blocks(self.d, self.out_features)

    def lay_out(self, order: torch.Tensor) -> None:
        """Store the rows in `order` (a permutation of the outputs: stored row i is output order[i]; 8-bit activations,
        outputs a multiple of 16), in place of the current copy: `merged_head` reads a head laid out with its draft
        vocabulary first, and the head's own calls write each output where `order` puts it (the same sums, the same
        logits bit for bit). One copy of the head, not two."""
        order = order.to(torch.long).cpu()
        if not self.a8 or self.out_features % int4_a8.TILE or order.shape != (self.out_features,):
            raise SpecstreamError("lay_out needs an 8-bit-activation head of whole tiles and a permutation of its rows")
        old, entry = (self.q8, self.d), self.pack_key and pack_cache.derived_key(self.pack_key, "lay_out", order)
        found = pack_cache.read(entry) if entry else None
        if found is not None and torch.equal(found[0]["order"], order):  # laid out so by a former load: cached
            self.q8, self.d = found[0]["q8"], found[0]["d"]
        else:
            stored = order if self.order is None else self._inverse[order]  # output order[i]'s row in the current copy
            self.q8, self.d = int4_a8.take_rows_q8(self.q8, self.d, stored)  # the old copy goes as the new one is set
            if entry:
                pack_cache.write(entry, {"q8": self.q8, "d": self.d, "order": order}, {})
        self._laid_out(order)
        for t in old:  # a mapped old copy: its pages too
            pack_cache.release(t)

    def _laid_out(self, order: torch.Tensor) -> None:
        self.order, self._inverse = order, torch.argsort(order)
        self._cols = order.to(torch.int32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kernel and rowinv.takes(x):
            if self.order is not None:
                y = int4_a8.linear_q8_map(x, self.q8, self.d, self._cols)
            else:
                y = (int4_a8.linear_q8 if self.a8 else rowinv.linear_q8)(x, self.q8, self.d, self.out_features)
        else:
            if self._weight is None:
                self._weight = self.dequantized()
            y = F.linear(x.float(), self._weight).to(x.dtype)
        return y if self.bias is None else y + self.bias.to(y.dtype)

    def row_groups(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(q [M, K] int8, scale [M, K / 32] fp32) of output rows `index` [M], gathered from the stored layout."""
        index = index.to(torch.long).cpu().reshape(-1)
        g = self.in_features // GROUP
        if not self.a8:  # `to_blocks`: q8 [N' / 4, G, 4, 32], d [N' / 4, G, 4, 1]
            b, r = index // rowinv.OUT_BLOCK, index % rowinv.OUT_BLOCK
            return self.q8[b, :, r, :].reshape(-1, self.in_features), self.d[b, :, r, 0]
        stored = index if self.order is None else self._inverse[index]
        t, o = stored // int4_a8.TILE, stored % int4_a8.TILE  # `int4_a8.pack_q8`: [tile, group, chunk, o, k]
        q = self.q8.view(self.q8.shape[0], g, 8, int4_a8.TILE, 4)[t, :, :, o, :]  # [M, G, 8, 4]
        scale = self.d[t, :, 0, o].contiguous().view(torch.float16).float()  # [M, G]
        return q.reshape(-1, self.in_features), scale

    def rows(self, index: torch.Tensor, a8: bool | None = None) -> "Int8Linear":
        """The same layer restricted to output rows `index` (a draft vocabulary's slice of the head); a8: against 8-bit
        activations or not (default: as this layer)."""
        index = index.to(torch.long).cpu()
        q, scale = self.row_groups(index)
        bias = None if self.bias is None else self.bias[index]
        return Int8Linear(q, scale, bias, kernel=self.kernel, a8=self.a8 if a8 is None else a8)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """Rows `ids` of the weight, q * scale in fp32 [..., K] (`dequantize`'s values: an int8 times a scale), as a
        tied token embedding reads them (`TiedEmbedding`); one kernel call on the 8-bit-activation layout."""
        if self.a8 and self.kernel and ids.is_cpu and self.q8.is_cpu:
            return int4_a8.embed_q8(ids, self.q8, self.d, self._inverse, self.in_features)
        q, scale = self.row_groups(ids)
        w = q.float().reshape(-1, self.in_features // GROUP, GROUP) * scale[..., None]
        return w.reshape(*ids.shape, self.in_features)

    def dequantized(self) -> torch.Tensor:
        """The fp32 weight [N, K], q * scale."""
        return dequantize(*self.groups())

    def extra_repr(self) -> str:
        where = ("row-invariant kernel, 8-bit activations" if self.a8 else "row-invariant kernel") if self.kernel else "torch"
        return f"in_features={self.in_features}, out_features={self.out_features}, group={GROUP}, 8-bit on {where}"


class TiedEmbedding(nn.Module):
    """A token embedding read from the 8-bit head it is tied to (`Int8Linear.embed`), where those groups are its
    weights exactly (`tie_embedding`): the fp32 table (SmolLM2: 113 MB) is not kept beside its 8-bit copy."""

    def __init__(self, head: Int8Linear, padding_idx: int | None = None):
        super().__init__()
        self.head = [head]  # a list: the head stays registered once, as the LM head
        self.num_embeddings, self.embedding_dim, self.padding_idx = head.out_features, head.in_features, padding_idx

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head[0].embed(ids)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, read from the 8-bit LM head"


CHECK_ROWS = 4096  # rows compared at a time (`tie_embedding`, `exact_groups`)


def tie_embedding(model: nn.Module) -> bool:
    """Give a model whose 8-bit head (`Int8Linear`, no bias) holds its token embedding's weights exactly (a tied
    embedding: the GGUF file's Q8_0 head, or an fp32 head made 8-bit exactly by `use_exact_head`) a `TiedEmbedding`
    in place of the fp32 table: the same vectors bit for bit (checked row for row), from the head's bytes. For decoding
    (`Engine.load`); returns whether it did."""
    head, inner = compat.lm_head(model), compat.inner_model(model)
    embedding = getattr(inner, "embed_tokens", None)
    if not (isinstance(head, Int8Linear) and head.bias is None and type(embedding) is nn.Embedding
            and tuple(embedding.weight.shape) == (head.out_features, head.in_features)):
        return False
    entry = model.__dict__.get(pack_cache.MODEL_KEY)  # the checkpoint's packed entry: its verdict, once made
    same = pack_cache.known(entry, "tied_embedding")
    if same is None:
        w = embedding.weight
        same = all(torch.equal(head.embed(torch.arange(r, min(r + CHECK_ROWS, w.shape[0]))),
                               weight_rows(model, w, r, r + CHECK_ROWS)) for r in range(0, w.shape[0], CHECK_ROWS))
        pack_cache.note(entry, "tied_embedding", same)
    if same:
        inner.embed_tokens = TiedEmbedding(head, embedding.padding_idx)
    return same


def quantize_groups(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Q8_0's rule: per group of 32, scale = max |w| / 127 and q = round(w / scale)."""
    w = weight.detach().float()
    n, k = w.shape
    if k % GROUP:
        raise SpecstreamError(f"8-bit groups need input sizes that are multiples of {GROUP} (got {k})")
    g = w.reshape(n, k // GROUP, GROUP)
    scale = g.abs().amax(-1) / 127
    q = torch.round(g / scale.clamp_min(1e-30)[..., None]).clamp_(-127, 127)
    return q.reshape(n, k).to(torch.int8), scale


def exact_groups(weight: torch.Tensor, model: nn.Module | None = None) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(q, scale) whose `dequantize` is `weight` bit for bit (a head converted from a Q8_0 file: its fp16 scales
    times int8 are exact in fp32, and Q8_0's rule finds them again), or None where the weight is anything else."""
    w = weight.detach()
    if w.dtype is not torch.float32 or w.dim() != 2 or w.shape[1] % GROUP:
        return None
    parts = []  # a block of rows at a time: no fp32 temporaries the size of the weight
    for r in range(0, w.shape[0], CHECK_ROWS):
        rows = weight_rows(model, weight, r, r + CHECK_ROWS)  # `model`'s weight: read as loading says
        if not torch.isfinite(rows).all():
            return None
        q, scale = quantize_groups(rows)
        if not torch.equal(dequantize(q, scale), rows):
            return None
        parts.append((q, scale))
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


def use_exact_head(model: nn.Module) -> bool:
    """Give an fp32 model on the row-invariant kernel an 8-bit head where its weights are 8-bit groups exactly
    (`exact_groups`); its logits stay the fp32 head's bit for bit (`rowinv.linear_q8` makes each weight d q in fp32
    and sums as `rowinv.linear` sums), from a quarter of the bytes (SmolLM2: 31.5 MB a pass instead of 113, the
    largest single read of an fp32 pass). The token embedding keeps its fp32 weight. Returns whether it did.
    For decoding (`Engine.load`): training, Medusa heads and the layer draft read the head's `weight`, which the
    8-bit head does not have."""
    head = compat.lm_head(model)
    if not isinstance(head, rowinv.RowInvariantLinear) or head.bias is not None:
        return False
    groups = exact_groups(head.weight, model)
    if groups is None:
        return False
    compat.causal_lm(model).lm_head = Int8Linear(*groups, kernel=True)
    model.config.specstream_head = "8-bit groups, exactly the fp32 weights"
    return True


def from_q8_0(raw: np.ndarray, n: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(q, scale) from GGUF Q8_0 blocks [n, k / 32 * 34 bytes]: fp16 d, then 32 signed bytes; w = d * q."""
    blocks = np.ascontiguousarray(raw).reshape(n, k // GROUP, 34)
    d = blocks[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32)
    q = blocks[..., 2:].copy().view(np.int8).reshape(n, k)
    return torch.from_numpy(q), torch.from_numpy(d)


def dequantize(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    n, k = q.shape
    return (q.float().reshape(n, k // GROUP, GROUP) * scale[..., None]).reshape(n, k)
