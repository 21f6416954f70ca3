"""Load a Hugging Face causal LM (local directory or hub id) at a chosen precision and device.

Precision: auto (the default, `resolve_precision`: int4-a8 on a GGUF-converted base such as the default model, int4
there without AVX512-VNNI; on any other base the checkpoint's own dtype, as transformers' `from_pretrained` loads it,
so that greedy output equals transformers' greedy `generate`), fp32, bf16, fp16 (CUDA only: T4-class GPUs),
nf4 (bitsandbytes 4-bit; computing in fp32 on the CPU, bf16 or fp16 on CUDA: `devices.nf4_compute_dtype`), int8
(bitsandbytes 8-bit; on the CPU without outlier columns, so row-invariant: `bnb_config`), int4 (4-bit groups and an
8-bit head on the row-invariant kernel, or torch's CPU int4 kernel, `kernels/linears/int4.py`; a GGUF-converted
base keeps its file's own groups) or int4-a8 (the same groups against 8-bit activations, llama.cpp's arithmetic, on the kernel's
AVX512-VNNI build: `kernels/linears/int4_a8.py`). Only the architectures in `compat.SUPPORTED_MODEL_TYPES` are
accepted; anything else is refused with a message naming the supported families.
"""

from __future__ import annotations

import ctypes
import json
import os
import warnings
import weakref
from dataclasses import dataclass

import torch

from specstream_core.model.lora import apply_shared_lora, has_shared_lora
from specstream_core.model import compat, default_model, devices, hub_access
from specstream_core.backends import load_time
from specstream_core.errors import SpecstreamError
from safetensors import SafetensorError, safe_open
import tempfile

from specstream_core.model.precisions import (DEFAULT_KERNEL, DEFAULT_PRECISION, INT4, NOT_EXACT_NOTE,  # noqa: F401
                                              PRECISIONS, QUANTIZE_CHOICES, precision_from_flags)


@dataclass(frozen=True)
class LoadConfig:
    base: str
    precision: str = DEFAULT_PRECISION  # auto | fp32 | bf16 | nf4 | int8 (bitsandbytes) | int4 (CPU)
    device: str = "cpu"  # cpu | cuda | cuda:N
    exact_nf4: bool = True  # CPU nf4: disable the bf16 fast path so tree and sequential logits agree
    # CPU fp32/bf16/int4 Linears: auto (the row-invariant kernel, kernels/linears/rowinv.py, where it runs), rowinv, torch
    kernel: str = DEFAULT_KERNEL
    shared_lora: str | None = None  # a shared-mode stream directory: its LoRA is merged before quantizing

    def __post_init__(self):
        if self.precision not in PRECISIONS:
            raise SpecstreamError(f"unknown precision {self.precision!r}; choose one of {', '.join(PRECISIONS)}")
        if not (self.device == "cpu" or self.device.startswith("cuda")):
            raise SpecstreamError(f"unknown device {self.device!r}; use cpu or cuda")
        if self.kernel not in load_time.KERNELS:
            raise SpecstreamError(f"unknown kernel {self.kernel!r}; choose one of {', '.join(load_time.KERNELS)}")
        object.__setattr__(self, "precision", resolve_precision(self.precision, self.device, self.kernel, self.base))
        if self.precision == "fp16" and self.device == "cpu":
            raise SpecstreamError("fp16 runs on CUDA (T4-class GPUs without bf16); on the CPU use bf16 or fp32")
        if self.precision in INT4 and self.device != "cpu":
            raise SpecstreamError(f"{self.precision} runs on the CPU (kernels/linears/int4.py); on CUDA use nf4")
        if self.precision == "int4-a8" and (self.kernel == "torch" or not load_time.a8_available()):
            raise SpecstreamError(load_time.a8_unavailable_reason() or "int4-a8 runs on the row-invariant kernel only "
                                  "(not with SPECSTREAM_KERNEL=torch)")
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise SpecstreamError("--device cuda was asked for but no CUDA device is available")


