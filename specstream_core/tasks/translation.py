"""The translation task: English sentences into Lirish, an invented word-for-word language (a fixed
lexicon and word order), so a small model can learn it exactly."""

from __future__ import annotations

import random

from .common import make_example

# A toy language: a fixed word-by-word lexicon (the same for every split) plus one grammar rule:
# adjectives follow their noun, as in French.
_EN_NOUNS = ["cat", "dog", "bird", "child", "farmer", "king", "horse", "boat", "river", "house", "tree",
             "teacher", "baker", "fox", "garden", "bridge", "letter", "song", "road", "window"]
_EN_ADJS = ["big", "small", "old", "young", "red", "green", "happy", "quiet", "brave", "tired", "bright", "dark"]
_EN_VERBS = ["sees", "finds", "likes", "follows", "paints", "helps", "watches", "carries", "hears", "builds"]
_EN_PREPS = ["near", "behind", "under", "beside", "across"]
_EN_OTHER = ["the", "and", "today", "yesterday", "often", "never"]


def _lexicon() -> dict[str, str]:
    rng = random.Random(20240217)
    syl = ["ba", "ko", "ri", "ne", "lu", "ta", "mi", "so", "da", "ve", "ga", "pu", "ze", "lo", "fi", "ru", "ka", "mo"]
    words = _EN_NOUNS + _EN_ADJS + _EN_VERBS + _EN_PREPS + _EN_OTHER
    out, used = {}, set()
    for w in words:
        while True:
            cand = "".join(rng.choice(syl) for _ in range(rng.randint(2, 3)))
            if cand not in used:
                used.add(cand)
                out[w] = cand
                break
    return out


LEXICON = _lexicon()


def _noun_phrase(rng: random.Random) -> tuple[list[str], list[str]]:
    noun = rng.choice(_EN_NOUNS)
    if rng.random() < 0.6:
        adj = rng.choice(_EN_ADJS)
        return ["the", adj, noun], ["the", noun, adj]
    return ["the", noun], ["the", noun]


def _clause(rng: random.Random) -> tuple[list[str], list[str]]:
    s_en, s_tl = _noun_phrase(rng)
    o_en, o_tl = _noun_phrase(rng)
    verb = rng.choice(_EN_VERBS)
    en, tl = s_en + [verb] + o_en, s_tl + [verb] + o_tl
    if rng.random() < 0.5:
        p_en, p_tl = _noun_phrase(rng)
        prep = rng.choice(_EN_PREPS)
        en, tl = en + [prep] + p_en, tl + [prep] + p_tl
    return en, tl


def gen_translation(rng: random.Random) -> dict:
    en, tl = _clause(rng)
    for _ in range(rng.choice([1, 1, 2])):
        en2, tl2 = _clause(rng)
        en, tl = en + ["and"] + en2, tl + ["and"] + tl2
    if rng.random() < 0.3:
        adv = rng.choice(["today", "yesterday", "often", "never"])
        en, tl = en + [adv], tl + [adv]
    source = " ".join(en).capitalize() + "."
    target = " ".join(LEXICON[w] for w in tl).capitalize() + "."
    return make_example("translation", f"Translate to Lirish: {source}", target)


