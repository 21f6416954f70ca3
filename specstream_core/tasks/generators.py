"""One seeded generator per task category: ``GENERATORS[category](rng) -> example``.

The tasks imitate the paper's evaluation suite (SQL from a schema, dialogue summarization, E2E
data-to-text, math word problems, retrieval-augmented QA, code completion, translation) but are built
from templates, so a ~10M-parameter model can learn them and its outputs are long and predictable:
most output tokens are copied from the input or follow a fixed pattern — the regime in which
speculative decoding shines. Everything here is pure Python and deterministic given the RNG.
"""

from __future__ import annotations

import random

from .common import FIRST_NAMES, invented_name, make_example, possessive, pronoun
from .translation import gen_translation

# ----------------------------------------------------------------------------------------------- sql
# table -> (plural noun for questions, {column: (type, value pool or (lo, hi))})
_SQL_TABLES = {
    "employees": ("employees", {
        "name": ("TEXT", FIRST_NAMES), "department": ("TEXT", ["sales", "marketing", "finance", "support", "research", "legal"]),
        "salary": ("INTEGER", (2000, 9000)), "age": ("INTEGER", (20, 65)), "city": ("TEXT", ["Paris", "Berlin", "Madrid", "Rome", "Vienna", "Oslo"]),
    }),
    "products": ("products", {
        "title": ("TEXT", ["lamp", "chair", "table", "kettle", "radio", "camera", "clock", "mirror"]),
        "category": ("TEXT", ["kitchen", "office", "garden", "toys", "sports", "music"]),
        "price": ("INTEGER", (5, 900)), "stock": ("INTEGER", (0, 500)), "supplier": ("TEXT", ["Acme", "Globex", "Initech", "Umbrella", "Hooli"]),
    }),
    "students": ("students", {
        "name": ("TEXT", FIRST_NAMES), "school": ("TEXT", ["Northside", "Riverside", "Hillcrest", "Lakeview", "Oakwood"]),
        "grade": ("INTEGER", (1, 12)), "score": ("INTEGER", (0, 100)), "subject": ("TEXT", ["math", "history", "biology", "art", "physics"]),
    }),
    "flights": ("flights", {
        "airline": ("TEXT", ["Skyway", "Jetstar", "Airlink", "Nordair", "Bluejet"]),
        "origin": ("TEXT", ["London", "Tokyo", "Cairo", "Lima", "Dublin", "Seoul"]),
        "destination": ("TEXT", ["Boston", "Sydney", "Delhi", "Quito", "Prague", "Lagos"]),
        "duration": ("INTEGER", (1, 16)), "fare": ("INTEGER", (50, 1500)),
    }),
    "books": ("books", {
        "title": ("TEXT", ["Dune", "Emma", "Ulysses", "Beloved", "Matilda", "Rebecca", "Dracula"]),
        "author": ("TEXT", ["Austen", "Herbert", "Joyce", "Morrison", "Dahl", "Stoker", "Woolf"]),
        "year": ("INTEGER", (1800, 2020)), "pages": ("INTEGER", (90, 900)), "genre": ("TEXT", ["novel", "horror", "poetry", "drama", "fantasy"]),
    }),
    "orders": ("orders", {
        "customer": ("TEXT", FIRST_NAMES), "status": ("TEXT", ["shipped", "pending", "cancelled", "delivered"]),
        "quantity": ("INTEGER", (1, 50)), "total": ("INTEGER", (10, 5000)), "country": ("TEXT", ["Spain", "Peru", "Japan", "Kenya", "Chile", "Norway"]),
    }),
}


def _sql_value(rng: random.Random, spec) -> str:
    kind, pool = spec
    if kind == "TEXT":
        return rng.choice(pool)
    return str(rng.randint(*pool))


def _sql_condition(rng: random.Random, col: str, spec) -> tuple[str, str]:
    """(SQL condition, English phrase)."""
    value = _sql_value(rng, spec)
    if spec[0] == "TEXT":
        return f"{col} = '{value}'", f"{col} is {value}"
    op, words = rng.choice([(">", "greater than"), ("<", "less than"), ("=", "equal to")])
    return f"{col} {op} {value}", f"{col} is {words} {value}"


