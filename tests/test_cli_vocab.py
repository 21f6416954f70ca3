"""One command-line vocabulary: the same method and precision names in every command, each checked with one
clear line that lists the valid ones, old spellings still working with a one-line note; generate's stderr
summary; warm-up reported apart; an unreachable hub id failing in one line at once; help texts naming only
files that exist."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from specstream_core import cli
from specstream_core.bench import speed_methods
from specstream_core.cli import vocab
from specstream_core.cli.bench_settings import ALL_METHODS
from specstream_core.model import hub_access
from specstream_core.model.precisions import PRECISIONS
from tiny_models import save_tiny_model_dir

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_model_dir(tmp_path_factory.mktemp("tiny-llama"))


def parse(*argv: str):
    return cli.build_parser(list(argv)).parse_args(list(argv))


def one_error_line(capsys, *argv: str) -> str:
    """The command's exit status is 2 and it printed one error line (argparse's usage lines aside)."""
    try:
        code = cli.main(list(argv))
    except SystemExit as exc:  # argparse: usage + one error line
        code = exc.code
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2, err
    errors = [line for line in err if "error:" in line]
    assert len(errors) == 1, err
    return errors[0]


# --- 1. the same names everywhere -------------------------------------------------------------------------------

def test_method_names_are_single_words_shared_by_the_commands():
    for name in (*ALL_METHODS, *speed_methods.NAMES):
        assert " " not in name and name in vocab.METHODS, name
    assert {"ar", "ss", "hf-greedy"} <= set(ALL_METHODS) & set(speed_methods.NAMES)
    assert parse("generate", "--prompt", "x", "--mode", "ar").mode in ALL_METHODS  # generate's modes are methods too


@pytest.mark.parametrize("command", ["generate", "generate-batch", "draft-tau"])
def test_one_engine_commands_take_precision_with_every_name(command):
    parser = cli.build_parser([command])
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    flag = next(a for a in sub._actions if "--precision" in a.option_strings)
    assert tuple(flag.choices) == PRECISIONS and flag.default == "auto"


@pytest.mark.parametrize("argv", [["speed", "--precisions", "fp8"], ["pass-cost", "--precisions", "fp32,fp8"],
                                  ["bench", "--precisions", "fp8"], ["speed", "--methods", "ar int4-a9"],
                                  ["bench", "--methods", "ar,vllm"], ["bench-batch", "--methods", "ss"],
                                  ["bench", "--precisions", "int4-a8", "--baseline", "vllm"]],
                         ids=lambda argv: " ".join(argv))
def test_unknown_names_fail_in_one_line_listing_the_valid_ones(capsys, argv):
    line = one_error_line(capsys, *argv)
    flag = argv[-2]
    assert f"{flag}: unknown name" in line and "valid: " in line
    valid = line.split("valid: ", 1)[1].split(", ")
    assert "fp32" in valid or "ar" in valid or "ar-seq" in valid, line


@pytest.mark.parametrize("command", ["generate", "draft-tau"])
def test_an_unknown_precision_lists_the_valid_ones(capsys, command):
    line = one_error_line(capsys, command, *(["--prompt", "x"] if command == "generate" else []), "--precision", "fp8")
    assert all(p in line for p in PRECISIONS)


def speed_rows(*flags: str) -> list[str]:
    from specstream_core.cli.commands import speed

    args = parse("speed", *flags)
    return speed._plan(args)[0]


def test_speed_takes_methods_and_precisions_apart(capsys):
    rows = speed_rows("--methods", "ar,ss", "--precisions", "int4-a8")
    assert {"ar int4-a8", "ss int4-a8"} <= set(rows) and "ss" not in rows and "ss int4" not in rows
    assert "hf-greedy int4-a8 kernel" in rows  # the reference ar int4-a8 must equal runs too
    assert capsys.readouterr().err == ""
    assert set(speed_rows()) == set(speed_methods.METHODS)  # the default: every row, as before
    assert speed_rows("--methods", "hf-greedy-kernel", "--precisions", "fp32,int4") == [
        "hf-greedy", "ar", "hf-greedy int4 kernel"]


def test_speed_keeps_old_spellings_with_a_note(capsys):
    old = speed_rows("--methods", "hf-greedy,ar int4-a8,ss int4-a8")
    err = capsys.readouterr().err.splitlines()
    assert err == ["note: --methods 'ar int4-a8' is now --methods ar --precisions int4-a8 (the old spelling still works)",
                   "note: --methods 'ss int4-a8' is now --methods ss --precisions int4-a8 (the old spelling still works)"]
    # beside an old spelling a bare name means fp32, as it did
    assert old == [m for m in speed_methods.METHODS
                   if m in {"hf-greedy", "ar", "ar int4-a8", "ss int4-a8", "hf-greedy int4-a8 kernel"}]
    assert old == speed_rows("--methods", "hf-greedy,ar,ss", "--precisions", "int4-a8")  # the same run, new names


def bench_plan(*flags: str) -> dict:
    from specstream_core.cli import bench_run

    return bench_run.plan(parse("bench", "--ablations", "none", *flags))


def test_bench_names_ss_as_the_others_and_keeps_ss_lossless(capsys):
    new = bench_plan("--methods", "hf-greedy,ss", "--precisions", "int4-a8", "--baseline", "ss")
    assert capsys.readouterr().err == ""
    old = bench_plan("--methods", "hf-greedy,ss-lossless", "--precisions", "int4-a8", "--baseline", "ss-lossless")
    assert new == old and new["methods"] == ["ar", "hf-greedy", "ss-lossless"]  # the result files' row label
    assert new["baseline"] == "ss-lossless"
    err = capsys.readouterr().err.splitlines()
    assert err == ["note: --methods 'ss-lossless' is now 'ss' (the old spelling still works)",
                   "note: --baseline 'ss-lossless' is now 'ss' (the old spelling still works)"]


def test_bench_quantize_is_the_precisions_list(capsys):
    assert bench_plan("--quantize", "nf4")["precisions"] == ["nf4"]
    assert capsys.readouterr().err.strip() == "note: --quantize is now --precisions nf4 (the old flag still works)"
    assert bench_plan("--quantize", "none")["precisions"] == ["fp32"]


def test_generate_precision_and_its_old_flags(capsys):
    assert parse("generate", "--prompt", "x").precision == "auto"
    assert parse("generate", "--prompt", "x", "--precision", "int4-a8").precision == "int4-a8"
    assert capsys.readouterr().err == ""
    for flags, want in ((["--quantize", "int4"], "int4"), (["--dtype", "bf16"], "bf16"),
                        (["--dtype", "bf16", "--quantize", "none"], "bf16"), (["--quantize", "none"], "auto")):
        assert parse("draft-tau", *flags).precision == want, flags
        err = capsys.readouterr().err
        assert err.startswith("note: --") and "is now --precision" in err
    line = one_error_line(capsys, "generate", "--prompt", "x", "--quantize", "int3")
    assert "int4-a8" in line


@pytest.mark.parametrize("command", ["generate", "generate-batch", "bench", "bench-batch"])
def test_the_tree_topk_is_named_apart_from_sampling(command, capsys):
    extra = {"generate": ["--prompt", "x"], "generate-batch": ["--input", "i", "--output", "o"]}.get(command, [])
    assert parse(command, *extra, "--tree-topk", "3,2,1").topk == "3,2,1"
    assert capsys.readouterr().err == ""
    assert parse(command, *extra, "--topk", "3,2,1").topk == "3,2,1"
    assert capsys.readouterr().err.strip() == "note: --topk is now --tree-topk 3,2,1 (the old flag still works)"
    parser = cli.build_parser([command])
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    helped = sub.format_help()
    assert "--tree-topk" in helped and "--topk" not in helped


def test_generate_batch_reads_tree_topk():
    from specstream_core.cli.args import build_config

    args = parse("generate-batch", "--input", "i", "--output", "o", "--tree-topk", "3,1", "--sample-top-k", "5")
    cfg = build_config(args)
    assert cfg.tree_topk == (3, 1) and cfg.top_k == 5


# --- 2. and 3. generate's summary line; warm-up apart -----------------------------------------------------------

def generate(capsys, model_dir, *flags: str) -> tuple[dict | str, str]:
    capsys.readouterr()
    argv = ["generate", "--base", model_dir, "--raw", "--prompt", "hello world", "--gamma", "3", "--tree-topk", "2,1",
            "--max-new-tokens", "12", "--precision", "fp32", *flags]
    assert cli.main(argv) == 0
    got = capsys.readouterr()
    return (json.loads(got.out) if "--json" in flags else got.out), got.err


SUMMARY = re.compile(r"^\[(ar|ss) (\S+)\] (\d+) tokens, τ (\d+\.\d\d), (\d+\.\d) tokens/s (\(.*?\)), (\d+) forward "
                     r"passes in (\d+\.\d\d)s; output equals (.+)$")


def test_generate_prints_one_summary_line(model_dir, capsys):
    _, err = generate(capsys, model_dir)
    lines = [SUMMARY.match(line) for line in err.splitlines()]
    found = [m for m in lines if m]
    assert len(found) == 1, err
    mode, precision, tokens, tau, rate, warm, passes, wall, equals = found[0].groups()
    assert (mode, precision, equals) == ("ss", "fp32", "transformers greedy generate at fp32")
    n, wall = int(tokens), float(wall)
    assert 1 <= n <= 12 and abs(float(tau) - n / int(passes)) < 0.006
    assert n / (wall + 0.005) - 0.05 <= float(rate) <= n / max(wall - 0.005, 1e-9) + 0.05  # wall printed to 0.01 s
    assert "warm-up, not counted" in warm


def test_warm_up_is_reported_apart_and_changes_no_token(model_dir, capsys):
    warm, _ = generate(capsys, model_dir, "--json")
    cold, _ = generate(capsys, model_dir, "--json", "--no-warmup")
    assert warm["token_ids"] == cold["token_ids"] and warm["token_ids"]
    assert warm["stats"]["first_call_s"] > 0 and 1 <= warm["stats"]["first_call_tokens"] <= 4
    assert "first_call_s" not in cold["stats"]
    s = warm["stats"]
    assert s["tokens_per_s"] == pytest.approx(s["new_tokens"] / s["wall_s"])  # the timed decode alone
    _, err = generate(capsys, model_dir, "--no-warmup")
    assert "(first call: one-time costs included)" in err


def test_warm_up_is_a_short_decode_of_the_same_prompt_and_mode():
    from specstream_core.cli.commands.generate import WARMUP_TOKENS, warm_up
    from specstream_core.decoding.config import DecodeConfig

    seen = []

    def fake_generate(prompt, cfg):
        seen.append((prompt, cfg))
        return SimpleNamespace(stats={"new_tokens": cfg.max_new_tokens})

    cfg = DecodeConfig(mode="ss", max_new_tokens=64, tree_topk=(2, 1), trace=True, attention_layers=(1,))
    got = warm_up(SimpleNamespace(generate=fake_generate), "p", cfg)
    (prompt, short), = seen
    assert prompt == "p" and short.mode == "ss" and short.tree_topk == (2, 1)
    assert short.max_new_tokens == WARMUP_TOKENS and not short.trace and short.attention_layers == ()
    assert got["first_call_tokens"] == WARMUP_TOKENS and got["first_call_s"] >= 0


# --- 4. an unreachable hub id fails at once ---------------------------------------------------------------------

@pytest.fixture
def no_hub(monkeypatch):
    """No network: HF_HUB_OFFLINE off, the hub's endpoint a port nothing listens on."""
    import socket

    from huggingface_hub import constants

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setattr(hub_access, "_reachable", {})