# precisions whose speculative output equals plain decoding (tests: test_lossless, test_int4, test_rowinv,
# test_int4_a8), on the CPU only: fp32; CPU nf4 with bitsandbytes' bf16 fast path off (it computes in fp32); int4
# and int4-a8 (plain decoding at int4-a8, not the fp32 model), and CPU
# fp32/bf16 on the row-invariant kernel (kernels/linears/rowinv.py), whose Linears are row-invariant and whose
# attention runs row-exact (compat.row_exact_attention), so a speculative pass computes its main rows bit
# for bit as a plain pass. bf16 through torch (oneDNN) sums differently for a different number of rows,
# so a near-tie can flip a token: such runs are labelled "not exact". On CUDA nothing is proven: cuBLAS picks its
# kernels (and their order of sums) by the number of rows, so equality there is measured (scripts/gpu_check.sh).
def is_exact(precision: str, device: str = "cpu", kernel: str = "torch") -> bool:
    if not device.startswith("cpu"):
        return False
    return precision in ("fp32", *INT4, "nf4", "int8") or (precision == "bf16" and kernel == "rowinv")




def resolve_precision(precision: str, device: str = "cpu", kernel: str = "auto", base: str | None = None) -> str:
    """'auto' -> int4-a8 for a base converted from a GGUF file (the default model), on a CPU whose kernel build has
    AVX512-VNNI (else int4 there); on any other base the checkpoint's own dtype (`checkpoint_precision`); other
    precisions unchanged.

    - int4-a8 on a GGUF-converted base (the default SmolLM2) is its fastest measured setting (docs/BENCHMARKS.md):
      the file's own 4-bit groups and 8-bit head against 8-bit activations, llama.cpp's arithmetic
      (`kernels/linears/int4_a8.py`). Not the fp32 model: its answers leave fp32's after about half their tokens,
      as llama.cpp's do; `--quantize int4` is; int4 there without VNNI computes the fp32 model's logits bit for bit;
    - any other base runs as transformers runs it, so `generate --mode ss` equals transformers' greedy `generate` by
      default; bf16 or int4-a8 are faster and one flag away (`exactness.faster_options`)."""
    if precision != "auto":
        return precision
    if base and load_time.kernel_runs("int4", device, kernel) and default_model.gguf_source(base):
        return "int4-a8" if load_time.a8_available() else "int4"
    return checkpoint_precision(checkpoint_dtype(base), device, kernel)


def checkpoint_precision(dtype: str | None, device: str = "cpu", kernel: str = "auto") -> str:
    """The precision that computes a checkpoint stored in `dtype` as transformers' `from_pretrained` loads it:
    - float32 (or unknown: transformers' own default then) -> fp32;
    - bfloat16 -> bf16 on the row-invariant CPU kernel (the checkpoint's weights exactly, every sum in fp32: the
      tokens of transformers' generate with dtype=float32, which widens those weights exactly) and on CUDA (bf16
      through torch, as transformers runs it); fp32 on a CPU without the kernel (the same weights widened exactly;
      bf16 through torch rounds a speculative pass differently from a plain one, so it would not be exact);
    - float16 -> fp32 (no fp16 precision here: the weights widened exactly, transformers' generate at fp32)."""
    if dtype == "bfloat16" and (device.startswith("cuda") or load_time.kernel_runs("bf16", device, kernel)):
        return "bf16"
    return "fp32"


def checkpoint_dtype(base: str | None) -> str | None:
    """The dtype transformers loads a checkpoint in by default (its `dtype="auto"`): the config's `dtype`
    (`torch_dtype` in older files), else the dtype of the first floating tensor of its safetensors weights.
    'float32', 'bfloat16', 'float16' (or another torch dtype's name); None where neither can be read."""
    if not base:
        return None
    if os.path.isdir(base):
        try:
            with open(os.path.join(base, "config.json")) as f:
                config = json.load(f)
        except (OSError, ValueError):
            return None
        name = (config.get("dtype") or config.get("torch_dtype")) if isinstance(config, dict) else None
    else:  # a hub id: its cached config (None offline without one; loading then says why)
        try:
            config = load_config(base)
        except SpecstreamError:
            return None
        name = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    if name is not None:
        return str(name).replace("torch.", "")
    return weights_dtype(base) if os.path.isdir(base) else None


