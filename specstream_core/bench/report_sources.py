"""The result files that the benchmark page and the README's table are made from: docs/bench/, and the bundled
stream set's card runs (assets/smollm2/bench/).

A file is recognised by what it holds, not by its name, so a new result file of a known kind shows up on the page
without a change here:

- `speed`      (`speed --json`): rows of tokens/s per method and precision, with `n_per_category`;
- `bench`      (`bench --json`): per-category rows and a `settings` block; its `ablations`, where present, too;
- `draft-tau`  (`draft-tau --json`): τ per draft, replayed;
- `pass-cost`  (`pass-cost --json`): `runs` of passes, each with its roofline;
- `batch`      (`bench-batch --json`): `throughput` rows;
- `footprint`  (`footprint --json`): load time and peak memory per precision (a list, or `rows` in an object);
- `llama-bench` (llama.cpp's `llama-bench -o json`): a list of rows with `avg_ts`;
- `train-curve` (`train-curve --json`): training runs' `curves` (τ estimate against training minutes), its figure
  beside it (the same name, .svg).

Every file says which command made it (`command`) and on which host (`host`), at its top level (a `bench`
file's host may be its `settings.device_name`); a file may name itself with `title`."""

from __future__ import annotations

import glob
import json
import os
from dataclasses import dataclass

FOLDERS = ("docs/bench", "assets/smollm2/bench")
KINDS = ("speed", "bench", "draft-tau", "pass-cost", "batch", "footprint", "llama-bench", "train-curve")


@dataclass(frozen=True)
class Source:
    path: str        # relative to the repository root, with forward slashes
    kind: str        # one of KINDS
    data: object     # the file's JSON
    command: str     # what made it ("" where the file does not say)
    host: str        # where it ran ("" where the file does not say)
    title: str       # what it measured, in a few words
    figure: str = "" # its figure beside it (the same name, .svg), relative to the repository root, or ""

    @property
    def name(self) -> str:
        return os.path.basename(self.path)


def kind_of(data) -> str | None:
    """Which kind of result `data` is, or None for a file the page does not show."""
    if isinstance(data, list):
        rows = [r for r in data if isinstance(r, dict)]
        if rows and all("avg_ts" in r for r in rows):
            return "llama-bench"
        if rows and any("peak_rss_mb" in r or "load_s" in r for r in rows):
            return "footprint"
        return None
    if not isinstance(data, dict):
        return None
    if "runs" in data:
        return "pass-cost"
    if "curves" in data:
        return "train-curve"
    if "throughput" in data:
        return "batch"
    if "mean_tau" in data and "drafts" in data:
        return "draft-tau"
    if "n_per_category" in data and "rows" in data:
        return "speed"
    if "settings" in data and "rows" in data:
        return "bench"
    if any("peak_rss_mb" in r or "load_s" in r for r in data.get("rows", []) if isinstance(r, dict)):
        return "footprint"
    return None


def _meta(data, key: str) -> str:
    if isinstance(data, dict):
        settings = data.get("settings") if isinstance(data.get("settings"), dict) else {}
        value = data.get(key) or settings.get(key)
        if not value and key == "host":
            value = settings.get("device_name")
        return str(value or "")
    return ""


def load(root: str, folders: tuple[str, ...] = FOLDERS) -> list[Source]:
    """Every result file of a known kind in `folders` under `root` (not their subfolders), folder by folder, in
    name order. A file of no known kind is left out; an unreadable one raises ValueError with its name."""
    out = []
    paths = [p for folder in folders for p in sorted(glob.glob(os.path.join(root, folder, "*.json")))]
    for path in paths:
        with open(path) as f:
            try:
                data = json.load(f)
            except ValueError as exc:
                raise ValueError(f"{path}: {exc}") from None
        kind = kind_of(data)
        if kind is None:
            continue
        rel = os.path.relpath(path, root).replace(os.sep, "/")
        title = _meta(data, "title") or os.path.splitext(os.path.basename(path))[0]
        figure = os.path.splitext(rel)[0] + ".svg"
        figure = figure if os.path.isfile(os.path.join(root, figure)) else ""
        out.append(Source(rel, kind, data, _meta(data, "command"), _meta(data, "host"), title, figure))
    return out


def of_kind(sources: list[Source], kind: str) -> list[Source]:
    return [s for s in sources if s.kind == kind]