def gen_sql(rng: random.Random) -> dict:
    table = rng.choice(sorted(_SQL_TABLES))
    noun, columns = _SQL_TABLES[table]
    names = list(columns)
    schema = f"CREATE TABLE {table} (id INTEGER, " + ", ".join(f"{c} {columns[c][0]}" for c in names) + ")"
    kind = rng.choice(["select", "select", "count", "aggregate", "order"])
    n_cond = rng.choice([1, 2, 2])
    cond_cols = rng.sample(names, n_cond)
    conds = [_sql_condition(rng, c, columns[c]) for c in cond_cols]
    where_sql = " AND ".join(c for c, _ in conds)
    where_en = " and ".join(e for _, e in conds)
    rest = [c for c in names if c not in cond_cols]
    numeric = [c for c in rest if columns[c][0] == "INTEGER"]
    if kind == "aggregate" and not numeric:
        kind = "select"
    if kind == "select":
        sel = rng.sample(rest, min(len(rest), rng.choice([1, 2, 3])))
        question = f"What are the {' and '.join(sel)} of {noun} whose {where_en}?"
        sql = f"SELECT {', '.join(sel)} FROM {table} WHERE {where_sql};"
    elif kind == "count":
        question = f"How many {noun} have {where_en.replace(' is ', ' ')}?"
        sql = f"SELECT COUNT(*) FROM {table} WHERE {where_sql};"
    elif kind == "aggregate":
        col = rng.choice(numeric)
        fn, word = rng.choice([("AVG", "average"), ("MAX", "maximum"), ("MIN", "minimum"), ("SUM", "total")])
        question = f"What is the {word} {col} of {noun} whose {where_en}?"
        sql = f"SELECT {fn}({col}) FROM {table} WHERE {where_sql};"
    else:
        sel = rng.sample(rest, min(len(rest), rng.choice([1, 2])))
        key = rng.choice(names)
        direction, word = rng.choice([("DESC", "descending"), ("ASC", "ascending")])
        question = f"List the {' and '.join(sel)} of {noun} whose {where_en}, ordered by {key} {word}."
        sql = f"SELECT {', '.join(sel)} FROM {table} WHERE {where_sql} ORDER BY {key} {direction};"
    return make_example("sql", f"{schema}\nQuestion: {question}", sql)


# ------------------------------------------------------------------------------------- summarization
_DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
_TIMES = ["6 pm", "7 pm", "8 pm", "9 am", "10 am", "11 am", "noon", "3 pm"]
_RESTAURANTS = ["Golden Fork", "Blue Lagoon", "Olive Tree", "Red Lantern", "Little Italy", "Green Garden"]
_ITEMS = ["jacket", "umbrella", "backpack", "phone", "wallet", "scarf", "laptop", "watch"]
_COLORS = ["red", "blue", "black", "green", "white", "yellow", "brown", "grey"]
_PLACES = ["library", "station", "park", "office", "cinema", "gym", "museum", "cafe"]
_CITIES = ["Rome", "Lisbon", "Tokyo", "Cairo", "Oslo", "Vienna", "Dublin", "Prague", "Quebec", "Seoul"]
_MONTHS = ["January", "March", "April", "May", "June", "July", "August", "October", "December"]
_SYMPTOMS = ["headache", "sore throat", "fever", "cough", "back pain", "stomach ache"]


def _two(rng: random.Random) -> tuple[str, str]:
    a, b = rng.sample(FIRST_NAMES, 2)
    return a, b


