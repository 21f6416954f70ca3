"""An n-gram store: for every 1..N-gram of a token corpus (the base model's own greedy answers to the
training prompts), the token that most often followed it. Where the context offers nothing to copy,
prompt lookup copies from here instead (retrieval drafting in the manner of REST, He et al. 2023): a
small model answers in habits (code fences, "Here's a Python function", SQL clauses) that recur across
prompts. The verifier checks every copied token, so output is unchanged; only τ moves.

Keys are n-grams packed exactly into 64 bits (`bits` per token; N = 64 // bits: 4 for vocabularies up
to 65,536 tokens, 3 up to 2**21), sorted, one array per n, looked up by binary search.
Built by `python -m specstream_core ngrams`, kept beside a stream set as `ngrams.npz`.
"""

from __future__ import annotations

import os
import zipfile

import numpy as np

from specstream_core.errors import SpecstreamError

FILENAME = "ngrams.npz"
FORMAT_VERSION = 1


class NgramStore:
    def __init__(self, bits: int, tables: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]):
        self.bits = bits
        self.tables = tables  # n -> (sorted uint64 keys, next token int32, how often it followed int32)
        self.max_n = max(tables) if tables else 0

    # ---- building --------------------------------------------------------------------------------
    @classmethod
    def build(cls, sequences, vocab_size: int, max_n: int = 4) -> "NgramStore":
        """The most frequent next token of every n-gram (n = 1..max_n) in `sequences` (lists of token ids)."""
        bits = _bits(vocab_size)
        max_n = max(1, min(max_n, 64 // bits))
        seqs = [np.asarray(s, dtype=np.int64) for s in sequences if len(s) > 1]
        if any(len(s) and (s.min() < 0 or s.max() >= vocab_size) for s in seqs):
            raise SpecstreamError(f"the n-gram corpus has token ids outside the vocabulary of {vocab_size}")
        tables = {}
        for n in range(1, max_n + 1):
            keys, nexts = [], []
            for s in seqs:
                if len(s) > n:
                    keys.append(_pack_windows(s.astype(np.uint64), n, bits))
                    nexts.append(s[n:])
            if keys:
                tables[n] = _majority(np.concatenate(keys), np.concatenate(nexts))
        return cls(bits, tables)

    # ---- drafting --------------------------------------------------------------------------------
    def next(self, seq: list[int]) -> tuple[int, int] | None:
        """(the token that most often followed seq's longest stored tail n-gram, n); None: no tail stored."""
        for n in range(min(self.max_n, len(seq)), 0, -1):
            tail = seq[-n:]
            if any(t >> self.bits for t in tail):  # outside the stored vocabulary: a shorter tail may match
                continue
            key = 0
            for t in tail:
                key = (key << self.bits) | t
            keys, nexts, _ = self.tables[n]
            i = int(np.searchsorted(keys, np.uint64(key)))
            if i < len(keys) and int(keys[i]) == key:
                return int(nexts[i]), n
        return None

    def continuation(self, seq: list[int], length: int) -> tuple[list[int], int]:
        """Up to `length` tokens, each the stored successor of what precedes it, and the n-gram length that
        matched for the first (0 and [] when nothing matched)."""
        seq, out, first = list(seq), [], 0
        for _ in range(length):
            hit = self.next(seq)
            if hit is None:
                break
            first = first or hit[1]
            out.append(hit[0])
            seq.append(hit[0])
        return out, first

    def __len__(self) -> int:
        return sum(len(t[0]) for t in self.tables.values())

    # ---- files -----------------------------------------------------------------------------------
    def save(self, directory: str) -> str:
        path = os.path.join(directory, FILENAME)
        arrays = {"format_version": np.array(FORMAT_VERSION), "bits": np.array(self.bits)}
        for n, (keys, nexts, counts) in self.tables.items():
            arrays.update({f"keys{n}": keys, f"next{n}": nexts, f"count{n}": counts})
        tmp = path + ".tmp.npz"
        np.savez_compressed(tmp, **arrays)
        os.replace(tmp, path)
        return path

    @classmethod
    def load(cls, directory: str) -> "NgramStore | None":
        """The store in a stream set's directory; None when it has none; a clear error when it is not one."""
        path = os.path.join(directory, FILENAME)
        if not os.path.isfile(path):
            return None
        bad = f"{path} is not a specstream n-gram store; rebuild it with `python -m specstream_core ngrams`"
        try:
            with np.load(path, allow_pickle=False) as f:
                if int(f["format_version"]) != FORMAT_VERSION:
                    raise SpecstreamError(f"{bad} (format {int(f['format_version'])}, expected {FORMAT_VERSION})")
                bits, tables = int(f["bits"]), {}
                for n in range(1, 64 // max(bits, 1) + 1):
                    if f"keys{n}" in f.files:
                        tables[n] = (f[f"keys{n}"].astype(np.uint64), f[f"next{n}"].astype(np.int32),
                                     f[f"count{n}"].astype(np.int32))
        except (OSError, EOFError, KeyError, TypeError, ValueError, zipfile.BadZipFile) as exc:
            raise SpecstreamError(f"{bad} ({exc})") from None
        if not 1 <= bits <= 64 or not tables or any(
                len(k) != len(x) or len(k) != len(c) or (len(k) > 1 and not bool(np.all(k[1:] > k[:-1])))
                for k, x, c in tables.values()):
            raise SpecstreamError(bad)
        return cls(bits, tables)

    def check_vocab(self, vocab_size: int) -> None:
        if any(len(x) and int(x.max()) >= vocab_size for _, x, _ in self.tables.values()) \
                or self.bits < _bits(vocab_size):
            raise SpecstreamError(f"this n-gram store was built for another vocabulary than the model's "
                                  f"{vocab_size} tokens; rebuild it with `python -m specstream_core ngrams`")


def _bits(vocab_size: int) -> int:
    """Bits a token id of this vocabulary takes in a key."""
    return max(1, int(vocab_size - 1).bit_length())


def _pack_windows(s: np.ndarray, n: int, bits: int) -> np.ndarray:
    """The packed key of every n-gram of s that has a successor: s[i:i+n] for i < len(s) - n."""
    m = len(s) - n
    key = np.zeros(m, dtype=np.uint64)
    for j in range(n):
        key = (key << np.uint64(bits)) | s[j:j + m]
    return key


def _majority(keys: np.ndarray, nexts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per distinct key: the most frequent next token (the smallest id among ties) and its count."""
    order = np.lexsort((nexts, keys))
    keys, nexts = keys[order], nexts[order]
    new_pair = np.ones(len(keys), dtype=bool)
    new_pair[1:] = (keys[1:] != keys[:-1]) | (nexts[1:] != nexts[:-1])
    starts = np.flatnonzero(new_pair)
    counts = np.diff(np.append(starts, len(keys)))
    pair_keys, pair_next = keys[starts], nexts[starts]
    group = np.cumsum(np.append(True, pair_keys[1:] != pair_keys[:-1])) - 1
    best = np.lexsort((pair_next, -counts, group))  # per group: highest count first, then the smallest id
    first = best[np.searchsorted(group[best], np.arange(group[-1] + 1))]
    return pair_keys[first], pair_next[first].astype(np.int32), counts[first].astype(np.int32)
