"""data2text: turn an attribute record (E2E restaurants, hotels, people, products, ...) into text.

``check["values"]`` are the attribute values a good answer mentions (yes/no flags are left out).
Entity names are partitioned between splits; train records are shown as ``key[value]`` lists or
``key: value`` lines, eval records as JSON or a Markdown table.
"""

from __future__ import annotations

import json
import random

from .base import pick, pool, templates

ENTITIES = {
    "restaurant": {
        "names": ["The Eagle", "The Mill", "Blue Spice", "Aromi", "Fitzbillies", "The Punter", "Zizzi", "The Cricketers",
                  "Loch Fyne", "Giraffe", "Cotto", "Wildwood", "The Vaults", "Alimentum", "Browns Cambridge", "The Phoenix",
                  "Clowns", "Strada", "Midsummer House", "The Rice Boat", "The Golden Curry", "Bibimbap House",
                  "The Waterman", "Travellers Rest Beefeater", "The Dumpling Tree", "Green Man", "The Olive Grove"],
        "attrs": {"eatType": ["restaurant", "coffee shop", "pub"],
                  "food": ["French", "Italian", "Chinese", "Indian", "Japanese", "English", "Fast food", "Mexican"],
                  "priceRange": ["cheap", "moderate", "high", "less than £20", "more than £30", "£20-25"],
                  "customer rating": ["1 out of 5", "3 out of 5", "5 out of 5", "low", "average", "high"],
                  "area": ["riverside", "city centre"], "familyFriendly": ["yes", "no"],
                  "near": ["Burger King", "Café Rouge", "The Bakers", "Raja Indian Cuisine", "Crowne Plaza Hotel",
                           "All Bar One", "Yippee Noodle Bar", "The Portland Arms", "Ranch", "Café Sicilia"]}},
    "hotel": {
        "names": ["Hotel Aurora", "The Grand Lisboa", "Seaview Lodge", "Alpine Rest", "Hotel Miramar", "The Linden",
                  "Casa Verde", "Harbour House", "The Kestrel", "Villa Sole", "Nordlys Inn", "The Regent", "Pine Court"],
        "attrs": {"stars": ["2", "3", "4", "5"], "city": ["Porto", "Bergen", "Nice", "Kraków", "Bruges", "Valencia", "Kyoto"],
                  "rooms": ["24", "58", "120", "310", "75"], "breakfast": ["included", "not included"],
                  "pool": ["yes", "no"], "distance to centre": ["300 m", "1 km", "2.5 km", "5 km"],
                  "price per night": ["€60", "€95", "€140", "€220", "€380"]}},
    "person": {
        "names": ["Amara Okafor", "Lars Nyberg", "Sofia Brandt", "Kenji Watanabe", "Elif Yilmaz", "Marco Bellini",
                  "Ingrid Solberg", "Rahul Mehta", "Claire Dubois", "Tomasz Nowak", "Lucia Ferreira", "Omar Haddad"],
        "attrs": {"occupation": ["architect", "violinist", "chemist", "novelist", "footballer", "astronomer", "chef"],
                  "birth year": ["1948", "1961", "1975", "1983", "1990", "1957"],
                  "birthplace": ["Lagos", "Uppsala", "Hamburg", "Osaka", "Izmir", "Turin", "Bergen", "Pune", "Lyon"],
                  "known for": ["a glass museum", "a prize-winning concerto", "a new battery material", "a trilogy of novels",
                                "a record transfer", "a comet discovery", "a three-star restaurant"],
                  "award": ["the Golden Medal", "the National Prize", "the Hale Award", "the Blue Ribbon"]}},
    "phone": {
        "names": ["Zeta X2", "Nimbus 7", "Pulse Mini", "Orion Pro", "Vega 5G", "Lumen S", "Arc One", "Nova Lite"],
        "attrs": {"maker": ["Zetacom", "Nimbus", "Pulse", "Orion", "Vega", "Lumen"], "screen": ["5.8 inch", "6.1 inch", "6.7 inch"],
                  "battery": ["3000 mAh", "4200 mAh", "5000 mAh"], "storage": ["64 GB", "128 GB", "256 GB", "512 GB"],
                  "price": ["$199", "$349", "$599", "$899"], "colour": ["black", "silver", "green", "blue"],
                  "release year": ["2021", "2022", "2023", "2024"]}},
    "film": {
        "names": ["Northern Lights", "The Quiet Harbour", "Paper Kites", "Iron Valley", "A Winter Map", "The Last Orchard",
                  "Salt and Honey", "Glass Rivers", "Moonrise Avenue", "The Long Shift"],
        "attrs": {"director": ["Ana Ruiz", "Paul Grant", "Mei Lin", "Ola Berg", "Idris Cole"], "year": ["1994", "2003", "2011", "2018", "2022"],
                  "genre": ["drama", "comedy", "thriller", "documentary", "animation"], "runtime": ["88 minutes", "104 minutes", "131 minutes"],
                  "language": ["English", "Spanish", "Norwegian", "Korean", "French"], "rating": ["6.1", "7.4", "8.2", "5.8"]}},
    "city": {
        "names": ["Velmora", "Kastrel", "Oduna", "Brisk Harbor", "Tallow Springs", "Maranth", "Eskvale", "Port Lirien"],
        "attrs": {"country": ["Norland", "Estria", "Calvania", "Morrow"], "population": ["12,000", "85,000", "240,000", "1.3 million"],
                  "founded": ["1204", "1560", "1788", "1902"], "river": ["the Selt", "the Orra", "the Vane", "the Mull"],
                  "famous for": ["its glassworks", "a spring festival", "an old stone bridge", "its tram network", "salt mines"],
                  "mayor": [f"{n} Holm" for n in ("Ida", "Per", "Lina", "Emil")]}},
}