def gen_summarization(rng: random.Random) -> dict:
    a, b = _two(rng)
    kind = rng.choice(["booking", "doctor", "lost", "trip", "shopping", "meeting"])
    if kind == "booking":
        n, day, time, rest = rng.randint(2, 9), rng.choice(_DAYS), rng.choice(_TIMES), rng.choice(_RESTAURANTS)
        turns = [(b, f"Good evening, {rest}. How can I help you?"),
                 (a, f"Hi, my name is {a}. I would like to book a table for {n} people."),
                 (b, "Of course. For which day and time?"),
                 (a, f"On {day} at {time}, please."),
                 (b, f"Done. A table for {n} on {day} at {time}. See you then, {a}.")]
        summary = f"{a} calls {rest} and books a table for {n} people on {day} at {time}. {b} confirms the booking."
    elif kind == "doctor":
        day, time, symptom = rng.choice(_DAYS), rng.choice(_TIMES), rng.choice(_SYMPTOMS)
        turns = [(a, f"Hello, this is {a}. I have had a bad {symptom} for three days."),
                 (b, f"I am sorry to hear that. Dr. {b} can see you on {day}."),
                 (a, f"Is {time} possible?"),
                 (b, f"Yes, {day} at {time} is free. I have booked it for you.")]
        summary = f"{a} has had a {symptom} for three days. {a} gets an appointment with Dr. {b} on {day} at {time}."
    elif kind == "lost":
        item, color, place = rng.choice(_ITEMS), rng.choice(_COLORS), rng.choice(_PLACES)
        turns = [(a, f"{b}, have you seen my {color} {item}? I cannot find it anywhere."),
                 (b, "When did you last have it?"),
                 (a, f"I think I left it at the {place} this morning."),
                 (b, f"Let us go back to the {place} together and look for it.")]
        summary = (f"{a} cannot find {possessive(a)} {color} {item} and thinks {pronoun(a)} left it at the {place}. "
                   f"{b} offers to go back to the {place} with {a} to look for it.")
    elif kind == "trip":
        city, month, days = rng.choice(_CITIES), rng.choice(_MONTHS), rng.randint(3, 14)
        turns = [(b, f"{a}, do you have any plans for {month}?"),
                 (a, f"Yes, I am going to {city} for {days} days."),
                 (b, f"{city}? That sounds wonderful. What will you do there?"),
                 (a, "Mostly walk around, visit museums and try the local food.")]
        summary = (f"{a} tells {b} that {pronoun(a)} is going to {city} for {days} days in {month}. "
                   f"{a} plans to walk around, visit museums and try the local food.")
    elif kind == "shopping":
        item, color, price = rng.choice(_ITEMS), rng.choice(_COLORS), rng.randint(10, 99)
        turns = [(a, f"Excuse me, how much is this {color} {item}?"),
                 (b, f"It is {price} dollars."),
                 (a, "Do you have it in another color?"),
                 (b, f"Sorry, only {color}. It is our last one."),
                 (a, "All right, I will take it.")]
        summary = f"{a} asks {b} about a {color} {item} that costs {price} dollars. It is the last one, and {a} buys it."
    else:
        day, time, place = rng.choice(_DAYS), rng.choice(_TIMES), rng.choice(_PLACES)
        turns = [(a, f"{b}, can we meet to talk about the project?"),
                 (b, f"Sure. Is {day} good for you?"),
                 (a, f"{day} works. Shall we meet at the {place} at {time}?"),
                 (b, f"Perfect, see you at the {place} on {day} at {time}.")]
        summary = f"{a} wants to talk about the project. {a} and {b} agree to meet at the {place} on {day} at {time}."
    dialogue = "\n".join(f"{who}: {line}" for who, line in turns)
    return make_example("summarization", dialogue, summary)


# ---------------------------------------------------------------------------------------- data2text
_E2E_FOOD = ["French", "Italian", "Chinese", "Indian", "Japanese", "English", "Fast food", "Mexican"]
_E2E_TYPE = ["restaurant", "coffee shop", "pub"]
_E2E_PRICE = {"cheap": "cheap", "moderate": "moderately priced", "high": "expensive",
              "less than £20": "low-priced", "more than £30": "high-priced"}
