"""code: write, fix or explain short Python functions.

``write`` and ``fix`` prompts have a reference solution and ``check["tests"]``: assert lines computed
from the reference (the scorer runs the answer's function against them in a subprocess). ``explain``
prompts (a generated function, or a short function from Python's standard library) have no checkable
answer: reference ``None`` and ``check["keywords"]``. Function families are partitioned between
splits, and so are the stdlib modules used.
"""

from __future__ import annotations

import random

from .base import pick, pool, templates
from .stdlib_text import stdlib_items

# family -> (function names, parameter names, description with {a}, body with {a}, buggy body, input maker)
FAMILIES = {
    "sum_even": (["sum_even", "total_of_evens", "even_sum"], ["numbers", "values", "nums"], "return the sum of the even numbers in the list {a}",
                 "    return sum(x for x in {a} if x % 2 == 0)", "    return sum(x for x in {a} if x % 2 == 1)", lambda r: ([r.randint(-9, 30) for _ in range(r.randint(0, 7))],)),
    "count_vowels": (["count_vowels", "vowel_count", "num_vowels"], ["text", "s", "word"], "return how many vowels (a, e, i, o, u, either case) the string {a} contains",
                     "    return sum(1 for ch in {a}.lower() if ch in 'aeiou')", "    return sum(1 for ch in {a} if ch in 'aeiou')", lambda r: (r.choice(["Apple", "banana", "OCEAN", "rhythm", "Queue", "Education", "sky"]),)),
    "reverse_words": (["reverse_words", "flip_words", "words_backwards"], ["sentence", "text", "line"], "return the words of the string {a} in reverse order, joined by single spaces",
                      "    return ' '.join(reversed({a}.split()))", "    return ' '.join({a}.split())", lambda r: (" ".join(r.sample(["red", "fox", "jumps", "over", "the", "lazy", "dog", "now"], r.randint(1, 5))),)),
    "is_palindrome": (["is_palindrome", "reads_same_backwards", "palindrome"], ["word", "s", "text"], "return True if the string {a} reads the same forwards and backwards, ignoring case, else False",
                      "    t = {a}.lower()\n    return t == t[::-1]", "    return {a} == {a}[::-1]", lambda r: (r.choice(["Level", "noon", "Racecar", "python", "abca", "Madam", "x"]),)),
    "factorial": (["factorial", "fact", "product_up_to"], ["n", "k", "number"], "return n factorial for a non-negative integer {a} (0! is 1)",
                  "    result = 1\n    for i in range(2, {a} + 1):\n        result *= i\n    return result", "    result = 1\n    for i in range(2, {a}):\n        result *= i\n    return result", lambda r: (r.randint(0, 9),)),
    "fibonacci": (["fibonacci", "fib", "nth_fibonacci"], ["n", "index", "k"], "return the {a}-th Fibonacci number, where fib(0) is 0 and fib(1) is 1",
                  "    a, b = 0, 1\n    for _ in range({a}):\n        a, b = b, a + b\n    return a", "    a, b = 1, 1\n    for _ in range({a}):\n        a, b = b, a + b\n    return a", lambda r: (r.randint(0, 20),)),
    "dedupe": (["dedupe", "unique_in_order", "remove_duplicates"], ["items", "values", "seq"], "return a list of the items of {a} without duplicates, keeping the first occurrence order",
               "    seen = set()\n    out = []\n    for x in {a}:\n        if x not in seen:\n            seen.add(x)\n            out.append(x)\n    return out", "    return list(set({a}))", lambda r: ([r.randint(0, 5) for _ in range(r.randint(0, 8))],)),
    "is_prime": (["is_prime", "prime", "check_prime"], ["n", "number", "value"], "return True if the integer {a} is a prime number, else False",
                 "    if {a} < 2:\n        return False\n    i = 2\n    while i * i <= {a}:\n        if {a} % i == 0:\n            return False\n        i += 1\n    return True",
                 "    for i in range(2, {a}):\n        if {a} % i == 0:\n            return False\n    return True", lambda r: (r.choice([0, 1, 2, 3, 4, 9, 13, 17, 21, 25, 29, 97]),)),
    "gcd": (["gcd", "greatest_common_divisor", "hcf"], ["a, b", "x, y", "m, n"], "return the greatest common divisor of the two positive integers {a}",
            "    {p0}, {p1} = {a}\n    while {p1}:\n        {p0}, {p1} = {p1}, {p0} % {p1}\n    return {p0}", "    return min({a})", lambda r: (r.randint(1, 60), r.randint(1, 60))),
    "flatten": (["flatten", "flatten_once", "concat_lists"], ["lists", "nested", "groups"], "return one list with the elements of every list in {a}, in order",
                "    return [x for sub in {a} for x in sub]", "    return [sub[0] for sub in {a} if sub]", lambda r: ([[r.randint(0, 9) for _ in range(r.randint(0, 3))] for _ in range(r.randint(0, 4))],)),
    "char_freq": (["char_freq", "letter_counts", "count_chars"], ["text", "s", "word"], "return a dict mapping each character of {a} to the number of times it occurs",
                  "    counts = {{}}\n    for ch in {a}:\n        counts[ch] = counts.get(ch, 0) + 1\n    return counts", "    return {{ch: 1 for ch in {a}}}", lambda r: (r.choice(["hello", "banana", "aab", "", "mississippi"]),)),
    "second_largest": (["second_largest", "runner_up", "second_max"], ["numbers", "values", "scores"], "return the second largest distinct value in {a}, or None if there is none",
                       "    distinct = sorted(set({a}))\n    return distinct[-2] if len(distinct) >= 2 else None", "    return sorted({a})[-2]", lambda r: ([r.randint(0, 9) for _ in range(r.randint(2, 6))],)),
    "running_total": (["running_total", "cumulative_sum", "prefix_sums"], ["numbers", "values", "amounts"], "return a list whose i-th element is the sum of the first i+1 numbers of {a}",
                      "    out, total = [], 0\n    for x in {a}:\n        total += x\n        out.append(total)\n    return out", "    return [sum({a})] * len({a})", lambda r: ([r.randint(-5, 9) for _ in range(r.randint(0, 6))],)),
    "clamp": (["clamp", "limit", "bound"], ["x, lo, hi", "value, low, high", "n, minimum, maximum"], "return {p0} limited to the range from {p1} to {p2} inclusive (given {a})",
              "    return max({p1}, min({p0}, {p2}))", "    return min({p1}, max({p0}, {p2}))", lambda r: (r.randint(-10, 20), r.randint(-5, 0), r.randint(1, 10))),
    "chunks": (["chunks", "split_into_chunks", "batch"], ["items, size", "seq, n", "values, k"], "split the list {p0} into consecutive lists of length {p1} (the last may be shorter) and return them (given {a})",
               "    return [{p0}[i:i + {p1}] for i in range(0, len({p0}), {p1})]", "    return [{p0}[i:i + {p1}] for i in range(0, len({p0}) - {p1}, {p1})]", lambda r: ([r.randint(0, 9) for _ in range(r.randint(0, 7))], r.randint(1, 3))),
    "digit_sum": (["digit_sum", "sum_of_digits", "add_digits"], ["n", "number", "value"], "return the sum of the decimal digits of the non-negative integer {a}",
                  "    return sum(int(d) for d in str({a}))", "    return len(str({a}))", lambda r: (r.randint(0, 99999),)),
    "to_binary": (["to_binary", "binary_string", "as_binary"], ["n", "number", "value"], "return the binary representation of the non-negative integer {a} as a string without a prefix",
                  "    return bin({a})[2:]", "    return bin({a})", lambda r: (r.randint(0, 300),)),
    "title_case": (["title_case", "capitalize_words", "titlecase"], ["text", "sentence", "s"], "return {a} with the first letter of every space-separated word in upper case and the rest in lower case",
                   "    return ' '.join(w[:1].upper() + w[1:].lower() for w in {a}.split(' '))", "    return {a}.upper()", lambda r: (r.choice(["hello world", "the QUICK brown fox", "a", "python is fun"]),)),
    "count_above": (["count_above", "how_many_above", "num_greater"], ["values, threshold", "numbers, limit", "scores, cutoff"], "return how many numbers in {p0} are strictly greater than {p1} (given {a})",
                    "    return sum(1 for x in {p0} if x > {p1})", "    return sum(1 for x in {p0} if x >= {p1})", lambda r: ([r.randint(0, 10) for _ in range(r.randint(0, 7))], r.randint(0, 10))),
    "celsius": (["to_fahrenheit", "celsius_to_fahrenheit", "c_to_f"], ["celsius", "c", "degrees"], "convert the temperature {a} in degrees Celsius to Fahrenheit and return it",
                "    return {a} * 9 / 5 + 32", "    return {a} * 5 / 9 + 32", lambda r: (r.choice([-40, 0, 10, 25, 37, 100]),)),
    "merge_dicts": (["merge_dicts", "combine", "merged"], ["a, b", "first, second", "left, right"], "return a new dict with the keys of both dicts {a}; for a shared key the value from {p1} wins",
                    "    out = dict({p0})\n    out.update({p1})\n    return out", "    out = dict({p1})\n    out.update({p0})\n    return out", lambda r: ({"x": r.randint(0, 9), "y": 1}, {"y": r.randint(2, 9), "z": 3})),
    "longest_word": (["longest_word", "max_word", "biggest_word"], ["sentence", "text", "line"], "return the longest word in the string {a} (the first one on ties), or '' if there are no words",
                     "    best = ''\n    for w in {a}.split():\n        if len(w) > len(best):\n            best = w\n    return best", "    return max({a}.split(), key=len)", lambda r: (" ".join(r.sample(["tiny", "enormous", "cat", "giraffe", "ox", "planet"], r.randint(0, 4))),)),
}

