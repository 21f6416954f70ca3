"""`bench ab`: two worker processes, one per side (a git revision of this repository and the working tree, each
with its own engine options), alternating per prompt on a tiny model saved to disk, the same tokens checked."""

import json
import os
import subprocess

import pytest

from specstream_core import cli
from specstream_core.bench import ab
from specstream_core.errors import SpecstreamError
from helpers import make_lab_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _in_git() -> bool:
    try:
        return subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True).returncode == 0
    except OSError:
        return False


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    return make_lab_model(str(tmp_path_factory.mktemp("ab-tiny")))


def _bench_ab(lab, tmp_path, *argv) -> dict:
    out = tmp_path / "ab.json"
    md = tmp_path / "ab.md"
    assert cli.main(["bench", "ab", "--base", lab, "--streams", os.path.join(lab, "streams"), "--n", "1",
                     "--max-new-tokens", "12", "--json", str(out), "--markdown", str(md), *argv]) == 0
    assert "same tokens" in md.read_text()
    return json.loads(out.read_text())


@pytest.mark.skipif(not _in_git(), reason="not a git checkout")
def test_against_head_gives_the_same_tokens_and_two_medians(lab, tmp_path):
    """HEAD's package in one worker, the working tree's in the other, each with its own draft (drafts differ,
    output does not: lossless); one worker pair serves both modes (a worker starts in seconds)."""
    data = _bench_ab(lab, tmp_path, "--against", "HEAD", "--precisions", "fp32", "--side-a", "topk=[1]",
                     "--side-b", "topk=[3,2,1]")
    head = ab.resolve_revision(ROOT, "HEAD")
    prompts = data["settings"]["prompts"]
    assert prompts == 8  # one eval prompt per category
    assert [(s["mode"], s["a"], s["b"]) for s in data["summary"]] == [("ar", head, "working tree"),
                                                                      ("ss", head, "working tree")]
    assert data["summary"][1]["a_options"]["topk"] == [1] and data["summary"][1]["b_options"]["topk"] == [3, 2, 1]
    for s in data["summary"]:
        assert (s["same_tokens"], s["prompts"]) == (prompts, prompts)
        assert s["a_tokens_per_s"] > 0 and s["b_tokens_per_s"] > 0
        assert s["ratio_p25"] <= s["ratio_median"] <= s["ratio_p75"]
    # per category, B's tokens checked against A's; warm-up runs are not counted
    assert all(r["identical"] and r["prompts"] == 1 for r in data["rows"])


def test_the_summary_counts_differences_and_skips_the_warm_up():
    side = ab.Side("x", ROOT)
    a = [([9], 9.0), ([1, 2], 1.0), ([3, 4], 1.0), ([5, 6], 2.0)]  # the first run is the warm-up
    b = [([0], 0.1), ([1, 2], 0.5), ([3, 5], 1.0), ([5, 6], 4.0)]
    s = ab.summarize(a, b, mode="ar", precision="fp32", sides=(side, side), loaded=["fp32", "fp32"])
    assert (s["same_tokens"], s["prompts"]) == (2, 3)
    assert (s["a_tokens_per_s"], s["b_tokens_per_s"]) == (2.0, 2.0)
    assert (s["ratio_min"], s["ratio_median"], s["ratio_max"]) == (0.5, 1.0, 2.0)


def test_bad_options_are_refused_before_any_worker_starts(lab, capsys):
    base = ["bench", "ab", "--base", lab]
    for argv, message in ((base, "nothing to compare"),
                          (base + ["--side-a", "colour=red", "--side-b", "precision=fp32"], "engine option 'colour=red'"),
                          (base + ["--against", "no-such-rev"], "not a commit"),
                          (base + ["--against", "HEAD", "--methods", "xx"], "--methods")):
        assert cli.main(argv) == 2
        assert message in capsys.readouterr().err
    assert ab.parse_options(["topk=[2,2,1]", "ngrams=false", "streams=/x"]) == {
        "topk": [2, 2, 1], "ngrams": False, "streams": "/x"}
    with pytest.raises(SpecstreamError, match="KEY=VALUE"):
        ab.parse_options(["precision"])
