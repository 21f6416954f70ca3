"""qa: answer a question from a passage (retrieval-augmented QA).

Two sources: generated encyclopedia-style passages about invented towns, companies, people and
animals (several facts, one asked), and Python standard-library documentation (a docstring plus its
signature; the question asks for a parameter's default value or the defining module). The answer is a
span of the passage; ``check["answers"]`` lists it (and accepted variants). Entity kinds' question
phrasings and stdlib modules are partitioned between splits.
"""

from __future__ import annotations

import random
import re

from ..common import invented_name
from .base import NAMES, pick, templates
from .stdlib_text import brief, stdlib_items

TEMPLATES = templates("qa", train={
    "passage": "Answer the question using the passage.\n\nPassage: {passage}\n\nQuestion: {question}",
    "context": "Context:\n{passage}\n\nBased on the context above, {question_lc}",
    "read": "Read the text and answer the question.\n{passage}\nQuestion: {question}\nAnswer:",
    "only": "Use only the information below to answer.\n\n{passage}\n\n{question}",
}, eval={
    "found": "I found this text:\n\"{passage}\"\nSo, {question_lc}",
    "doc": "{question} Here's the reference I'm looking at:\n\n{passage}",
})

FACTS = {
    "town": {
        "founded": (["{x} was founded in {v}.", "The town of {x} dates back to {v}."], "founded", ["When was {x} founded?", "In what year was {x} founded?"], ["What year did {x} come into being?"]),
        "river": (["{x} lies on the river {v}.", "The river {v} flows through {x}."], "river", ["Which river does {x} lie on?", "What river flows through {x}?"], ["Name the river that runs through {x}."]),
        "population": (["{x} has about {v} inhabitants.", "Around {v} people live in {x}."], "population", ["How many people live in {x}?", "What is the population of {x}?"], ["Roughly how many residents does {x} have?"]),
        "export": (["{x} is known for its {v}.", "The economy of {x} is built on {v}."], "known", ["What is {x} known for?", "What is the economy of {x} built on?"], ["What's {x} famous for economically?"]),
        "mayor": (["The mayor of {x} is {v}.", "{x} is governed by mayor {v}."], "mayor", ["Who is the mayor of {x}?", "Who governs {x}?"], ["Who runs {x} as mayor?"]),
    },
    "company": {
        "founder": (["{x} was started by {v}.", "{v} founded {x}."], "founder", ["Who founded {x}?", "Who started {x}?"], ["Whose idea was {x} originally?"]),
        "hq": (["{x} has its headquarters in {v}.", "The head office of {x} is in {v}."], "hq", ["Where is {x} headquartered?", "In which city is the head office of {x}?"], ["Which city is {x} based in?"]),
        "product": (["{x} makes {v}.", "The main product of {x} is {v}."], "product", ["What does {x} make?", "What is the main product of {x}?"], ["What do they actually produce at {x}?"]),
        "staff": (["{x} employs {v} people.", "{v} people work at {x}."], "staff", ["How many people does {x} employ?", "How many employees does {x} have?"], ["What's the headcount at {x}?"]),
        "year": (["{x} was established in {v}.", "{x} opened its doors in {v}."], "year", ["When was {x} established?", "In which year did {x} open?"], ["How long ago did {x} start? Give the year."]),
    },
    "person": {
        "born": (["{x} was born in {v}.", "{x}'s birthplace is {v}."], "born", ["Where was {x} born?", "What is {x}'s birthplace?"], ["Which town does {x} come from originally?"]),
        "job": (["{x} works as a {v}.", "By profession, {x} is a {v}."], "job", ["What does {x} do for a living?", "What is {x}'s profession?"], ["What's {x}'s line of work?"]),
        "prize": (["{x} won the {v}.", "In a later year, {x} received the {v}."], "prize", ["Which prize did {x} win?", "What award did {x} receive?"], ["What honour was given to {x}?"]),
        "teacher": (["{x} studied under {v}.", "{x}'s teacher was {v}."], "teacher", ["Who was {x}'s teacher?", "Under whom did {x} study?"], ["Who taught {x}?"]),
    },
    "animal": {
        "habitat": (["The {x} lives in {v}.", "The {x} is found in {v}."], "habitat", ["Where does the {x} live?", "Where is the {x} found?"], ["What kind of place is home to the {x}?"]),
        "diet": (["The {x} feeds mainly on {v}.", "The diet of the {x} consists of {v}."], "diet", ["What does the {x} eat?", "What is the diet of the {x}?"], ["What's on the {x}'s menu?"]),
        "lifespan": (["The {x} can live for {v}.", "A {x} usually lives {v}."], "lifespan", ["How long does the {x} live?", "What is the lifespan of a {x}?"], ["How many years does a {x} typically survive?"]),
        "weight": (["An adult {x} weighs about {v}.", "Adult {x}s reach roughly {v}."], "weight", ["How much does an adult {x} weigh?", "What does an adult {x} weigh?"], ["How heavy do grown {x}s get?"]),
    },
}

