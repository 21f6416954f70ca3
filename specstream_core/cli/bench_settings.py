"""`bench`'s methods, suites and default sizes (plain data, shared by its parser and its machinery)."""

from __future__ import annotations

import os

from specstream_core.model import defaults

# the names `--methods` takes (cli/vocab.py); `ss` runs the lossless set, its rows labelled ss-lossless
ALL_METHODS = ("ar", "hf-greedy", "hf-pld", "hf-assisted", "pld", "medusa", "ss", "ss-shared")
OLD_METHODS = {"ss-lossless": "ss"}  # old spelling -> name now
ROW_LABELS = {"ss": "ss-lossless"}  # the result files' method labels, as the tables before them
PRECISIONS = ("fp32", "nf4", "int4", "int4-a8", "bf16")  # what bench loads an engine at
DRAFT_DIR = os.path.join(defaults.SMOL_ASSETS, "draft")
MEDUSA_DIR = defaults.SMOL_MEDUSA_DIR
SUITES = ("chat", "tasks")  # chat: the chat prompt corpus's eval split (default); tasks: the old templated suite
# default run sized to finish in <= 20 minutes on the project's 2-core CPU (see docs/BENCHMARKS.md)
DEFAULT_N, DEFAULT_MAX_NEW = 6, 64
ABLATION_CATEGORIES, ABLATION_N = 3, 4
QUICK = {"categories": 2, "n": 2, "max_new": 32, "precisions": "fp32", "ablations": "gamma"}