SAFETENSORS_DTYPES = {"F32": "float32", "BF16": "bfloat16", "F16": "float16", "F64": "float64"}


def weights_dtype(directory: str) -> str | None:
    """The dtype of the first floating tensor in a directory's safetensors weights (as transformers reads it
    where the config names none), or None."""
    names = sorted(n for n in os.listdir(directory) if n.endswith(".safetensors"))
    for name in names[:1]:
        try:
            with safe_open(os.path.join(directory, name), "pt") as f:
                for key in f.keys():
                    kind = SAFETENSORS_DTYPES.get(f.get_slice(key).get_dtype())
                    if kind:
                        return kind
        except (OSError, SafetensorError):
            return None
    return None




def _is_local(base: str) -> bool:
    return os.path.isdir(base)


def load_config(base: str):
    if not base:
        raise SpecstreamError("no base model given")
    if not _is_local(base) and (base.startswith((".", "/", "~")) or os.sep in base.strip("/").split("/", 1)[-1]):
        raise SpecstreamError(f"model directory not found: {base}")
    if not _is_local(base):
        hub_access.check(base)  # offline or no network: one line now, not half a minute of retries
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(base)
    except (OSError, ValueError) as exc:
        where = "directory" if _is_local(base) else "hub id (no network? set HF_HUB_OFFLINE=0)"
        raise SpecstreamError(f"cannot read a model config from {base!r} ({where}): {str(exc).splitlines()[0]}") from None
    check_architecture(config)
    return config


def check_architecture(config) -> None:
    reason = compat.refusal(config)  # one line naming what is missing (mixture-of-experts, encoder-decoder, ...)
    if reason is not None:
        raise SpecstreamError(reason)


def load_tokenizer(base: str):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(base)
    except (OSError, ValueError) as exc:
        raise SpecstreamError(f"cannot load a tokenizer from {base!r}: {str(exc).splitlines()[0]}") from None


def load_model(cfg: LoadConfig):
    """Returns the causal LM in eval mode, on `cfg.device`, with the requested precision."""
    from transformers import AutoModelForCausalLM

    if cfg.device == "cpu":
        return_large_blocks()

    load_config(cfg.base)  # clear error for missing dirs / unsupported architectures
    kwargs: dict = {"attn_implementation": "sdpa"}
    if cfg.precision in ("nf4", "int8"):
        kwargs["quantization_config"] = bnb_config(cfg.precision, cfg.device)
        kwargs["device_map"] = {"": cfg.device if cfg.device != "cuda" else 0}
        kwargs["dtype"] = devices.nf4_compute_dtype(cfg.device)  # the unquantized modules compute in it too
    else:  # bf16 on the CPU kernel: an fp32 model whose Linears keep bf16 weights (load_time.install_linears)
        kernel = load_time.kernel_runs(cfg.precision, cfg.device, cfg.kernel)
        kwargs["dtype"] = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(cfg.precision) if not kernel else None
        kwargs["dtype"] = kwargs["dtype"] or torch.float32

    try:
        model = AutoModelForCausalLM.from_pretrained(cfg.base, **kwargs)
    except ImportError as exc:
        raise SpecstreamError(f"cannot load {cfg.precision}: {exc}") from None
    except (OSError, ValueError) as exc:
        raise SpecstreamError(f"cannot load model weights from {cfg.base!r}: {str(exc).splitlines()[0]}") from None
    except SafetensorError as exc:  # a truncated or otherwise corrupt .safetensors file
        raise SpecstreamError(f"cannot load model weights from {cfg.base!r}: corrupt or truncated safetensors file "
                              f"({str(exc).splitlines()[0] if str(exc) else 'unreadable'})") from None
    if cfg.precision not in ("nf4", "int8"):
        model.to(cfg.device)
    model.eval()
    # what the output is compared with (`exactness.for_engine`): the checkpoint's own dtype, and whether it is the
    # bundled default model (a GGUF-converted base)
    model.config.specstream_checkpoint = {"dtype": checkpoint_dtype(cfg.base),
                                          "bundled": bool(default_model.gguf_source(cfg.base))}
    merged = bool(cfg.shared_lora) and has_shared_lora(cfg.shared_lora)
    if merged:  # into the loaded weights, so that int4 and the CPU kernel take the adapted ones; peft merges in place
        model = apply_shared_lora(model, cfg.shared_lora)  # and returns the same module: the flag says it changed
    if not merged and cfg.device == "cpu" and cfg.precision in (*INT4, "fp32", "bf16") and os.path.isdir(cfg.base):
        # the weights as in their files: checks read them there (`CheckpointRows`), the mapped pages stay unread
        load_time.set_weight_rows(model, CheckpointRows(model, cfg.base))
    if cfg.precision == "nf4" and cfg.device == "cpu" and cfg.exact_nf4:
        make_nf4_exact(model)
    if cfg.precision in INT4:
        to_int4(model, cfg.base, load_time.kernel_runs(cfg.precision, cfg.device, cfg.kernel),
                adapted=bool(cfg.shared_lora), a8=cfg.precision == "int4-a8")
    elif load_time.kernel_runs(cfg.precision, cfg.device, cfg.kernel):
        # fp32 Linears kept as the kernel's copies: their mapped pages let go through the weight reader
        load_time.install_linears(model, cfg.kernel, torch.bfloat16 if cfg.precision == "bf16" else torch.float32)
    return model


