"""Text metrics the scorers share: chrF (character n-gram F-score)."""

from __future__ import annotations


def chrf(hypothesis: str, reference: str, n: int = 6, beta: float = 2.0) -> float:
    """chrF (Popović 2015): character n-gram F-beta, spaces removed, averaged over n = 1..6."""
    h, r = "".join(hypothesis.split()), "".join(reference.split())
    if not h or not r:
        return float(h == r)
    precisions, recalls = [], []
    for k in range(1, n + 1):
        hc, rc = _ngrams(h, k), _ngrams(r, k)
        if not hc or not rc:
            continue
        overlap = sum(min(c, rc.get(g, 0)) for g, c in hc.items())
        precisions.append(overlap / sum(hc.values()))
        recalls.append(overlap / sum(rc.values()))
    if not precisions:
        return 0.0
    p, rr = sum(precisions) / len(precisions), sum(recalls) / len(recalls)
    if p == 0 and rr == 0:
        return 0.0
    return (1 + beta**2) * p * rr / (beta**2 * p + rr)


def _ngrams(s: str, k: int) -> dict[str, int]:
    out: dict[str, int] = {}
    for i in range(len(s) - k + 1):
        g = s[i:i + k]
        out[g] = out.get(g, 0) + 1
    return out