VALUES = {
    "founded": lambda r: str(r.randint(900, 1950)), "river": lambda r: invented_name(r, 2, 2),
    "population": lambda r: f"{r.randint(2, 250) * 1000:,}", "export": lambda r: r.choice(["copper mines", "wool trade", "salt pans", "timber mills", "silk weaving", "vineyards", "glassworks", "tea gardens"]),
    "mayor": lambda r: f"{r.choice(NAMES)} {invented_name(r, 2, 2)}", "founder": lambda r: f"{r.choice(NAMES)} {invented_name(r, 2, 3)}",
    "hq": lambda r: invented_name(r, 2, 3), "product": lambda r: r.choice(["bicycle frames", "solar panels", "board games", "kitchen knives", "hearing aids", "garden tools", "paper lanterns", "ski boots"]),
    "staff": lambda r: str(r.randint(12, 9000)), "year": lambda r: str(r.randint(1890, 2020)),
    "born": lambda r: invented_name(r, 2, 3), "job": lambda r: r.choice(["glassblower", "cartographer", "violin maker", "botanist", "bridge engineer", "typesetter", "beekeeper"]),
    "prize": lambda r: f"{invented_name(r, 2, 2)} {r.choice(['Prize', 'Medal', 'Award'])}", "teacher": lambda r: f"{r.choice(NAMES)} {invented_name(r, 2, 3)}",
    "habitat": lambda r: r.choice(["cold mountain streams", "dry grasslands", "mangrove forests", "rocky coasts", "high cloud forests", "salt marshes"]),
    "diet": lambda r: r.choice(["beetles and seeds", "small fish", "fallen fruit", "leaves and bark", "insect larvae", "snails"]),
    "lifespan": lambda r: f"{r.randint(3, 60)} years", "weight": lambda r: f"{r.randint(2, 90)} kilograms",
}
VALUE_KEY = {"founded": "founded", "river": "river", "population": "population", "known": "export", "mayor": "mayor",
             "founder": "founder", "hq": "hq", "product": "product", "staff": "staff", "year": "year", "born": "born",
             "job": "job", "prize": "prize", "teacher": "teacher", "habitat": "habitat", "diet": "diet",
             "lifespan": "lifespan", "weight": "weight"}


def _articles(text: str) -> str:
    """'a eldun beetle' -> 'an eldun beetle'."""
    return re.sub(r"\b([Aa]) (?=[aeiouAEIOU])", lambda m: m.group(1) + "n ", text)


def _entity_name(rng, kind):
    if kind == "town":
        return invented_name(rng, 2, 3)
    if kind == "company":
        return invented_name(rng, 2, 2) + rng.choice([" Works", " Ltd", " & Sons", " Labs", " Group"])
    if kind == "person":
        return f"{rng.choice(NAMES)} {invented_name(rng, 2, 3)}"
    return invented_name(rng, 2, 2).lower() + rng.choice([" finch", " vole", " lizard", " trout", " beetle", " heron"])


def _generated(rng, split, t):
    kind = rng.choice(sorted(FACTS))
    x = _entity_name(rng, kind)
    facts = FACTS[kind]
    keys = rng.sample(sorted(facts), rng.randint(3, len(facts)))
    values = {k: VALUES[VALUE_KEY[facts[k][1]]](rng) for k in keys}
    sentences = []
    for k in keys:
        forms = facts[k][0]
        sentences.append(rng.choice(forms).format(x=x, v=values[k]))
    asked = rng.choice(keys)
    q_train, q_eval = facts[asked][2], facts[asked][3]
    question = _articles(rng.choice(q_train if split == "train" else q_eval).format(x=x))
    passage = " ".join(_articles(s[0].upper() + s[1:]) for s in sentences)
    ans = values[asked]
    return passage, question, ans, [ans], f"generated:passage/{kind}", f"{kind}-{asked}"


def _stdlib(rng, split, t):
    e = rng.choice(stdlib_items(split))
    defaults = [(p, d) for p, d in e["params"] if d is not None and not p.startswith("*")
                and len(d) <= 30 and re.search(r"[A-Za-z0-9]", d)]
    passage = f"Python documentation for {e['module']}.{e['signature']}:\n{brief(e['doc'])}"
    if defaults and rng.random() < 0.7:
        p, d = rng.choice(defaults)
        question = rng.choice(["What is the default value of the {p} parameter of {n}?", "What does {p} default to in {n}?"] if split == "train"
                              else ["If I call {n} without passing {p}, what value does {p} take?"]).format(p=p, n=e["name"])
        answers = [d] + ([d.strip("'\"")] if d[:1] in "'\"" else [])
        return passage, question, d, answers, f"python-stdlib:{e['module']}/{e['name']}", "stdlib-default"
    question = rng.choice(["Which Python module provides {n}?", "In which module is {n} defined?"] if split == "train"
                          else ["I want to use {n}; what module do I import it from?"]).format(n=e["name"])
    return passage, question, e["module"], [e["module"]], f"python-stdlib:{e['module']}/{e['name']}", "stdlib-module"


def generate(rng: random.Random, split: str) -> dict:
    t = pick(rng, TEMPLATES, split)
    maker = _stdlib if rng.random() < 0.3 else _generated
    passage, question, answer, answers, source, qkind = maker(rng, split, t)
    q_lc = question if question.startswith("I ") else question[0].lower() + question[1:]
    return {"prompt": t.text.format(passage=passage, question=question, question_lc=q_lc), "reference": answer,
            "template": f"{t.id}+{qkind}.{split}", "source": source, "check": {"answers": answers}}