_E2E_RATING = ["1 out of 5", "3 out of 5", "5 out of 5", "low", "average", "high"]
_E2E_AREA = ["riverside", "city centre"]
_E2E_NAMES = ["The Eagle", "The Mill", "Blue Spice", "Aromi", "Fitzbillies", "The Punter", "Zizzi",
              "The Cricketers", "Loch Fyne", "Giraffe", "Cotto", "Wildwood", "The Vaults", "Alimentum",
              "Browns Cambridge", "The Phoenix", "Clowns", "Strada", "Midsummer House", "The Rice Boat"]
_E2E_NEAR = ["Burger King", "Café Rouge", "The Bakers", "Raja Indian Cuisine", "Crowne Plaza Hotel",
             "All Bar One", "Yippee Noodle Bar", "The Portland Arms", "Ranch", "Café Sicilia"]


def gen_data2text(rng: random.Random) -> dict:
    slots = {"name": rng.choice(_E2E_NAMES)}
    optional = ["eatType", "food", "priceRange", "customer rating", "area", "familyFriendly", "near"]
    for key in rng.sample(optional, rng.randint(3, len(optional))):
        slots[key] = {
            "eatType": lambda: rng.choice(_E2E_TYPE), "food": lambda: rng.choice(_E2E_FOOD),
            "priceRange": lambda: rng.choice(sorted(_E2E_PRICE)), "customer rating": lambda: rng.choice(_E2E_RATING),
            "area": lambda: rng.choice(_E2E_AREA), "familyFriendly": lambda: rng.choice(["yes", "no"]),
            "near": lambda: rng.choice([n for n in _E2E_NEAR]),
        }[key]()
    order = ["name", "eatType", "food", "priceRange", "customer rating", "area", "familyFriendly", "near"]
    mr = ", ".join(f"{k}[{slots[k]}]" for k in order if k in slots)
    rng.random()  # keep the stream position independent of the text below
    # Deterministic realisation: first sentence describes the place, second adds rating/family info.
    desc = []
    if "priceRange" in slots:
        desc.append(_E2E_PRICE[slots["priceRange"]])
    if "food" in slots:
        desc.append(slots["food"])
    desc.append(slots.get("eatType", "place"))
    first = f"{slots['name']} is a {' '.join(desc)}"
    if "area" in slots:
        first += f" in the {slots['area']} area"
    if "near" in slots:
        first += f" near {slots['near']}"
    sentences = [first + "."]
    extra = []
    if "customer rating" in slots:
        extra.append(f"has a customer rating of {slots['customer rating']}")
    if "familyFriendly" in slots:
        extra.append("is family friendly" if slots["familyFriendly"] == "yes" else "is not family friendly")
    if extra:
        sentences.append("It " + " and ".join(extra) + ".")
    text = " ".join(sentences)
    for word in ("expensive", "Italian", "Indian", "English"):  # a -> an before a vowel sound
        text = text.replace(f" a {word}", f" an {word}")
    return make_example("data2text", mr, text)


# --------------------------------------------------------------------------------------------- math
_GOODS = ["apples", "pencils", "marbles", "stickers", "cookies", "books", "cards", "shells", "coins", "eggs"]