TEMPLATES = templates("code", train={
    "write": "Write a Python function `{f}({a})` that does the following: {desc}.",
    "implement": "Implement {f}({a}) in Python. It should {desc}.",
    "examples": "Write a Python function named {f} that takes {a} and should {desc}. For example:\n{examples}",
    "fix": "This Python function is supposed to {desc}, but it has a bug:\n\n```python\n{buggy}\n```\n\nFix it.",
    "explain": "Explain what this Python function does.\n\n```python\n{code}\n```",
    "explain_lines": "Describe, step by step, what the following code does:\n\n```python\n{code}\n```",
}, eval={
    "need": "I need a small Python helper called {f} with parameters ({a}). It should {desc}. Can you write it?",
    "broken": "My function below should {desc}, but the tests fail. What's wrong, and what's the corrected code?\n\n```python\n{buggy}\n```",
    "what": "Could you walk me through this snippet? What does it do and when would I use it?\n\n```python\n{code}\n```",
})
KIND = {"write": "write", "implement": "write", "examples": "write", "need": "write", "fix": "fix", "broken": "fix",
        "explain": "explain", "explain_lines": "explain", "what": "explain"}


def _call(f, args):
    return f"{f}(" + ", ".join(repr(x) for x in args) + ")"


def _make_function(family, f, params, body):
    ps = [p.strip() for p in params.split(",")]
    fill = {"a": params, **{f"p{i}": p for i, p in enumerate(ps)}}
    return f"def {f}({params}):\n" + body.format(**fill)