def to_int4(model, base: str, kernel: bool, adapted: bool = False, a8: bool = False) -> dict:
    """4-bit decoder Linears and an 8-bit head (kernels/linears/int4.py, kernels/heads/int8_head.py), on the row-invariant
    kernel or through torch; a GGUF-converted base keeps its file's own groups (its fp32 weights exactly).
    adapted: a shared-mode LoRA was merged, so the Linears it changed are quantized again (no warning)."""
    source = default_model.gguf_source(base)
    report = load_time.quantize_int4(model, source, kernel=kernel, a8=a8)  # each group read as its Linear is packed
    if source and report["from_file"] < report["layers"] and not adapted:  # e.g. a reader that dequantizes another way
        warnings.warn(f"int4: only {report['from_file']} of {report['layers']} Linears are {os.path.basename(source)}'s "
                      "own groups; the others were quantized again, so this int4 model is not the fp32 model exactly")
    model.config.specstream_int4 = report  # where the 4-bit groups came from, for traces and benchmarks
    return report


MMAP_THRESHOLD = 1 << 20  # bytes: glibc serves larger blocks from their own mappings (`return_large_blocks`)
_M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)


def return_large_blocks() -> bool:
    """Have glibc's malloc give blocks of MMAP_THRESHOLD bytes or more back to the system when they are freed.

    By default the threshold moves up to the size of each large block freed (up to 32 MB), so that loading, which
    makes and frees thousands of tensors of one to a few MB (a file's groups, their checks, the packed copies' makings)
    between the copies it keeps, leaves them all in the heap, scattered between the kept ones: on SmolLM2 int4-a8,
    380 MB of freed memory the process still held. With the threshold fixed, each such block is its own mapping and
    goes when freed (one system call a block; decoding's tensors are far smaller). Returns whether it was set (glibc)."""
    try:
        return bool(ctypes.CDLL(None).mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    except (OSError, AttributeError):  # not glibc
        return False


LIBC = ctypes.CDLL(None)
MADV_DONTNEED = 4


def _mapped_at(path: str, offset: int, start: int, size: int) -> bool:
    """Whether bytes [start, start + size) of this process are `path`'s bytes from `offset` on, mapped privately."""
    real = os.path.realpath(path)
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            if len(parts) < 6 or parts[5].strip() != real or not parts[1].endswith("p"):
                continue
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            if lo <= start and start + size <= hi and start - lo + int(parts[2], 16) == offset:
                return True
    return False


class CheckpointRows:
    """Rows of a loaded model's weights read from its safetensors files (`int8_head.weight_rows`).

    transformers maps the files and its weights are views of them: a page is read from disk, and resident, when first
    touched. The checks of int4 loading (the GGUF file's groups against each Linear's weight) and of an 8-bit head tied
    to the embedding would touch every weight they then drop; here they read the same bytes with pread into buffers
    of their own, so an int4 engine never holds the fp32 weights it does not decode with (SmolLM2: 540 MB). A weight
    not stored as it is loaded (another dtype or shape, a name not in the files) is read where it is."""

    DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}

    def __init__(self, model, directory: str):
        self.entries: dict[str, tuple] = {}  # name -> (file, offset of its data, dtype, shape)
        self.files = [os.path.join(directory, n) for n in sorted(os.listdir(directory)) if n.endswith(".safetensors")]
        for path in self.files:
            with open(path, "rb") as f:
                size = int.from_bytes(f.read(8), "little")
                header = json.loads(f.read(size))
            for key, info in header.items():
                if key != "__metadata__" and info.get("dtype") in self.DTYPES:
                    self.entries[key] = (path, 8 + size + info["data_offsets"][0], self.DTYPES[info["dtype"]],
                                         tuple(info["shape"]))
        self.names = {}  # id(parameter) -> (a weak reference to it, its name in the files)
        for name, param in model.named_parameters(remove_duplicate=False):
            if name in self.entries and id(param) not in self.names:
                self.names[id(param)] = (weakref.ref(param), name, param._version)

    def release(self, weight: torch.Tensor) -> bool:
        """Let the pages of `weight` go (madvise MADV_DONTNEED) where it is, unchanged since loading, a view of its
        file's private mapping at its place in the file: the system drops them and reads them from the file again
        only if the weight is read again (the same bytes). For a weight the kernel has copied (`load_time.release_copied`).
        Returns whether it did."""
        known = self.names.get(id(weight))
        if known is None or known[0]() is not weight or known[2] != weight._version:
            return False
        path, offset, dtype, shape = self.entries[known[1]]
        start, size = weight.data_ptr(), weight.numel() * weight.element_size()
        if dtype != weight.dtype or shape != tuple(weight.shape) or not _mapped_at(path, offset, start, size):
            return False
        page = os.sysconf("SC_PAGE_SIZE")
        first, last = -(-start // page) * page, (start + size) // page * page
        return last <= first or LIBC.madvise(ctypes.c_void_p(first), ctypes.c_size_t(last - first), MADV_DONTNEED) == 0

    def __call__(self, weight: torch.Tensor, start: int, stop: int) -> torch.Tensor | None:
        """Rows [start, stop) of `weight` in its dtype as loaded, or None where it is not one of the files' tensors."""
        known = self.names.get(id(weight))
        if known is None or known[0]() is not weight:
            return None
        path, offset, dtype, shape = self.entries[known[1]]
        if shape != tuple(weight.shape) or len(shape) != 2:
            return None
        stop = min(stop, shape[0])
        row = shape[1] * torch.empty(0, dtype=dtype).element_size()
        with open(path, "rb") as f:
            data = os.pread(f.fileno(), (stop - start) * row, offset + start * row)
        rows = torch.frombuffer(bytearray(data), dtype=dtype).reshape(stop - start, shape[1])
        return rows.to(weight.dtype)


def bnb_config(precision: str, device: str = "cpu"):
    from transformers import BitsAndBytesConfig

    if precision == "nf4":
        return BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=devices.nf4_compute_dtype(device)
        )
    # on a CPU without outlier columns: each row's activations are quantized on their own and the 8-bit products
    # summed in int32, so a row's output does not depend on the other rows of a call (row-invariant, as nf4 and the
    # kernel are); LLM.int8's outlier split picks its columns from all the rows of a call, so a tree pass and a
    # sequential one could round one row differently
    return BitsAndBytesConfig(load_in_8bit=True, llm_int8_threshold=0.0 if device.startswith("cpu") else 6.0)


def quantize_in_memory(model, precision: str, device: str = "cpu", exact_nf4: bool = True):
    """Quantize an already-built fp32 model (used by tests on models made from configs)."""
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        return load_model(LoadConfig(tmp, precision=precision, device=device, exact_nf4=exact_nf4))


def make_nf4_exact(model) -> None:
    """bitsandbytes' CPU bf16 fast path makes tree and sequential logits differ (~2e-2); turn it off."""
    try:
        import bitsandbytes as bnb
    except ImportError:  # pragma: no cover
        return
    for module in model.modules():
        if isinstance(module, bnb.nn.Linear4bit):
            module.support_avx512bf16_for_cpu = False