def gen_math(rng: random.Random) -> dict:
    name, friend = _two(rng)
    item = rng.choice(_GOODS)
    kind = rng.choice(["add_sub", "mul", "change", "share"])
    he = pronoun(name).capitalize()
    if kind == "add_sub":
        a, b = rng.randint(2, 20), rng.randint(2, 15)
        s = a + b
        c = rng.randint(1, s - 1)
        r = s - c
        q = (f"{name} has {a} {item}. {he} buys {b} more and then gives {c} to {friend}. "
             f"How many {item} does {name} have now?")
        steps = (f"{name} starts with {a} {item}. After buying {b} more, {name} has {a} + {b} = {s} {item}. "
                 f"After giving {c} to {friend}, {name} has {s} - {c} = {r} {item}.")
    elif kind == "mul":
        a, b, c = rng.randint(2, 9), rng.randint(2, 9), rng.randint(1, 9)
        p = a * b
        r = p + c
        q = (f"{name} buys {a} boxes of {item}. Each box has {b} {item}. {friend} gives {name} {c} more {item}. "
             f"How many {item} does {name} have?")
        steps = (f"The boxes hold {a} x {b} = {p} {item}. With the {c} {item} from {friend}, "
                 f"{name} has {p} + {c} = {r} {item}.")
    elif kind == "change":
        a, b = rng.randint(2, 9), rng.randint(2, 9)
        p = a * b
        bill = next(x for x in (20, 50, 100) if x > p)
        r = bill - p
        q = (f"One box of {item} costs {a} dollars. {name} buys {b} boxes and pays with a {bill} dollar bill. "
             f"How much change does {name} get?")
        steps = (f"The boxes cost {b} x {a} = {p} dollars. The change is {bill} - {p} = {r} dollars.")
    else:
        per, k = rng.randint(2, 9), rng.randint(2, 6)
        total = per * k
        r = per
        q = (f"{name} has {total} {item} and shares them equally among {k} friends. "
             f"How many {item} does each friend get?")
        steps = f"{name} has {total} {item} for {k} friends. Each friend gets {total} / {k} = {r} {item}."
    return make_example("math", q, f"{steps} The answer is {r}.")


# ---------------------------------------------------------------------------------------------- rag
_RAG_FACTS = {
    "founder": ("was founded in {year} by {person}", "Who founded {x}?", "{x} was founded in {year} by {person}."),
    "river": ("lies on the river {river}", "Which river does {x} lie on?", "{x} lies on the river {river}."),
    "population": ("has a population of {pop} people", "How many people live in {x}?", "{x} has a population of {pop} people."),
    "export": ("is known for its {export} trade", "What is {x} known for?", "{x} is known for its {export} trade."),
    "building": ("is home to the {building}", "What famous building is in {x}?", "{x} is home to the {building}."),
    "mayor": ("is governed by mayor {mayor}", "Who is the mayor of {x}?", "The mayor of {x} is {mayor}."),
    "festival": ("celebrates the {festival} festival every {month}", "When is the {festival} festival held in {x}?",
                 "{x} celebrates the {festival} festival every {month}."),
}
_EXPORTS = ["copper", "wool", "salt", "timber", "silk", "wine", "glass", "amber", "tea", "tin"]
_BUILDINGS = ["Old Tower", "Stone Bridge", "Grand Library", "Silver Gate", "Glass Palace", "Clock Hall"]
_FESTIVALS = ["lantern", "harvest", "river", "winter", "music", "flower"]


def gen_rag(rng: random.Random) -> dict:
    x = invented_name(rng)
    values = {
        "x": x, "year": rng.randint(1100, 1950), "person": f"{rng.choice(['King', 'Queen', 'Duke', 'Lady'])} {rng.choice(FIRST_NAMES)}",
        "river": invented_name(rng, 1, 2), "pop": rng.randint(1, 99) * 1000, "export": rng.choice(_EXPORTS),
        "building": rng.choice(_BUILDINGS), "mayor": f"{rng.choice(FIRST_NAMES)} {invented_name(rng, 2, 2)}",
        "festival": rng.choice(_FESTIVALS), "month": rng.choice(_MONTHS),
    }
    keys = rng.sample(sorted(_RAG_FACTS), rng.randint(4, 6))
    sentences = []
    for i, k in enumerate(keys):
        subject = x if i == 0 else rng.choice([x, "The town"])
        sentences.append(f"{subject} {_RAG_FACTS[k][0].format(**values)}.")
    asked = rng.choice(keys)
    passage = " ".join(sentences)
    question = _RAG_FACTS[asked][1].format(**values)
    evidence = sentences[keys.index(asked)]
    answer = (f"The passage says: \"{evidence}\" So, " + _lower_first(_RAG_FACTS[asked][2].format(**values)))
    return make_example("rag", f"Passage: {passage}\nQuestion: {question}", answer)


def _lower_first(s: str) -> str:
    return s[0].lower() + s[1:] if s.startswith("The ") else s


