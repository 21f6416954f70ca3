"""sql: write a SQLite query from a schema (sometimes with sample rows) and a question.

The record's ``check["setup"]`` holds the CREATE TABLE and INSERT statements the scorer runs; the
reference is a query whose result set the answer's must match. Tables are partitioned between splits.
"""

from __future__ import annotations

import random

from .base import NAMES, pick, pool, templates

# table -> (plural noun, {column: (type, pool or (lo, hi), English name)})
TABLES = {
    "employees": ("employees", {"name": ("TEXT", NAMES), "department": ("TEXT", ["sales", "marketing", "finance", "support", "research", "legal"]),
                                "salary": ("INTEGER", (2000, 9000)), "age": ("INTEGER", (20, 65)), "city": ("TEXT", ["Paris", "Berlin", "Madrid", "Rome", "Vienna", "Oslo"])}),
    "products": ("products", {"title": ("TEXT", ["lamp", "chair", "table", "kettle", "radio", "camera", "clock", "mirror"]),
                              "category": ("TEXT", ["kitchen", "office", "garden", "toys", "sports", "music"]),
                              "price": ("INTEGER", (5, 900)), "stock": ("INTEGER", (0, 500)), "supplier": ("TEXT", ["Acme", "Globex", "Initech", "Umbrella", "Hooli"])}),
    "students": ("students", {"name": ("TEXT", NAMES), "school": ("TEXT", ["Northside", "Riverside", "Hillcrest", "Lakeview", "Oakwood"]),
                              "grade": ("INTEGER", (1, 12)), "score": ("INTEGER", (0, 100)), "subject": ("TEXT", ["math", "history", "biology", "art", "physics"])}),
    "flights": ("flights", {"airline": ("TEXT", ["Skyway", "Jetstar", "Airlink", "Nordair", "Bluejet"]),
                            "origin": ("TEXT", ["London", "Tokyo", "Cairo", "Lima", "Dublin", "Seoul"]),
                            "destination": ("TEXT", ["Boston", "Sydney", "Delhi", "Quito", "Prague", "Lagos"]),
                            "duration": ("INTEGER", (1, 16)), "fare": ("INTEGER", (50, 1500))}),
    "books": ("books", {"title": ("TEXT", ["Dune", "Emma", "Ulysses", "Beloved", "Matilda", "Rebecca", "Dracula", "Persuasion"]),
                        "author": ("TEXT", ["Austen", "Herbert", "Joyce", "Morrison", "Dahl", "Stoker", "Woolf"]),
                        "year": ("INTEGER", (1800, 2020)), "pages": ("INTEGER", (90, 900)), "genre": ("TEXT", ["novel", "horror", "poetry", "drama", "fantasy"])}),
    "orders": ("orders", {"customer": ("TEXT", NAMES), "status": ("TEXT", ["shipped", "pending", "cancelled", "delivered"]),
                          "quantity": ("INTEGER", (1, 50)), "total": ("INTEGER", (10, 5000)), "country": ("TEXT", ["Spain", "Peru", "Japan", "Kenya", "Chile", "Norway"])}),
    "patients": ("patients", {"name": ("TEXT", NAMES), "ward": ("TEXT", ["cardiology", "oncology", "pediatrics", "neurology", "surgery"]),
                              "age": ("INTEGER", (1, 95)), "days_admitted": ("INTEGER", (1, 40)), "doctor": ("TEXT", ["Dr. Ali", "Dr. Berg", "Dr. Costa", "Dr. Dahl", "Dr. Evans"])}),
    "movies": ("movies", {"title": ("TEXT", ["Arrival", "Heat", "Alien", "Up", "Coco", "Rocky", "Jaws", "Psycho", "Brave"]),
                          "director": ("TEXT", ["Villeneuve", "Mann", "Scott", "Docter", "Unkrich", "Spielberg", "Hitchcock"]),
                          "year": ("INTEGER", (1960, 2023)), "runtime": ("INTEGER", (80, 180)), "rating": ("INTEGER", (1, 10))}),
    "cars": ("cars", {"make": ("TEXT", ["Toyota", "Ford", "Volvo", "Fiat", "Kia", "Skoda", "Honda"]),
                      "color": ("TEXT", ["red", "blue", "black", "white", "silver", "green"]),
                      "year": ("INTEGER", (1995, 2024)), "mileage": ("INTEGER", (1000, 250000)), "price": ("INTEGER", (1500, 60000))}),
    "songs": ("songs", {"title": ("TEXT", ["Echo", "Halo", "Rain", "Fire", "Home", "Glow", "Drift", "Storm"]),
                        "artist": ("TEXT", ["Nova", "Kite", "Marlow", "Ivy Lane", "The Tides", "Orbit"]),
                        "plays": ("INTEGER", (100, 90000)), "length_seconds": ("INTEGER", (120, 420)), "genre": ("TEXT", ["pop", "rock", "jazz", "folk", "techno"])}),
    "rentals": ("apartments", {"district": ("TEXT", ["Old Town", "Harbour", "Uptown", "Westend", "Greenfield"]),
                               "rooms": ("INTEGER", (1, 6)), "rent": ("INTEGER", (400, 3500)), "floor": ("INTEGER", (0, 20)),
                               "landlord": ("TEXT", NAMES)}),
    "matches": ("matches", {"home_team": ("TEXT", ["Lions", "Eagles", "Sharks", "Wolves", "Bears", "Hawks"]),
                            "away_team": ("TEXT", ["Tigers", "Falcons", "Rhinos", "Foxes", "Bulls", "Owls"]),
                            "home_goals": ("INTEGER", (0, 6)), "away_goals": ("INTEGER", (0, 6)), "stadium": ("TEXT", ["Arena One", "Park Field", "North Ground", "City Bowl"])}),
    "courses": ("courses", {"title": ("TEXT", ["Algebra", "Painting", "Chemistry", "Poetry", "Robotics", "Spanish", "Economics"]),
                            "teacher": ("TEXT", NAMES), "credits": ("INTEGER", (1, 6)), "enrolled": ("INTEGER", (5, 300)),
                            "building": ("TEXT", ["Hall A", "Hall B", "Annex", "Tower", "Library"])}),
    "weather": ("weather readings", {"station": ("TEXT", ["Aberdeen", "Bergen", "Cork", "Dover", "Elgin", "Faro"]),
                                     "month": ("TEXT", ["January", "April", "July", "October"]),
                                     "temperature": ("INTEGER", (-15, 38)), "rainfall_mm": ("INTEGER", (0, 300)), "wind_kmh": ("INTEGER", (0, 120))}),
    "recipes": ("recipes", {"dish": ("TEXT", ["soup", "curry", "salad", "risotto", "stew", "pie", "omelette"]),
                            "cuisine": ("TEXT", ["Thai", "Italian", "Mexican", "French", "Indian", "Greek"]),
                            "minutes": ("INTEGER", (5, 180)), "calories": ("INTEGER", (100, 1200)), "servings": ("INTEGER", (1, 8))}),
    "hotels": ("hotels", {"name": ("TEXT", ["Seaview", "Grand", "Alpine", "Royal", "Harbor Inn", "Sunset", "Parkside"]),
                          "city": ("TEXT", ["Nice", "Porto", "Split", "Bergen", "Bruges", "Kyoto"]),
                          "stars": ("INTEGER", (1, 5)), "rooms": ("INTEGER", (10, 400)), "nightly_rate": ("INTEGER", (40, 600))}),
}

