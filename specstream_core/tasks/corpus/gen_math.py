"""math: worked arithmetic word problems (GSM8K style), with a step-by-step reference.

Each problem kind has train-only and eval-only phrasings; names and goods are partitioned between
splits. The reference ends with ``The answer is N.``; ``check["answer"]`` is N.
"""

from __future__ import annotations

import random

from .base import NAMES, pick, pool, templates
from ..common import pronoun

GOODS = ["apples", "pencils", "marbles", "stickers", "cookies", "books", "cards", "shells", "coins", "eggs",
         "oranges", "candles", "stamps", "buttons", "cupcakes", "plums", "postcards", "beads", "muffins", "tomatoes"]

TEMPLATES = templates("math", train={
    "plain": "{q}",
    "solve": "Solve this problem step by step.\n{q}",
    "work": "{q} Show your work.",
    "word": "Math word problem: {q}",
    "reason": "Answer the following question. Explain your reasoning, then give the final answer.\n\n{q}",
}, eval={
    "quick": "Quick question for you: {q}",
    "helpkid": "My kid is stuck on this one, can you walk us through it? {q}",
})


def _p(rng, split, forms_train, forms_eval, **slots):
    return rng.choice(forms_train if split == "train" else forms_eval).format(**slots)


def _kinds():
    # long: a table of problem kinds (one small generator each), kept together so the kinds read as one list
    def add_sub(rng, s, name, friend, item, he):
        a, b = rng.randint(5, 40), rng.randint(2, 30)
        c = rng.randint(1, a + b - 1)
        r = a + b - c
        q = _p(rng, s, ["{n} has {a} {i}. {He} buys {b} more and then gives {c} to {f}. How many {i} does {n} have now?",
                        "{n} had {a} {i}, got {b} more from the shop and gave {c} away to {f}. How many {i} are left?"],
               ["Starting with {a} {i}, {n} picks up another {b}, then hands {c} over to {f}. What's the count now?"],
               n=name, a=a, b=b, c=c, i=item, f=friend, He=he)
        return q, f"{a} + {b} = {a + b}. Then {a + b} - {c} = {r}.", r

    def boxes(rng, s, name, friend, item, he):
        a, b, c = rng.randint(2, 12), rng.randint(2, 12), rng.randint(1, 20)
        r = a * b + c
        q = _p(rng, s, ["{n} buys {a} boxes of {i}. Each box holds {b} {i}. {f} gives {n} {c} more. How many {i} does {n} have?",
                        "There are {a} bags with {b} {i} in each, plus {c} loose {i}. How many {i} are there in total?"],
               ["{a} packs, {b} {i} per pack, and {c} extra {i} on the side: how many {i} altogether?"],
               n=name, a=a, b=b, c=c, i=item, f=friend)
        return q, f"{a} x {b} = {a * b}. Then {a * b} + {c} = {r}.", r

    def change(rng, s, name, friend, item, he):
        a, b = rng.randint(2, 15), rng.randint(2, 9)
        p = a * b
        bill = next(x for x in (20, 50, 100, 200) if x > p)
        r = bill - p
        q = _p(rng, s, ["One pack of {i} costs {a} dollars. {n} buys {b} packs and pays with a {bill} dollar bill. How much change does {n} get?",
                        "{n} pays for {b} packs of {i} at {a} dollars each using a {bill} dollar note. What is the change?"],
               ["If {i} are {a} dollars a pack and {n} grabs {b} packs, handing over {bill} dollars, how much comes back?"],
               n=name, a=a, b=b, bill=bill, i=item)
        return q, f"{b} x {a} = {p} dollars. Change: {bill} - {p} = {r} dollars.", r

    def share(rng, s, name, friend, item, he):
        per, k = rng.randint(2, 15), rng.randint(2, 9)
        total = per * k
        q = _p(rng, s, ["{n} has {t} {i} and shares them equally among {k} friends. How many {i} does each friend get?",
                        "{t} {i} are split evenly between {k} children. How many does each child receive?"],
               ["Divide {t} {i} fairly among {k} people. How many {i} per person?"], n=name, t=total, k=k, i=item)
        return q, f"{total} / {k} = {per}.", per

    def discount(rng, s, name, friend, item, he):
        price = rng.randint(2, 40) * 10
        pct = rng.choice([10, 20, 25, 30, 50])
        off = price * pct // 100
        r = price - off
        q = _p(rng, s, ["A jacket costs {p} dollars. It is on sale for {pct}% off. What is the sale price?",
                        "{n} wants a bike that costs {p} dollars. The shop gives a {pct}% discount. How much does {n} pay?"],
               ["Something priced at {p} dollars gets {pct} percent knocked off. What do you end up paying?"], n=name, p=price, pct=pct)
        return q, f"{pct}% of {price} is {off}. {price} - {off} = {r}.", r

    def speed(rng, s, name, friend, item, he):
        v, t = rng.randint(3, 90), rng.randint(2, 9)
        r = v * t
        q = _p(rng, s, ["A train travels at {v} km per hour for {t} hours. How far does it go?",
                        "{n} cycles at {v} km/h for {t} hours. What distance does {n} cover?"],
               ["Going {v} kilometres every hour, how many kilometres is {t} hours of driving?"], n=name, v=v, t=t)
        return q, f"Distance = speed x time = {v} x {t} = {r} km.", r

    def rectangle(rng, s, name, friend, item, he):
        w, h = rng.randint(2, 30), rng.randint(2, 30)
        if rng.random() < 0.5:
            q = _p(rng, s, ["A garden is {w} m long and {h} m wide. What is its area in square metres?",
                            "What is the area of a rectangle with sides {w} and {h}?"],
                   ["My room measures {w} by {h} metres. How many square metres of carpet do I need?"], w=w, h=h)
            return q, f"Area = {w} x {h} = {w * h}.", w * h
        q = _p(rng, s, ["A field is {w} m long and {h} m wide. How many metres of fence go around it?",
                        "What is the perimeter of a rectangle with sides {w} and {h}?"],
               ["How much border do I need to go all the way round a {w} by {h} metre yard?"], w=w, h=h)
        return q, f"Perimeter = 2 x ({w} + {h}) = {2 * (w + h)}.", 2 * (w + h)

    def average(rng, s, name, friend, item, he):
        k = rng.randint(3, 5)
        xs = [rng.randint(40, 100) for _ in range(k - 1)]
        mean = rng.randint(max(xs) // 2 + 20, 95)
        last = mean * k - sum(xs)
        if last <= 0:
            last = mean
            mean = (sum(xs) + last) // k
            last = mean * k - sum(xs)
        xs.append(last)
        listed = ", ".join(map(str, xs))
        q = _p(rng, s, ["{n} scored {l} on {k} tests. What is the average score?",
                        "Find the mean of these numbers: {l}."], ["Over {k} games the points were {l}. What's the average per game?"],
               n=name, l=listed, k=k)
        return q, f"Sum = {sum(xs)}. {sum(xs)} / {k} = {mean}.", mean

    def savings(rng, s, name, friend, item, he):
        w, per, spend = rng.randint(3, 20), rng.randint(5, 50), rng.randint(1, 40)
        total = w * per
        spend = min(spend, total - 1)
        r = total - spend
        q = _p(rng, s, ["{n} saves {p} dollars every week for {w} weeks, then spends {x} dollars on a gift. How much is left?",
                        "Each week {n} puts {p} dollars into a jar. After {w} weeks {He} takes out {x} dollars. How much remains in the jar?"],
               ["Putting away {p} bucks a week for {w} weeks and then blowing {x} on a treat leaves how much?"],
               n=name, p=per, w=w, x=spend, He=he)
        return q, f"{w} x {per} = {total}. {total} - {spend} = {r}.", r

    def ages(rng, s, name, friend, item, he):
        y, d = rng.randint(4, 40), rng.randint(2, 30)
        r = 2 * y + d
        q = _p(rng, s, ["{f} is {y} years old. {n} is {d} years older than {f}. What is the sum of their ages?",
                        "{n} is {d} years older than {f}, who is {y}. How old are they together?"],
               ["If {f} is {y} and {n} has {d} years on {f}, what do their ages add up to?"], n=name, f=friend, y=y, d=d)
        return q, f"{name} is {y} + {d} = {y + d}. Together: {y} + {y + d} = {r}.", r

    def unit_price(rng, s, name, friend, item, he):
        n, unit, m = rng.randint(2, 9), rng.randint(2, 20), rng.randint(2, 15)
        q = _p(rng, s, ["{a} {i} cost {t} dollars. How much do {m} {i} cost?",
                        "If {n} pays {t} dollars for {a} {i}, what would {m} {i} cost at the same price?"],
               ["{t} dollars gets you {a} {i}. At that rate, what's the price of {m}?"], n=name, a=n, i=item, t=n * unit, m=m)
        return q, f"One costs {n * unit} / {n} = {unit}. {m} x {unit} = {m * unit}.", m * unit

    def fraction(rng, s, name, friend, item, he):
        k, per = rng.choice([2, 3, 4, 5]), rng.randint(2, 12)
        total = k * per
        q = _p(rng, s, ["A box has {t} {i}. One {fr} of them are broken. How many are not broken?",
                        "{n} has {t} {i} and gives away one {fr} of them. How many does {n} keep?"],
               ["Out of {t} {i}, a {fr} go missing. How many are still there?"], n=name, t=total, i=item,
               fr={2: "half", 3: "third", 4: "quarter", 5: "fifth"}[k])
        return q, f"{total} / {k} = {per}. {total} - {per} = {total - per}.", total - per

    def tickets(rng, s, name, friend, item, he):
        a, c, pa, pc = rng.randint(1, 6), rng.randint(1, 6), rng.randint(8, 30), rng.randint(3, 15)
        r = a * pa + c * pc
        q = _p(rng, s, ["Adult tickets cost {pa} dollars and child tickets cost {pc} dollars. {n} buys {a} adult and {c} child tickets. What is the total cost?",
                        "A museum charges {pa} dollars per adult and {pc} per child. How much do {a} adults and {c} children pay?"],
               ["Grown-ups pay {pa}, kids pay {pc}. We're {a} adults and {c} kids, so what's the bill?"], n=name, a=a, c=c, pa=pa, pc=pc)
        return q, f"{a} x {pa} = {a * pa}. {c} x {pc} = {c * pc}. {a * pa} + {c * pc} = {r}.", r

    def minutes(rng, s, name, friend, item, he):
        h, m = rng.randint(1, 4), rng.choice([5, 10, 15, 20, 25, 30, 40, 45, 50])
        r = 60 * h + m
        hours = f"{h} hour" + ("s" if h > 1 else "")
        q = _p(rng, s, ["A film lasts {hours} and {m} minutes. How many minutes is that?",
                        "{n} studied for {hours} and {m} minutes. How many minutes did {n} study?"],
               ["How many minutes are in {h} h {m} min?"], n=name, h=h, m=m, hours=hours)
        return q, f"{h} x 60 = {60 * h}. {60 * h} + {m} = {r} minutes.", r

    return {f.__name__: f for f in (add_sub, boxes, change, share, discount, speed, rectangle, average, savings,
                                    ages, unit_price, fraction, tickets, minutes)}


KINDS = _kinds()


def generate(rng: random.Random, split: str) -> dict:
    kind = rng.choice(sorted(KINDS))
    name, friend = rng.sample(pool(NAMES, split, "name"), 2)
    item = rng.choice(pool(GOODS, split, "goods"))
    q, steps, answer = KINDS[kind](rng, split, name, friend, item, pronoun(name).capitalize())
    t = pick(rng, TEMPLATES, split)
    return {"prompt": t.text.format(q=q), "reference": f"{steps} The answer is {answer}.", "template": f"{t.id}+{kind}.{split}",
            "source": f"generated:word-problem/{kind}", "check": {"answer": answer}}
