"""4-bit weights on the CPU: the row-invariant kernel's int4 Linears (`rowinv.linear_q4`), or torch's own
int4 kernel (`aten._weight_int4pack_mm_for_cpu`) where that cannot run.

Every Linear of the decoder layers becomes an `Int4Linear`: 4-bit weights in groups of
32 along the input dimension, each group with a scale and a low end, w = q * scale + low (q in 0..15),
kept as GGUF's Q4_1 keeps them (per group, 16 bytes of nibbles: element j in the low nibble of byte j,
element j + 16 in its high nibble).

- **On the kernel** (the default where it runs, `rowinv.available()`): each weight is made in registers as
  its fp32 value, q * scale + low, and each row is summed exactly as the kernel's fp32 Linears sum it, in
  one fixed order that does not depend on the other rows of the pass. So an int4 Linear gives the fp32
  Linear of its dequantized weights bit for bit, and with the kernel's attention the model's speculative
  passes compute their main rows bit for bit as plain passes. The model's norms and attention run on the
  kernel too (`rowinv.adopt`).
- **Against 8-bit activations** (`a8=True`, precision int4-a8, the default where the kernel's build has
  AVX512-VNNI): the same groups in another layout, each input row rounded to 8 bits per group of 32 and the
  products summed as integers (`kernels/linears/int4_a8.py`): llama.cpp's arithmetic, not the fp32 model, still
  row-invariant.
- **Through torch** (no kernel here, `SPECSTREAM_KERNEL=torch`, inside `rowinv.torch_linears()` as
  transformers' baseline, or with gradients): torch's kernel reads bf16 activations and bf16 scales, w =
  (q - 8) * scale + zero with zero = low + 8 scale; it is row-invariant as well. Its arithmetic is not the
  kernel's: the two paths can round a near-tie differently.

Where the base was converted from a Q4_1 GGUF file (the default SmolLM2 model), the decoder layers'
4-bit groups are the file's own (`gguf_groups`, `from_q4_1`): Q4_1 stores w = d * q + m per block of 32, the
kernel's form exactly (its fp16 d and m are exact in fp32), so these Linears hold the fp32 model's weights
exactly. The head is 8-bit (`kernels/heads/int8_head.py`, GGUF's Q8_0), the file's own groups where it has them (the
default model's tied token embedding): its fp32 weights exactly again. With every weight the fp32 model's
and every sum the fp32 kernel's, int4 on the default model computes the fp32 model's logits bit for bit
at a quarter of its bytes (tests/test_int4.py checks it on a GGUF file it writes). A 4-bit head was the one change of
weights and made int4 output leave fp32 output on 14 of 15 prompts (tests/test_int4_head.py shows it in small); an fp32
head reads 113 MB a pass. `quantize_model(head=...)` still offers both. Without the kernel the head stays
4-bit: torch's int4 kernel is row-invariant, its fp32 matmul is not.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from specstream_core.errors import SpecstreamError
from specstream_core.model import compat
from specstream_core.kernels.linears import gguf_file, int4_a8, pack_cache, rowinv
from specstream_core.kernels.linears.gguf_file import GGUF_NAMES as _GGUF_NAMES, dequantize, from_q4_1  # noqa: F401
from specstream_core.kernels.heads import int8_head
from specstream_core.kernels.heads.int8_head import WEIGHT_ROWS  # noqa: F401 - where loading leaves its weight reader

GROUP = 32  # elements per scale/low group (Q4_1's block size)
_TORCH_DTYPE = torch.bfloat16  # torch's CPU kernel's fast path; fp32 activations take a scalar fallback


def available() -> bool:
    """Whether int4 can run here at all: on the row-invariant kernel, or on torch's int4 CPU kernel."""
    return rowinv.available() or torch_available()


def torch_available() -> bool:
    return hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu") and hasattr(torch.ops.aten, "_convert_weight_to_int4pack_for_cpu")