TEMPLATES = templates("sql", train={
    "write": "Write an SQL query for the following question.\n\n{schema}\n\nQuestion: {question}",
    "given": "Given this database schema:\n\n{schema}\n\nwrite a SQLite query that answers: {question}",
    "translate": "Translate the question into SQL.\nSchema:\n{schema}\nQuestion: {question}\nSQL:",
    "db": "Database:\n{schema}\n\n{question} Answer with a single SQL query.",
    "task": "Task: text-to-SQL.\n{schema}\nQ: {question}",
}, eval={
    "chat": "I have a SQLite database with this table:\n{schema}\nCan you give me the query for this? {question}",
    "help": "Hi! I need help with a query. My data looks like this:\n\n{schema}\n\nWhat SQL would get me the following: {question}",
})

# kind -> (train phrasings, eval phrasings); slots: {noun} {cols} {where} {col} {n} {key}
PHRASES = {
    "select": (["What are the {cols} of {noun} where {where}?", "Show the {cols} of all {noun} where {where}.", "List {cols} for {noun} where {where}."],
               ["I'd like to see the {cols} for every one of the {noun} where {where}."]),
    "count": (["How many {noun} are there where {where}?", "Count the {noun} where {where}.", "What is the number of {noun} where {where}?"],
              ["Tell me how many {noun} there are where {where}."]),
    "aggregate": (["What is the {agg} {col} of {noun} where {where}?", "Compute the {agg} {col} over {noun} where {where}.", "Find the {agg} {col} among {noun} where {where}."],
                  ["Across the {noun} where {where}, what's the {agg} {col}?"]),
    "top": (["Which {n} {noun} have the highest {key}? Show their {cols}.", "List the {cols} of the top {n} {noun} by {key}.", "Give the {cols} of the {n} {noun} with the largest {key}."],
            ["I need the {cols} of the {n} {noun} that rank highest on {key}."]),
    "group": (["For each {col}, how many {noun} are there?", "Count the {noun} per {col}.", "Show every {col} with its number of {noun}."],
              ["Break the {noun} down by {col} and tell me how many are in each group."]),
    "distinct": (["What different values of {col} appear among {noun}?", "List the distinct {col} values of {noun}.", "Which {col} values occur in the {noun} table?"],
                 ["Give me each {col} that shows up among the {noun}, without repeats."]),
    "between": (["Which {noun} have {key} between {lo} and {hi}? Show their {cols}.", "List the {cols} of {noun} whose {key} is from {lo} to {hi} inclusive.", "Find {cols} of {noun} with {key} in the range {lo} to {hi}."],
                ["Pull up the {cols} for {noun} where {key} falls between {lo} and {hi} (inclusive)."]),
    "order": (["List the {cols} of {noun} where {where}, ordered by {key} {dirword}.", "Show {cols} of {noun} where {where}, sorted by {key} in {dirword} order.", "Sort the {noun} where {where} by {key} ({dirword}) and show their {cols}."],
              ["Could you sort the {noun} where {where} by {key}, {dirword}, and show me their {cols}?"]),
}
AGG = [("AVG", "average"), ("MAX", "maximum"), ("MIN", "minimum"), ("SUM", "total")]


