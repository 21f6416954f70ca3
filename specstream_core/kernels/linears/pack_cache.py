"""The kernel cache's packed layouts: what loading packs for the kernel (int4 / int4-a8 blocked nibbles and scales,
the 8-bit head) written once to `<cache root>/packed/` and loaded from there on every later load, so that a second
start reads no weights, checks nothing and packs nothing.

An entry is one file, `<key>.pack`, named by a digest (`key`) of everything its bytes follow from:
- the weights: per source file (the checkpoint's safetensors and config.json, the GGUF file whose groups it keeps),
  `file_digest`: its name, size and mtime, its first MiB (a safetensors file's tensor table, a GGUF file's header),
  its last 64 KiB and 16 blocks of 4 KiB spread over it. Size and mtime change with every ordinary rewrite (a new
  conversion writes a new file); the sampled bytes catch a different file copied in with its mtime kept. Hashing
  every byte (640 MB for SmolLM2's checkpoint and GGUF file) would cost about a second, the time the cache saves;
  an edit in place that keeps size and mtime and misses every sampled block is the one change it does not see;
- the build: the kernel library's file name (itself a digest of the kernel's sources, compiler and flags,
  `builder.library_path`) and the bytes of the Python modules that make the layouts (`CODE`);
- what was asked: precision, head, kernel or torch.

File: MAGIC, the header's length (8 bytes, little-endian), a JSON header ({"format", "key", "data_bytes", "meta",
"tensors": {name: [dtype, shape, offset, bytes]}}), then, from the next page boundary on, each tensor at a
page-aligned offset (counted from there). `read` trusts an entry only where the magic, format, key, the file's size
and every tensor's bounds agree; anything else (a stale format, another key, a truncated or corrupt file) is left and
rebuilt (`write` replaces it). Writes go to a temporary
file beside the entry and are renamed into place: a killed run leaves no half entry (at most a temporary file,
swept by `trim`). Tensor bytes are not checksummed: that would read every page at start.

Size: `trim` keeps the most recently used entries, at most MAX_ENTRIES (64) within $SPECSTREAM_PACK_CACHE_MB
(default 2048 MB; SmolLM2's int4-a8 entries are 98 MB, and 32 MB for its head laid out for the default stream set's
draft vocabulary). Clear it by deleting `<cache root>/packed/` ($SPECSTREAM_CACHE, else ~/.cache/specstream; $SPECSTREAM_PACK_DIR names another
folder); $SPECSTREAM_PACK_CACHE=0 turns the cache off.

Loading: each tensor is read from the file into memory of its own (one copy from the page cache: about 50 ms of CPU
for SmolLM2's 130 MB). With $SPECSTREAM_PACK_CACHE=map the file is mapped privately instead, its pages populated at
once (MAP_POPULATE: no page fault at the first decode) and shared with every process that maps the same entry. On
a busy 2-core AMD EPYC (AVX-512) the kernel read mapped pages up to a tenth more slowly than its own (SmolLM2
int4-a8, every 4-bit Linear called in turn, fastest of 25 rounds: 1.10x for one row, 1.12x for six), but copies of
the same bytes in the process's own memory also moved by a tenth between runs there: not settled, so the read copy,
whose pages are those a fresh pack makes, is the default. Any change to the modules in `CODE` makes new keys: the
next load packs again.
"""

from __future__ import annotations

import glob
import hashlib
import json
import mmap
import os
import tempfile
import time

import torch

from specstream_core import paths
from specstream_core.kernels import library as kernel_library

MAGIC = b"SSPACK\x00\x01"
FORMAT = 1  # the file layout above; a change makes every older entry stale
ALIGN = 4096  # tensors start on page boundaries
HEAD_BYTES, TAIL_BYTES, SAMPLES, SAMPLE_BYTES = 1 << 20, 64 << 10, 16, 4096  # `file_digest`'s reads
DEFAULT_LIMIT_MB = 2048
MAX_ENTRIES = 64
_HERE = os.path.dirname(os.path.abspath(__file__))
# the modules whose code makes the layouts: a change to any of them makes a new key
CODE = [os.path.join(_HERE, name) for name in ("int4.py", "int4_a8.py", "rowinv.py", "gguf_file.py", "pack_cache.py")]
CODE.append(os.path.join(os.path.dirname(_HERE), "heads", "int8_head.py"))
DTYPES = {str(d).replace("torch.", ""): d for d in (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
                                                    torch.float16, torch.bfloat16, torch.float32)}