def pack_nibbles(q: torch.Tensor) -> torch.Tensor:
    """Integers 0..15 [N, K] -> bytes [N, K / 2]: per group of 32, byte j holds element j (low nibble) and
    element j + 16 (high nibble), as Q4_1 blocks do."""
    n, k = q.shape
    g = q.to(torch.uint8).reshape(n, k // GROUP, 2, GROUP // 2)
    return (g[:, :, 0] | (g[:, :, 1] << 4)).reshape(n, k // 2).contiguous()


def unpack_nibbles(packed: torch.Tensor) -> torch.Tensor:
    n, half = packed.shape
    g = packed.reshape(n, half * 2 // GROUP, GROUP // 2)
    return torch.cat([g & 0x0F, g >> 4], dim=-1).reshape(n, half * 2)


class Int4Linear(nn.Module):
    """y = x W^T (+ b) with W in 4-bit groups (module docstring): on the row-invariant kernel where it runs
    (kernel=None: `rowinv.available()`), else through torch's int4 kernel (its packing made on first use).

    Output rows are padded to a multiple of 4 (the kernel's block; the last row repeated, its outputs
    dropped). `rows` cuts the layer to some of its outputs (the LM head, for a draft vocabulary)."""

    def __init__(self, q: torch.Tensor, scale: torch.Tensor, low: torch.Tensor, bias: torch.Tensor | None = None,
                 kernel: bool | None = None, a8: bool = False):
        """q: integers 0..15 [N, K]; scale, low: [N, K / GROUP] (w = q * scale + low). a8: against 8-bit
        activations on the kernel (`kernels/linears/int4_a8.py`; another layout of the same groups)."""
        n, k = q.shape
        if k % GROUP or scale.shape != (n, k // GROUP) or low.shape != scale.shape:
            raise SpecstreamError(f"int4 weights need groups of {GROUP} along the input (got {tuple(q.shape)})")
        self._settle(n, k, kernel, a8)
        if a8:  # the same groups in the layout of the 8-bit-activation kernel
            q4, dm = int4_a8.pack(q, scale, low)  # [N' / 16, G, 4, 64], [N' / 16, G, 2, 16]
        else:
            q, scale, low = (rowinv.pad_rows(t) for t in (q, scale, low))
            q4 = rowinv.to_blocks(pack_nibbles(q), k // GROUP)  # [N' / 4, G, 4, 16]
            dm = rowinv.to_blocks(torch.stack([scale.float(), low.float()], dim=-1), k // GROUP)  # [N' / 4, G, 4, 2]
        pack_cache.COUNTS["packed"] += 1
        self._hold(q4, dm, None if bias is None else bias.detach().float())

    def _settle(self, n: int, k: int, kernel: bool | None, a8: bool) -> None:
        """The layer's shape and where it runs, or the reason it cannot run here."""
        super().__init__()
        self.in_features, self.out_features = k, n
        self.kernel = rowinv.available() if kernel is None else kernel
        if not self.kernel and not torch_available():
            raise SpecstreamError("int4 needs the row-invariant kernel (a C compiler, AVX2) or torch >= 2.6")
        self.a8 = a8
        if a8 and not (self.kernel and int4_a8.available()):
            raise SpecstreamError(int4_a8.unavailable_reason() or "int4-a8 runs on the row-invariant kernel only")
        self._torch_args: tuple | None = None

    def _hold(self, q4: torch.Tensor, dm: torch.Tensor, bias: torch.Tensor | None) -> None:
        for name, t in (("q4", q4), ("dm", dm), ("bias", bias)):
            self.register_buffer(name, t, persistent=False)

    def layout(self) -> tuple[dict[str, torch.Tensor], dict]:
        """(the packed tensors the kernel reads, what `from_layout` needs besides them), for the kernel cache."""
        tensors = {"q4": self.q4, "dm": self.dm, **({"bias": self.bias} if self.bias is not None else {})}
        return tensors, {"n": self.out_features, "k": self.in_features, "a8": self.a8, "kernel": self.kernel}

    @classmethod
    def from_layout(cls, tensors: dict[str, torch.Tensor], meta: dict) -> "Int4Linear":
        """The layer whose `layout()` this was (the kernel cache's copy of it): nothing packed again."""
        self = cls.__new__(cls)
        self._settle(meta["n"], meta["k"], meta["kernel"], meta["a8"])
        self._hold(tensors["q4"], tensors["dm"], tensors.get("bias"))
        return self

    def groups(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(q, scale, low) of the layer's N output rows."""
        n, k = self.out_features, self.in_features
        if self.a8:
            return int4_a8.unpack(self.q4, self.dm, n)
        dm = rowinv.from_blocks(self.dm, n).reshape(n, k // GROUP, 2)
        return unpack_nibbles(rowinv.from_blocks(self.q4, n)), dm[..., 0], dm[..., 1]

    def _torch_kernel_args(self) -> tuple[torch.Tensor, torch.Tensor]:
        """torch's packing of the same groups (its kernel takes output rows 16 at a time)."""
        if self._torch_args is None:
            q, scale, low = self.groups()
            q, scale, low = (rowinv.pad_rows(t, 16) for t in (q, scale, low))
            packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q.to(torch.int32).contiguous(), 1)
            sz = torch.stack([scale, low + 8 * scale], dim=-1).transpose(0, 1).contiguous()  # [G, N, 2]
            self._torch_args = (packed, sz.to(_TORCH_DTYPE))
        return self._torch_args

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kernel and rowinv.takes(x):
            y = (int4_a8.linear if self.a8 else rowinv.linear_q4)(x, self.q4, self.dm, self.out_features)
        else:
            packed, sz = self._torch_kernel_args()
            rows = x.reshape(-1, self.in_features).to(_TORCH_DTYPE)
            y = torch.ops.aten._weight_int4pack_mm_for_cpu(rows, packed, GROUP, sz)[:, : self.out_features]
            y = y.to(x.dtype).reshape(*x.shape[:-1], self.out_features)
        return y if self.bias is None else y + self.bias.to(y.dtype)

    def rows(self, index: torch.Tensor) -> "Int4Linear":
        """The same layer restricted to output rows `index` (a draft vocabulary's slice of the head)."""
        index = index.to(torch.long).cpu()
        q, scale, low = self.groups()
        bias = None if self.bias is None else self.bias[index]
        return Int4Linear(q[index], scale[index], low[index], bias, kernel=self.kernel, a8=self.a8)

    def dequantized(self) -> torch.Tensor:
        """The fp32 weight [N, K] of the groups, q * scale + low (for checks, not for decoding)."""
        return dequantize(*self.groups())

    def extra_repr(self) -> str:
        where = ("row-invariant kernel, 8-bit activations" if self.a8 else "row-invariant kernel") if self.kernel else "torch"
        return f"in_features={self.in_features}, out_features={self.out_features}, group={GROUP}, int4 on {where}"


class FusedInt4(nn.Module):
    """Several Linears that read the same input (q/k/v, gate/up) as one kernel call over their stacked rows.

    Each member (`Int4Part`) keeps its place and name in the model; the first to see an input computes
    every member's output, the others slice it. One call costs far less than three: measured on
    SmolLM2's shapes, q+k+v 68 µs against 40 µs fused, gate+up 115 µs against 103 µs (one row, one
    thread). The kernel is row-invariant, so a fused layer stays exact between plain and speculative
    passes (every path uses the same fused call)."""

    def __init__(self, parts: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]],
                 kernel: bool | None = None, a8: bool = False):
        q, scale, zero = (torch.cat([p[i] for p in parts]) for i in range(3))
        biases = [p[3] if p[3] is not None else torch.zeros(p[0].shape[0]) for p in parts]
        bias = torch.cat(biases) if any(p[3] is not None for p in parts) else None
        self._join(Int4Linear(q, scale, zero, bias, kernel=kernel, a8=a8), [p[0].shape[0] for p in parts])

    def _join(self, linear: Int4Linear, rows: list[int]) -> None:
        super().__init__()
        self.linear = linear
        bounds = np.cumsum([0] + rows).tolist()
        self.slices = list(zip(bounds[:-1], bounds[1:]))
        self._last: tuple | None = None  # (input, its version, output): the call the other members reuse

    @classmethod
    def of_linear(cls, linear: Int4Linear, rows: list[int]) -> "FusedInt4":
        """The group whose members' output rows are `rows` (in order), computed by `linear` (their stacked rows)."""
        self = cls.__new__(cls)
        self._join(linear, rows)
        return self

    def output(self, x: torch.Tensor) -> torch.Tensor:
        last = self._last
        version = -1 if x.is_inference() else x._version  # inference tensors keep no version counter
        if last is not None and last[0] is x and last[1] == version:
            return last[2]
        y = self.linear(x)
        self._last = (x, version, y)
        return y


class Int4Part(nn.Module):
    """One member of a `FusedInt4`: its slice of the fused output."""

    def __init__(self, fused: FusedInt4, index: int):
        super().__init__()
        self.fused = [fused]  # a list: the group is registered once, on its first member's parent
        self.start, self.end = fused.slices[index]
        self.in_features, self.out_features = fused.linear.in_features, self.end - self.start

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fused[0].output(x)[..., self.start:self.end]

    def dequantized(self) -> torch.Tensor:
        return self.fused[0].linear.dequantized()[self.start:self.end]

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int4, fused rows {self.start}:{self.end}"


# Linears of one decoder layer that read the same input, fused when all are present
FUSE = (("self_attn", ("q_proj", "k_proj", "v_proj")), ("mlp", ("gate_proj", "up_proj")))


def quantize_groups(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Asymmetric min-max 4-bit groups of a weight [N, K]: (q, scale, low) with w ~ q * scale + low."""
    w = weight.detach().float()
    n, k = w.shape
    if k % GROUP:
        raise SpecstreamError(f"int4 needs input sizes that are multiples of {GROUP} (got {k})")
    g = w.reshape(n, k // GROUP, GROUP)
    lo, hi = g.amin(-1), g.amax(-1)
    scale = ((hi - lo) / 15).clamp_min(1e-12)
    q = torch.round((g - lo[..., None]) / scale[..., None]).clamp_(0, 15)
    return q.reshape(n, k).to(torch.uint8), scale, lo


# ---- the model ---------------------------------------------------------------------------------
def _linears(model) -> dict[str, nn.Linear]:
    """Decoder-layer Linears by their name in the model, plus the LM head."""
    layers = compat.decoder_layers(model)
    out = {}
    for li, layer in enumerate(layers):
        for name, module in layer.named_modules():
            if isinstance(module, nn.Linear):
                out[f"{li}.{name}"] = module
    out["lm_head"] = compat.lm_head(model)
    return out


def _set(model, key: str, module: nn.Module) -> None:
    if key == "lm_head":
        compat.causal_lm(model).lm_head = module
        return
    li, path = key.split(".", 1)
    parent = compat.decoder_layers(model)[int(li)]
    *parents, leaf = path.split(".")
    for name in parents:
        parent = getattr(parent, name)
    setattr(parent, leaf, module)


def quantize_model(model, groups: dict[str, tuple] | None = None, kernel: bool | None = None,
                   head: str | None = None, a8: bool = False, layouts: dict | None = None,
                   made: dict | None = None) -> dict:
    """Replace the decoder Linears by `Int4Linear`s and the LM head as `head` says, in place (CPU, fp32).

    groups: per key of `_linears`, ready groups to use instead of quantizing the weight (a GGUF file's
    own blocks: (q, scale, low) for a layer, (q, scale) for the 8-bit head). kernel: run them on the
    row-invariant kernel (None: where it runs), which then also takes the model's norms and attention
    (`rowinv.adopt`). head: "q8" (8-bit groups, `kernels/heads/int8_head.py`; the default on the kernel),
    "int4" (the default through torch, whose int4 kernel is row-invariant where its fp32 matmul is not),
    or "fp32" (its own weights, on the kernel where it runs). a8: the decoder Linears take 8-bit activations
    (int4-a8, `kernels/linears/int4_a8.py`), and so does an 8-bit head. layouts: a former call's layers (its `made`,
    kept by `pack_cache`) taken instead of reading, checking, packing anything; its report too. made: filled, by key.
    Returns {"layers": n, "from_file": m, "fused": f, "kernel": bool, "head": head, "head_from_file": bool, "a8": a8}."""
    linears = _linears(model)
    kernel, head = _settle(model, kernel, head, linears)
    groups, made = groups if groups is not None else {}, {} if made is None else made
    n_linears, taken = len(linears), []
    if head != "int4":
        made["lm_head"] = _made_head(model, linears.pop("lm_head"), head, groups, layouts, taken, kernel, a8)
        _set(model, "lm_head", made["lm_head"])

    def weights(key: str) -> tuple:
        """The Linear's groups (the file's, else its own quantized) and bias; the Linear is let go."""
        linear = linears.pop(key)
        got = _take(groups, key, linear, model) if key != "lm_head" else None  # a file's head groups are 8-bit
        taken.append(got is not None)
        q, scale, low = got if got is not None else quantize_groups(linear.weight)
        return q, scale, low, None if linear.bias is None else linear.bias.detach().float()

    def layer(key: str) -> Int4Linear:
        made[key] = (Int4Linear.from_layout(*layouts[key]) if layouts is not None and linears.pop(key, True)
                     else Int4Linear(*weights(key), kernel=kernel, a8=a8))
        return made[key]

    fused = 0
    for li, layer_module in enumerate(compat.decoder_layers(model)):  # one layer at a time: its fp32 weights go as it is packed
        for parent, names in FUSE:
            keys = [f"{li}.{parent}.{name}" for name in names]
            if all(k in linears for k in keys) and len({linears[k].in_features for k in keys}) == 1:
                group = (FusedInt4.of_linear(layer("+".join(keys)), [linears[k].out_features for k in keys])
                         if layouts is not None else FusedInt4([weights(k) for k in keys], kernel=kernel, a8=a8))
                made["+".join(keys)] = group.linear
                for i, k in enumerate(keys):
                    linears.pop(k, None)
                    _set(model, k, Int4Part(group, i))
                getattr(layer_module, parent).add_module("int4_fused_" + names[0], group)
                fused += 1
        for key in [k for k in linears if k.split(".", 1)[0] == str(li)]:
            _set(model, key, layer(key))
    for key in list(linears):  # a 4-bit head
        _set(model, key, layer(key))
    if kernel:
        rowinv.adopt(model)
    if layouts is not None:
        return dict(layouts["report"])
    return {"layers": n_linears, "from_file": sum(taken), "fused": fused, "kernel": kernel, "head": head,
            "head_from_file": head != "int4" and taken[0], "a8": a8}


def _settle(model, kernel: bool | None, head: str | None, linears: dict) -> tuple[bool, str]:
    """`quantize_model`'s kernel and head made concrete, or the reason they (or its `linears`' shapes) cannot run."""
    kernel = rowinv.available() if kernel is None else kernel
    if kernel and not rowinv.available():
        raise SpecstreamError(f"the row-invariant kernel cannot run here: {rowinv.unavailable_reason()}")
    if not kernel and not torch_available():
        raise SpecstreamError("int4 needs the row-invariant kernel (a C compiler and AVX2) or torch's CPU int4 "
                              "kernel (torch >= 2.6)")
    head = head or ("q8" if kernel else "int4")
    if head not in HEADS:
        raise SpecstreamError(f"unknown int4 head {head!r}; choose one of {', '.join(HEADS)}")
    if next(model.parameters()).device.type != "cpu":
        raise SpecstreamError("--quantize int4 runs on the CPU; on CUDA use nf4")
    for key, linear in linears.items():
        if linear.in_features % GROUP and (key != "lm_head" or head == "int4"):
            raise SpecstreamError(f"int4 needs input sizes that are multiples of {GROUP}; {key} has {linear.in_features}")
    return kernel, head


def _take(groups, key: str, linear: nn.Module, model) -> tuple | None:
    """The ready groups for the Linear under `key` (a dict's, or a GGUF file's where they are its weight), else None."""
    if isinstance(groups, gguf_file.FileGroups):
        return groups.take(key, linear.weight, model) if key in groups else None
    return groups.get(key)


HEADS = ("q8", "int4", "fp32")


def _made_head(model, linear: nn.Linear, head: str, groups, layouts: dict | None, taken: list, kernel: bool,
               a8: bool) -> nn.Module:
    """`quantize_model`'s head: from `layouts` where given, else `_head` of the ready groups (noted in `taken`)."""
    if layouts is not None and head == "q8":
        return int8_head.Int8Linear.from_layout(*layouts["lm_head"])
    head_groups = _take(groups, "lm_head", linear, model) if head == "q8" else None
    taken.append(head_groups is not None)
    return _head(linear, head, head_groups, kernel, a8)


def _head(linear: nn.Linear, head: str, groups: tuple | None, kernel: bool, a8: bool = False) -> nn.Module:
    """The LM head kept in fp32 (on the kernel where it runs) or made 8-bit (a file's groups, or its own)."""
    if head == "fp32":
        if kernel:
            rowinv.make_row_invariant(linear)
        return linear
    q, scale = groups or int8_head.quantize_groups(linear.weight)
    bias = None if linear.bias is None else linear.bias.detach().float()
    return int8_head.Int8Linear(q, scale, bias, kernel=kernel, a8=a8)


# ---- a GGUF file's own 4-bit groups --------------------------------------------------------------
def file_groups(path: str, model) -> gguf_file.FileGroups:
    """The GGUF file's groups for `model`'s Linears, read one tensor at a time as `quantize_model` packs them
    (`gguf_file.FileGroups`)."""
    return gguf_file.FileGroups(path, model.config)


def gguf_groups(path: str, model) -> dict[str, tuple]:
    """All of the file's groups at once, each checked against `model`'s weight (`gguf_file.FileGroups.checked`)."""
    return file_groups(path, model).checked(_linears(model), model)