# --------------------------------------------------------------------------------------------- code
_PREDICATES = [
    ("even", "{v} % 2 == 0"), ("odd", "{v} % 2 == 1"), ("positive", "{v} > 0"), ("negative", "{v} < 0"),
    ("greater than {k}", "{v} > {k}"), ("less than {k}", "{v} < {k}"), ("divisible by {k}", "{v} % {k} == 0"),
]
# argument name -> loop variable: every name in the body follows from the prompt, so the completion
# is fully determined by the header (exact match is a fair score).
_ARGS = {"numbers": "n", "values": "value", "items": "item", "data": "x", "nums": "num", "scores": "score",
         "prices": "price", "ages": "age", "weights": "weight", "counts": "c"}


def gen_code(rng: random.Random) -> dict:
    arg = rng.choice(sorted(_ARGS))
    v = _ARGS[arg]
    k = rng.randint(2, 9)
    kind = rng.choice(["sum", "count", "filter", "max", "min", "map", "words"])
    if kind in ("sum", "count", "filter"):
        word, cond = rng.choice(_PREDICATES)
        word, cond = word.format(k=k), cond.format(v=v, k=k)
        slug = word.replace(" ", "_")
        if kind == "sum":
            name, doc = f"sum_{slug}", f"Return the sum of the numbers in {arg} that are {word}."
            acc = "total"
            body = [f"{acc} = 0", f"for {v} in {arg}:", f"    if {cond}:", f"        {acc} += {v}", f"return {acc}"]
        elif kind == "count":
            name, doc = f"count_{slug}", f"Return how many numbers in {arg} are {word}."
            acc = "count"
            body = [f"{acc} = 0", f"for {v} in {arg}:", f"    if {cond}:", f"        {acc} += 1", f"return {acc}"]
        else:
            name, doc = f"keep_{slug}", f"Return a list of the numbers in {arg} that are {word}."
            acc = "result"
            body = [f"{acc} = []", f"for {v} in {arg}:", f"    if {cond}:", f"        {acc}.append({v})", f"return {acc}"]
    elif kind in ("max", "min"):
        op, word = (">", "largest") if kind == "max" else ("<", "smallest")
        name, doc = f"find_{word}", f"Return the {word} number in {arg}, or None if it is empty."
        acc = "best"
        body = [f"if not {arg}:", "    return None", f"{acc} = {arg}[0]", f"for {v} in {arg}[1:]:",
                f"    if {v} {op} {acc}:", f"        {acc} = {v}", f"return {acc}"]
    elif kind == "map":
        word, expr = rng.choice([("multiplied by {k}", "{v} * {k}"), ("plus {k}", "{v} + {k}"),
                                 ("minus {k}", "{v} - {k}"), ("squared", "{v} * {v}")])
        word, expr = word.format(k=k), expr.format(v=v, k=k)
        name, doc = f"map_{word.replace(' ', '_')}", f"Return a new list with every number in {arg} {word}."
        body = ["result = []", f"for {v} in {arg}:", f"    result.append({expr})", "return result"]
    else:
        arg = rng.choice(["text", "sentence", "line", "words"])
        w = "word"
        word, expr = rng.choice([("upper case", f"{w}.upper()"), ("lower case", f"{w}.lower()"),
                                 ("capitalized", f"{w}.capitalize()"), ("reversed", f"{w}[::-1]")])
        name, doc = f"words_{word.replace(' ', '_')}", f"Return {arg} with every word {word}, joined by single spaces."
        body = [f"parts = {arg}.split()", f"return \" \".join({expr} for {w} in parts)"]
    prefix = rng.choice(["", "", "my_", "get_", "compute_"])
    header = f"def {prefix}{name}({arg}):\n    \"\"\"{doc}\"\"\""
    return make_example("code", header, "\n".join("    " + line for line in body))


GENERATORS = {
    "sql": gen_sql,
    "summarization": gen_summarization,
    "data2text": gen_data2text,
    "math": gen_math,
    "rag": gen_rag,
    "code": gen_code,
    "translation": gen_translation,
}