MODEL_KEY = "_specstream_pack_key"  # where loading leaves a model's entry key (None: not cached) for `known`
COUNTS = {"packed": 0, "loaded": 0, "written": 0, "rebuilt": 0}  # layouts packed / entries loaded, written, found bad


def enabled() -> bool:
    return os.environ.get("SPECSTREAM_PACK_CACHE", "").strip().lower() not in ("0", "false", "no", "off")


def folder() -> str:
    """$SPECSTREAM_PACK_DIR, else `packed/` under the cache root (the footprint report gives each run its own)."""
    return os.environ.get("SPECSTREAM_PACK_DIR") or os.path.join(paths.cache_root(), "packed")


def file_digest(path: str) -> str:
    """A cheap digest of a file (module docstring): name, size, mtime, its first MiB, last 64 KiB and 16 sampled
    blocks."""
    st = os.stat(path)
    h = hashlib.sha256(f"{os.path.basename(path)}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    with open(path, "rb") as f:
        fd = f.fileno()
        h.update(os.pread(fd, HEAD_BYTES, 0))
        h.update(os.pread(fd, TAIL_BYTES, max(0, st.st_size - TAIL_BYTES)))
        for i in range(SAMPLES):
            h.update(os.pread(fd, SAMPLE_BYTES, st.st_size * i // SAMPLES))
    return h.hexdigest()


def build_key() -> str:
    """The kernel build (its library's file name: a digest of its sources, compiler and flags; "torch" without it)
    and the bytes of the modules that make the layouts."""
    lib = kernel_library.library()
    h = hashlib.sha256(os.path.basename(getattr(lib, "_name", "torch") or "torch").encode() + b"\0")
    for path in CODE:
        with open(path, "rb") as f:
            h.update(f.read())
    return h.hexdigest()


def key(files: dict[str, str], asked: dict) -> str:
    """The entry's key: `files` (role -> path) by their digests, the build, and what was asked (JSON-able)."""
    what = {"format": FORMAT, "files": {role: file_digest(p) for role, p in sorted(files.items())},
            "build": build_key(), "asked": asked}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:32]


def path_of(entry_key: str) -> str:
    return os.path.join(folder(), entry_key + ".pack")


def read(entry_key: str) -> tuple[dict[str, torch.Tensor], dict] | None:
    """(tensors by name, from the entry's file; the meta it was written with), or None where there is no entry or it
    is not one to trust (module docstring: then `COUNTS["rebuilt"]` counts it). The tensors are the file's pages
    mapped where $SPECSTREAM_PACK_CACHE=map, else read into memory of their own (`mapping`)."""
    path = path_of(entry_key)
    try:
        f = open(path, "rb")
    except OSError:
        return None
    with f:
        header = _header(f, entry_key)
        if header is None:
            COUNTS["rebuilt"] += 1
            return None
        try:
            tensors = (_mapped if mapping() else _read)(f, header)
        except (OSError, ValueError):  # the file changed under us: not one to trust
            COUNTS["rebuilt"] += 1
            return None
    try:
        os.utime(path)  # most recently used: `trim` keeps it
    except OSError:  # a read-only cache still serves
        pass
    COUNTS["loaded"] += 1
    return tensors, header["meta"]


def mapping() -> bool:
    """Whether `read` maps the entry's pages ($SPECSTREAM_PACK_CACHE=map) rather than reading them (module docstring)."""
    return os.environ.get("SPECSTREAM_PACK_CACHE", "").strip().lower() == "map"


def _read(f, header: dict) -> dict[str, torch.Tensor]:
    """Each tensor read from the file into memory of its own (one copy from the page cache)."""
    tensors = {}
    for name, (dtype, shape, offset, nbytes) in header["tensors"].items():
        t = torch.empty(shape, dtype=DTYPES[dtype])
        f.seek(header["start"] + offset)
        if nbytes and f.readinto(t.reshape(-1).view(torch.uint8).numpy()) != nbytes:
            raise OSError(f"{f.name}: short read")
        tensors[name] = t
    return tensors


def _mapped(f, header: dict) -> dict[str, torch.Tensor]:
    """Each tensor a view of the file mapped privately, its pages populated at once (MAP_POPULATE)."""
    flags = mmap.MAP_PRIVATE | getattr(mmap, "MAP_POPULATE", 0)
    mapped = mmap.mmap(f.fileno(), header["start"] + header["data_bytes"], flags=flags,
                       prot=mmap.PROT_READ | mmap.PROT_WRITE)
    tensors = {}
    for name, (dtype, shape, offset, nbytes) in header["tensors"].items():
        kind = DTYPES[dtype]
        t = (torch.frombuffer(mapped, dtype=kind, count=nbytes // kind.itemsize, offset=header["start"] + offset)
             if nbytes else torch.empty(0, dtype=kind))
        t = t.reshape(shape)
        t._specstream_mapped = (mapped, header["start"] + offset, nbytes)  # what `release` lets go
        tensors[name] = t
    return tensors


def _header(f, entry_key: str) -> dict | None:
    """The entry's header where the file is whole and is the entry for `entry_key`, else None."""
    try:
        if f.read(len(MAGIC)) != MAGIC:
            return None
        length = int.from_bytes(f.read(8), "little")
        if not 0 < length < 1 << 24:
            return None
        header = json.loads(f.read(length))
        header["start"] = _aligned(len(MAGIC) + 8 + length)
        data = header.get("data_bytes")
        if (header.get("format") != FORMAT or header.get("key") != entry_key or not isinstance(data, int)
                or os.fstat(f.fileno()).st_size != header["start"] + data):
            return None
        for dtype, shape, offset, nbytes in header["tensors"].values():
            count = 1
            for s in shape:
                count *= s
            if dtype not in DTYPES or offset % ALIGN or offset + nbytes > data or count * DTYPES[dtype].itemsize != nbytes:
                return None
        return header
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None


def write(entry_key: str, tensors: dict[str, torch.Tensor], meta: dict) -> str | None:
    """Write the entry (atomically: a temporary file renamed into place), then `trim` the cache. Returns its path, or
    None where it could not be written (a read-only or full disk: loading goes on without it)."""
    table, offset = {}, 0
    for name, t in tensors.items():
        nbytes = t.numel() * t.element_size()
        table[name] = [str(t.dtype).replace("torch.", ""), list(t.shape), offset, nbytes]
        offset += _aligned(nbytes)
    header = {"format": FORMAT, "key": entry_key, "meta": meta, "tensors": table, "data_bytes": offset}
    blob = json.dumps(header).encode()
    start = _aligned(len(MAGIC) + 8 + len(blob))
    try:
        os.makedirs(folder(), exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".tmp", dir=folder())
    except OSError:
        return None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(MAGIC + len(blob).to_bytes(8, "little") + blob)
            for name, t in tensors.items():
                f.seek(start + table[name][2])
                f.write(t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().data if t.numel() else b"")
            f.truncate(start + offset)
        os.replace(tmp, path_of(entry_key))
    except OSError:
        return None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    COUNTS["written"] += 1
    trim()
    return path_of(entry_key)


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def trim(limit_mb: float | None = None) -> list[str]:
    """Delete the least recently used entries beyond the size limit ($SPECSTREAM_PACK_CACHE_MB, default 2048) or
    beyond MAX_ENTRIES (the tests' tiny models make many small ones), and temporary files an interrupted write left (older than an hour). Returns the paths deleted."""
    if limit_mb is None:
        try:
            limit_mb = float(os.environ.get("SPECSTREAM_PACK_CACHE_MB", DEFAULT_LIMIT_MB))
        except ValueError:
            limit_mb = DEFAULT_LIMIT_MB
    gone, now = [], time.time()
    for tmp in glob.glob(os.path.join(folder(), "*.tmp")):
        try:
            if now - os.stat(tmp).st_mtime > 3600:
                os.unlink(tmp)
                gone.append(tmp)
        except OSError:
            pass
    entries = []
    for path in glob.glob(os.path.join(folder(), "*.pack")):
        try:
            st = os.stat(path)
            entries.append((st.st_mtime, st.st_size, path))
        except OSError:
            pass
    total, count = sum(e[1] for e in entries), len(entries)
    for _, size, path in sorted(entries):  # oldest first; the newest entry stays even where it alone is too large
        if (total <= limit_mb * 2**20 and count <= MAX_ENTRIES) or path == max(entries)[2]:
            break
        count -= 1
        try:
            os.unlink(path)
            gone.append(path)
            total -= size
            os.unlink(path[:-len(".pack")] + ".facts.json")
        except OSError:
            pass
    return gone


def flatten(made: dict, report: dict) -> tuple[dict[str, torch.Tensor], dict]:
    """The packed tensors of the layers `int4.quantize_model` made (its `made`: key -> a module with `layout()`), by
    "<key>/<buffer>", and what remakes them (each layer's own meta, the report): what `write` takes."""
    tensors, meta = {}, {"report": report, "layers": {}}
    for key, module in made.items():
        own, meta["layers"][key] = module.layout()
        tensors.update({f"{key}/{name}": t for name, t in own.items()})
    return tensors, meta


def unflatten(tensors: dict[str, torch.Tensor], meta: dict) -> dict:
    """`int4.quantize_model`'s `layouts` from what `flatten` gave (as `read` returns it)."""
    out = {key: ({name.split("/", 1)[1]: t for name, t in tensors.items() if name.split("/", 1)[0] == key}, own)
           for key, own in meta["layers"].items()}
    out["report"] = meta["report"]
    return out


def known(entry_key: str | None, name: str):
    """A check's verdict noted for the entry's weights (`note`), or None where none was (or there is no entry)."""
    if not entry_key:
        return None
    try:
        with open(os.path.join(folder(), entry_key + ".facts.json")) as f:
            return json.load(f).get(name)
    except (OSError, ValueError, AttributeError):
        return None


def note(entry_key: str | None, name: str, value) -> None:
    """Note a check's verdict (JSON) that follows from the entry's weights alone, beside the entry (atomically)."""
    if not entry_key:
        return
    path = os.path.join(folder(), entry_key + ".facts.json")
    try:
        with open(path) as f:
            facts = json.load(f)
    except (OSError, ValueError):
        facts = {}
    facts = {**(facts if isinstance(facts, dict) else {}), name: value}
    try:
        os.makedirs(folder(), exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".tmp", dir=folder())
        with os.fdopen(fd, "w") as f:
            json.dump(facts, f)
        os.replace(tmp, path)
    except OSError:
        pass


def release(t: torch.Tensor) -> bool:
    """Let the pages of a tensor `read` mapped go (MADV_DONTNEED) once its layer no longer reads it (an 8-bit head laid
    out anew): they are the file's, unwritten, so the system drops them and would read them again only if the tensor
    were read again. Returns whether it did."""
    mapped = getattr(t, "_specstream_mapped", None)
    if mapped is None or not hasattr(mmap, "MADV_DONTNEED"):
        return False
    m, offset, nbytes = mapped
    try:
        m.madvise(mmap.MADV_DONTNEED, offset, _aligned(nbytes))
    except (OSError, ValueError):
        return False
    return True


def derived_key(entry_key: str, what: str, data: torch.Tensor) -> str:
    """The key of an entry made from entry `entry_key`'s tensors and `data` (an 8-bit head laid out in an order)."""
    h = hashlib.sha256(f"{entry_key}\0{what}\0{data.dtype}\0{tuple(data.shape)}\0".encode())
    h.update(data.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:32]