TEMPLATES = templates("data2text", train={
    "describe": "Write a sentence describing this {kind} from its attributes:\n{record}",
    "verbalize": "Turn the following data into natural English text.\n\n{record}",
    "e2e": "Meaning representation: {record}\nWrite a fluent description that uses every attribute.",
    "blurb": "Write a short blurb about the {kind} described by this record.\n{record}",
    "text": "Data:\n{record}\nText:",
}, eval={
    "listing": "I'm putting together a listing. Could you write it up from this info?\n{record}",
    "explain": "Here's some structured info about a {kind}:\n{record}\nDescribe it in a couple of sentences for a website.",
})

FORMATS = {"train": ["brackets", "lines", "semicolons"], "eval": ["json", "table"]}


def _render(kind: str, slots: dict, fmt: str) -> str:
    if fmt == "brackets":
        return ", ".join(f"{k}[{v}]" for k, v in slots.items())
    if fmt == "lines":
        return "\n".join(f"{k}: {v}" for k, v in slots.items())
    if fmt == "semicolons":
        return "; ".join(f"{k} = {v}" for k, v in slots.items())
    if fmt == "json":
        return json.dumps(slots, ensure_ascii=False)
    return "| attribute | value |\n|---|---|\n" + "\n".join(f"| {k} | {v} |" for k, v in slots.items())


def _realize(kind: str, slots: dict) -> str:
    name = slots["name"]
    parts = [f"{k} {v}" for k, v in slots.items() if k != "name" and v not in ("yes", "no")]
    flags = [("has a " if v == "yes" else "has no ") + k if k != "familyFriendly" else
             ("is family friendly" if v == "yes" else "is not family friendly")
             for k, v in slots.items() if v in ("yes", "no")]
    text = f"{name} is a {kind} with " + ", ".join(parts[:-1]) + (" and " if len(parts) > 1 else "") + parts[-1] + "."
    if flags:
        text += " It " + " and ".join(flags) + "."
    return text


def generate(rng: random.Random, split: str) -> dict:
    kind = rng.choice(sorted(ENTITIES))
    spec = ENTITIES[kind]
    slots = {"name": rng.choice(pool(spec["names"], split, f"d2t-{kind}"))}
    keys = list(spec["attrs"])
    chosen = sorted(rng.sample(range(len(keys)), rng.randint(3, len(keys))))
    for i in chosen:
        slots[keys[i]] = rng.choice(spec["attrs"][keys[i]])
    fmt = rng.choice(FORMATS[split])
    t = pick(rng, TEMPLATES, split)
    record = _render(kind, slots, fmt)
    values = [v for v in slots.values() if v not in ("yes", "no")]
    return {"prompt": t.text.format(kind=kind, record=record), "reference": _realize(kind, slots),
            "template": f"{t.id}+{fmt}", "source": f"generated:record/{kind}", "check": {"values": values}}