def generate(rng: random.Random, split: str) -> dict:
    t = pick(rng, TEMPLATES, split)
    kind = KIND[t.id.split(".", 1)[1]]
    if kind == "explain" and rng.random() < 0.5:
        e = rng.choice(stdlib_items(split, with_code=True))
        keywords = [e["name"]] + [p.lstrip("*") for p, _ in e["params"]][:3]
        return {"prompt": t.text.format(code=e["code"]), "reference": None, "template": f"{t.id}+stdlib",
                "source": f"python-stdlib:{e['module']}/{e['name']}", "check": {"keywords": keywords}}
    family = rng.choice(pool(sorted(FAMILIES), split, "code-family"))
    names, params_pool, desc, body, buggy_body, make_input = FAMILIES[family]
    f, params = rng.choice(names), rng.choice(params_pool)
    ps = [p.strip() for p in params.split(",")]
    desc = desc.format(a=params, **{f"p{i}": p for i, p in enumerate(ps)})
    solution = _make_function(family, f, params, body)
    buggy = _make_function(family, f, params, buggy_body)
    env: dict = {}
    exec(solution, env)  # our own reference code, to compute the expected outputs
    fn = env[f]
    cases, seen = [], set()
    for _ in range(12):
        args = make_input(rng)
        key = repr(args)
        if key in seen:
            continue
        seen.add(key)
        cases.append((args, fn(*[x.copy() if hasattr(x, "copy") else x for x in args])))
        if len(cases) == 4:
            break
    tests = [f"assert {_call(f, a)} == {r!r}" for a, r in cases]
    if kind == "explain":
        return {"prompt": t.text.format(code=solution), "reference": None, "template": f"{t.id}+{family}",
                "source": f"generated:function/{family}", "check": {"keywords": [f] + ps}}
    examples = "\n".join(f"{_call(f, a)} -> {r!r}" for a, r in cases[:2])
    prompt = t.text.format(f=f, a=params, desc=desc, examples=examples, buggy=buggy)
    return {"prompt": prompt, "reference": solution, "template": f"{t.id}+{family}", "source": f"generated:function/{family}",
            "check": {"function": f, "tests": tests}}
