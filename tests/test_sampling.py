"""Speculative sampling draws from exactly the base model's distribution (chi-square tests)."""

import itertools

import pytest
import torch

from specstream_core import DecodeConfig, Engine, StreamParams
from specstream_core.decoding.verify import SamplingConfig, target_probs
from tiny_models import tiny_model

scipy_stats = pytest.importorskip("scipy.stats")

VOCAB = 8
NEW = 3
DRAWS = 2000
PROMPT = [3, 5, 4]


def exact_distribution(model, cfg: SamplingConfig) -> dict[tuple, float]:
    """P(t1, t2, t3 | prompt) by enumeration with the base model alone."""
    dist = {}
    with torch.no_grad():
        for prefix in itertools.product(range(VOCAB), repeat=NEW - 1):
            ids = torch.tensor([PROMPT + list(prefix)])
            probs = target_probs(model(ids).logits[0, len(PROMPT) - 1:], cfg)  # rows for t1, t2, t3
            p_prefix = 1.0
            for i, tok in enumerate(prefix):
                p_prefix *= float(probs[i, tok])
            for last in range(VOCAB):
                dist[prefix + (last,)] = p_prefix * float(probs[NEW - 1, last])
    return dist


@pytest.fixture(scope="module")
def setup():
    model = tiny_model("llama", seed=1, vocab=VOCAB, layers=2, hidden=64, logit_scale=1.5)
    streams = StreamParams.fresh(model, gamma=2, n_stream_layers=1, seed=2)
    return model, Engine(model, None, streams)


@pytest.mark.parametrize("temperature,top_k,top_p", [(1.0, 0, 1.0), (1.0, 3, 0.9)])
def test_ss_sampling_matches_base_distribution(setup, temperature, top_k, top_p):
    model, engine = setup
    sampling = SamplingConfig(temperature, top_k, top_p)
    exact = exact_distribution(model, sampling)
    counts: dict[tuple, int] = {}
    passes = 0
    for seed in range(DRAWS):
        cfg = DecodeConfig(mode="ss", max_new_tokens=NEW, temperature=temperature, top_k=top_k, top_p=top_p,
                           seed=seed, stop_on_eos=False, tree_topk=(3, 2))
        out = engine.generate(PROMPT, cfg)
        counts[tuple(out.token_ids)] = counts.get(tuple(out.token_ids), 0) + 1
        passes += out.stats["forward_passes"]
    assert passes < DRAWS * NEW * 0.9, "drafts were almost never accepted: the test would prove nothing"
    # chi-square over outcomes, pooling those with small expected counts
    observed, expected, pool_o, pool_e = [], [], 0, 0.0
    for outcome, p in exact.items():
        e = p * DRAWS
        if e >= 5:
            observed.append(counts.get(outcome, 0))
            expected.append(e)
        else:
            pool_o += counts.get(outcome, 0)
            pool_e += e
    if pool_e > 0:
        observed.append(pool_o)
        expected.append(pool_e)
    assert sum(counts.get(k, 0) for k, p in exact.items() if p == 0) == 0, "sampled an impossible sequence"
    stat, p_value = scipy_stats.chisquare(observed, [e * sum(observed) / sum(expected) for e in expected])
    assert p_value > 1e-3, f"chi-square p={p_value:.2e} over {len(observed)} bins"


def test_sampling_is_seeded(setup):
    _, engine = setup
    cfg = DecodeConfig(mode="ss", max_new_tokens=12, temperature=1.0, seed=42, stop_on_eos=False)
    assert engine.generate(PROMPT, cfg).token_ids == engine.generate(PROMPT, cfg).token_ids