def timed_error(capsys, argv) -> tuple[float, str]:
    capsys.readouterr()
    t0 = time.perf_counter()
    code = cli.main(argv)
    elapsed = time.perf_counter() - t0
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    return elapsed, err[0]


def test_an_offline_hub_id_fails_in_one_line_within_two_seconds(capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    elapsed, line = timed_error(capsys, ["generate", "--base", "not/a-model", "--prompt", "x"])
    assert elapsed < 2.0 and "'not/a-model'" in line and "HF_HUB_OFFLINE" in line


def test_a_hub_id_without_network_fails_in_one_line_within_two_seconds(capsys, no_hub):
    for argv in (["generate", "--base", "not/a-model", "--prompt", "x"],
                 ["pass-cost", "--base", "not/a-model", "--no-progress", "--repeats", "1"]):
        elapsed, line = timed_error(capsys, argv)
        assert elapsed < 2.0 and "'not/a-model'" in line and "cannot be reached" in line, argv


def test_loading_fails_fast_too(no_hub):
    from specstream_core.errors import SpecstreamError
    from specstream_core.model.loading import load_config

    t0 = time.perf_counter()
    with pytest.raises(SpecstreamError, match="cannot be reached"):
        load_config("not/a-model")
    assert time.perf_counter() - t0 < 2.0


def test_an_unanswering_endpoint_is_given_up_within_the_probe_time(monkeypatch):
    monkeypatch.setattr(hub_access, "_reachable", {})
    t0 = time.perf_counter()
    hub_access.reachable("10.255.255.1", 81, timeout=0.5)  # a black hole, or an unreachable network
    assert time.perf_counter() - t0 < 1.0


def test_a_local_path_or_a_reachable_hub_is_let_through(model_dir, monkeypatch):
    import socket

    from huggingface_hub import constants

    hub_access.check(model_dir)
    hub_access.check("./no/such/dir")  # a path, not a hub id: the loader reports it as before
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        monkeypatch.setenv("HF_HUB_OFFLINE", "0")
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{server.getsockname()[1]}")
        monkeypatch.setattr(hub_access, "_reachable", {})
        hub_access.check("some/model")  # reachable: the hub answers for itself


def test_the_cli_fails_before_importing_torch():
    probe = ("import sys, time, json; from specstream_core import cli; t = time.perf_counter(); "
             "code = cli.main(['generate', '--base', 'not/a-model', '--prompt', 'x']); "
             "print(json.dumps([code, time.perf_counter() - t, 'torch' in sys.modules]))")
    env = {**os.environ, "PYTHONPATH": ROOT, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    code, elapsed, torch_imported = json.loads(proc.stdout.strip().splitlines()[-1])
    assert code == 2 and elapsed < 2.0 and not torch_imported, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


# --- 5. every file a help text names exists ---------------------------------------------------------------------

TOP = tuple(sorted(n for n in os.listdir(ROOT) if os.path.isdir(os.path.join(ROOT, n)) and not n.startswith(".")))
PATH = re.compile(r"(?<![\w./<-])((?:[\w.-]+/)+[\w.-]*\w)")
FILE_ENDINGS = (".py", ".md", ".json", ".jsonl", ".txt", ".sh", ".c", ".h", ".npz", ".safetensors", ".toml", ".cfg")


def named_paths(text: str) -> list[str]:
    """The repository paths a text names: a/b/c.ext, or a folder under one of the repository's top folders."""
    out = []
    for m in PATH.finditer(text):
        path = m.group(1).rstrip(".")
        if path.endswith(FILE_ENDINGS) or path.split("/", 1)[0] in TOP:
            out.append(path)
    return out


def help_texts(parser: argparse.ArgumentParser, where: str = "specstream"):
    yield where, parser.description or ""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from help_texts(sub, f"{where} {name}")
        elif action.help and action.help != argparse.SUPPRESS:
            text = action.help % {**vars(action), "prog": parser.prog} if "%(" in action.help else action.help
            yield f"{where} {'/'.join(action.option_strings) or action.dest}", text


def exists(path: str) -> bool:
    return any(os.path.exists(os.path.join(ROOT, prefix, path)) for prefix in ("", "specstream_core"))


def test_every_file_named_in_a_help_text_exists():
    named = [(where, path) for where, text in help_texts(cli.build_parser()) for path in named_paths(text)]
    assert ("specstream generate --base", "specstream_core/model/default_model.py") in named
    assert len({p for _, p in named}) >= 4  # the scan sees the help texts' paths
    missing = [f"{where}: {path}" for where, path in named if not exists(path)]
    assert not missing, missing


def test_the_path_scan_would_see_a_wrong_path():
    paths = named_paths("see `specstream_core/default_model.py` (or kernels/draft_weights.py), 8 tokens/s, "
                        "OUT/checkpoint, a/b, docs/BENCHMARKS.md.")
    assert paths == ["specstream_core/default_model.py", "kernels/draft_weights.py", "docs/BENCHMARKS.md"]
    assert not exists(paths[0]) and exists(paths[1]) and exists(paths[2])