def _value(rng, spec):
    kind, p = spec
    return rng.choice(p) if kind == "TEXT" else rng.randint(*p)


def _lit(v) -> str:
    return "'" + v.replace("'", "''") + "'" if isinstance(v, str) else str(v)


def _condition(rng, col, spec, rows):
    v = rng.choice(rows)[col]
    if spec[0] == "TEXT":
        return f"{col} = {_lit(v)}", f"{col.replace('_', ' ')} is {v}"
    op, word = rng.choice([(">", "greater than"), ("<", "less than"), (">=", "at least"), ("<=", "at most")])
    return f"{col} {op} {v}", f"{col.replace('_', ' ')} is {word} {v}"


def _schema_text(rng, table, columns, rows, style):
    names = list(columns)
    if style == "create":
        text = f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, " + ", ".join(f"{c} {columns[c][0]}" for c in names) + ");"
    else:
        text = f"Table {table}: id (INTEGER), " + ", ".join(f"{c} ({columns[c][0]})" for c in names)
    if rng.random() < 0.4:  # sometimes show a few rows
        shown = rows[:3]
        text += "\nSample rows:\n" + "\n".join("(" + ", ".join(_lit(r[c]) for c in ["id"] + names) + ")" for r in shown)
    return text


def generate(rng: random.Random, split: str) -> dict:
    table = rng.choice(pool(sorted(TABLES), split, "sql-table"))
    noun, columns = TABLES[table]
    names = list(columns)
    rows = []
    for i in range(rng.randint(6, 10)):
        rows.append({"id": i + 1, **{c: _value(rng, columns[c]) for c in names}})
    numeric = [c for c in names if columns[c][0] == "INTEGER"]
    text_cols = [c for c in names if columns[c][0] == "TEXT"]
    kind = rng.choice(sorted(PHRASES))
    if kind in ("group", "distinct") and not text_cols:
        kind = "count"
    conds = [_condition(rng, c, columns[c], rows) for c in rng.sample(names, rng.choice([1, 1, 2]))]
    where_sql = " AND ".join(c for c, _ in conds)
    where_en = " and ".join(e for _, e in conds)
    sel = rng.sample(names, rng.choice([1, 2, 2, 3]))
    cols_en = " and ".join(c.replace("_", " ") for c in sel)
    slots = {"noun": noun, "cols": cols_en, "where": where_en}
    if kind == "select":
        sql = f"SELECT {', '.join(sel)} FROM {table} WHERE {where_sql};"
    elif kind == "count":
        sql = f"SELECT COUNT(*) FROM {table} WHERE {where_sql};"
    elif kind == "aggregate":
        col = rng.choice(numeric)
        fn, word = rng.choice(AGG)
        slots.update(agg=word, col=col.replace("_", " "))
        sql = f"SELECT {fn}({col}) FROM {table} WHERE {where_sql};"
    elif kind == "top":
        key = rng.choice(numeric)
        n = rng.randint(2, 4)
        slots.update(n=n, key=key.replace("_", " "))
        sql = f"SELECT {', '.join(sel)} FROM {table} ORDER BY {key} DESC LIMIT {n};"
    elif kind == "group":
        col = rng.choice(text_cols)
        slots.update(col=col.replace("_", " "))
        sql = f"SELECT {col}, COUNT(*) FROM {table} GROUP BY {col};"
    elif kind == "distinct":
        col = rng.choice(text_cols)
        slots.update(col=col.replace("_", " "))
        sql = f"SELECT DISTINCT {col} FROM {table};"
    elif kind == "between":
        key = rng.choice(numeric)
        a, b = sorted(rng.sample([r[key] for r in rows], 2))
        slots.update(key=key.replace("_", " "), lo=a, hi=b)
        sql = f"SELECT {', '.join(sel)} FROM {table} WHERE {key} BETWEEN {a} AND {b};"
    else:
        key = rng.choice(names)
        direction, word = rng.choice([("DESC", "descending"), ("ASC", "ascending")])
        slots.update(key=key.replace("_", " "), dirword=word)
        sql = f"SELECT {', '.join(sel)} FROM {table} WHERE {where_sql} ORDER BY {key} {direction};"
    train_p, eval_p = PHRASES[kind]
    question = rng.choice(train_p if split == "train" else eval_p).format(**slots)
    question = question[0].upper() + question[1:]
    t = pick(rng, TEMPLATES, split)
    schema = _schema_text(rng, table, columns, rows, rng.choice(["create", "create", "list"]))
    create = f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, " + ", ".join(f"{c} {columns[c][0]}" for c in names) + ");"
    inserts = [f"INSERT INTO {table} VALUES (" + ", ".join(_lit(r[c]) for c in ["id"] + names) + ");" for r in rows]
    return {"prompt": t.text.format(schema=schema, question=question), "reference": sql,
            "template": f"{t.id}+{kind}.{split}", "source": f"generated:sql-table/{table}",
            "check": {"setup": [create] + inserts, "ordered": "ORDER BY" in sql and "LIMIT" not in sql}}
