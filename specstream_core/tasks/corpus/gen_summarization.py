"""summarization: summarize a short generated dialogue (SAMSum / DialogSum style).

``check["keywords"]`` are the facts a summary should keep (names, days, times, places, amounts).
Scenario kinds and speaker names are partitioned between splits.
"""

from __future__ import annotations

import random

from .base import NAMES, pick, pool, templates

DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
TIMES = ["6 pm", "7 pm", "8 pm", "9 am", "10 am", "11 am", "noon", "3 pm", "4:30 pm", "8:15 am"]
PLACES = ["library", "station", "park", "office", "cinema", "gym", "museum", "cafe", "bakery", "market"]
ITEMS = ["jacket", "umbrella", "backpack", "phone", "wallet", "scarf", "laptop", "watch", "hat", "bracelet"]
COLORS = ["red", "blue", "black", "green", "white", "yellow", "brown", "grey"]
CITIES = ["Rome", "Lisbon", "Tokyo", "Cairo", "Oslo", "Vienna", "Dublin", "Prague", "Quebec", "Seoul", "Lima", "Hanoi"]
MONTHS = ["January", "March", "April", "May", "June", "July", "August", "October", "December"]
SYMPTOMS = ["headache", "sore throat", "fever", "cough", "back pain", "stomach ache", "rash"]
RESTAURANTS = ["Golden Fork", "Blue Lagoon", "Olive Tree", "Red Lantern", "Little Italy", "Green Garden", "Saffron"]
DEVICES = ["printer", "router", "laptop", "washing machine", "television", "dishwasher"]
PROBLEMS = ["keeps turning off", "makes a loud noise", "will not start", "shows an error light", "is very slow"]
GIFTS = ["a book", "a plant", "concert tickets", "a scarf", "a board game", "a cooking class"]
SUBJECTS = ["chemistry", "history", "algebra", "French", "biology", "physics"]
DISHES = ["lasagna", "curry", "pancakes", "chili", "fried rice", "apple pie"]


def _booking(rng, a, b):
    n, day, time, rest = rng.randint(2, 9), rng.choice(DAYS), rng.choice(TIMES), rng.choice(RESTAURANTS)
    turns = [(b, f"Good evening, {rest}. How can I help you?"), (a, f"Hi, I'd like to book a table for {n} people."),
             (b, "Of course. For which day and time?"), (a, f"{day} at {time}, if possible."),
             (b, f"That works. A table for {n} on {day} at {time}, under the name {a}.")]
    return turns, f"{a} books a table for {n} at {rest} on {day} at {time}.", [a, rest, str(n), day, time]


def _doctor(rng, a, b):
    day, time, s = rng.choice(DAYS), rng.choice(TIMES), rng.choice(SYMPTOMS)
    days = rng.randint(2, 9)
    turns = [(a, f"Hello, I've had a bad {s} for {days} days."), (b, f"I'm sorry to hear that. Dr. {b} has a free slot on {day}."),
             (a, f"Could I come at {time}?"), (b, f"Yes, {day} at {time} is free. I've booked it for you.")]
    return turns, f"{a} has had a {s} for {days} days and gets an appointment with Dr. {b} on {day} at {time}.", [a, s, day, time]


def _lost(rng, a, b):
    item, color, place = rng.choice(ITEMS), rng.choice(COLORS), rng.choice(PLACES)
    turns = [(a, f"{b}, have you seen my {color} {item}? I can't find it anywhere."), (b, "When did you last have it?"),
             (a, f"I think I left it at the {place} this morning."), (b, f"Let's go back to the {place} together and look.")]
    return turns, f"{a} lost a {color} {item}, probably at the {place}; {b} offers to go back there with {a}.", [a, b, item, place]


def _trip(rng, a, b):
    city, month, days = rng.choice(CITIES), rng.choice(MONTHS), rng.randint(3, 14)
    turns = [(b, f"{a}, any plans for {month}?"), (a, f"Yes, I'm going to {city} for {days} days."),
             (b, f"{city}? Lovely. What will you do there?"), (a, "Mostly walk around, visit museums and try the local food.")]
    return turns, f"{a} is going to {city} for {days} days in {month} to walk around, visit museums and eat local food.", [a, city, month, str(days)]


def _shopping(rng, a, b):
    item, color, price = rng.choice(ITEMS), rng.choice(COLORS), rng.randint(10, 99)
    turns = [(a, f"Excuse me, how much is this {color} {item}?"), (b, f"It's {price} dollars."),
             (a, "Do you have it in another color?"), (b, f"Sorry, only {color}. It's the last one."), (a, "All right, I'll take it.")]
    return turns, f"{a} buys the last {color} {item} for {price} dollars.", [a, item, str(price)]


def _meeting(rng, a, b):
    day, time, place = rng.choice(DAYS), rng.choice(TIMES), rng.choice(PLACES)
    topic = rng.choice(["the budget", "the project", "the new website", "the school trip", "the move"])
    turns = [(a, f"{b}, can we meet to talk about {topic}?"), (b, f"Sure. Is {day} good for you?"),
             (a, f"{day} works. The {place} at {time}?"), (b, f"Perfect, see you at the {place} on {day} at {time}.")]
    return turns, f"{a} and {b} will meet at the {place} on {day} at {time} to discuss {topic}.", [a, b, day, time, place]


def _repair(rng, a, b):
    dev, prob, day, cost = rng.choice(DEVICES), rng.choice(PROBLEMS), rng.choice(DAYS), rng.randint(3, 20) * 10
    turns = [(a, f"Hi, my {dev} {prob}."), (b, "How old is it?"), (a, f"About {rng.randint(2, 9)} years."),
             (b, f"We can send a technician on {day}. The visit costs {cost} dollars."), (a, "Fine, please book it.")]
    return turns, f"{a}'s {dev} {prob}; {b} books a technician visit for {day} costing {cost} dollars.", [a, dev, day, str(cost)]


def _gift(rng, a, b):
    friend, gift, budget = rng.choice(NAMES), rng.choice(GIFTS), rng.randint(2, 10) * 10
    turns = [(a, f"It's {friend}'s birthday next week. Any gift ideas?"), (b, f"What about {gift}?"),
             (a, f"Good idea. Shall we split it? I can spend {budget // 2} dollars."), (b, f"Sure, {budget} in total is fine.")]
    return turns, f"{a} and {b} will buy {gift} for {friend}'s birthday and split the {budget} dollars.", [a, b, friend, gift]


def _homework(rng, a, b):
    subj, day, n = rng.choice(SUBJECTS), rng.choice(DAYS), rng.randint(2, 6)
    turns = [(a, f"{b}, did you understand the {subj} homework?"), (b, f"Mostly. Question {n} was hard."),
             (a, f"Same here. Want to study together on {day}?"), (b, f"Yes, let's meet after class on {day}.")]
    return turns, f"{a} and {b} both found the {subj} homework hard and will study together on {day}.", [a, b, subj, day]


def _recipe(rng, a, b):
    dish, mins = rng.choice(DISHES), rng.randint(2, 9) * 10
    turns = [(a, f"Your {dish} was delicious! How do you make it?"), (b, f"It's easy. It takes about {mins} minutes."),
             (a, "Could you send me the recipe?"), (b, "Sure, I'll text it to you tonight.")]
    return turns, f"{a} liked {b}'s {dish}; {b} will send the recipe, which takes about {mins} minutes, tonight.", [a, b, dish, str(mins)]


def _move(rng, a, b):
    day, city, boxes = rng.choice(DAYS), rng.choice(CITIES), rng.randint(10, 60)
    turns = [(a, f"I'm moving to a new flat in {city} on {day}."), (b, "Do you need help?"),
             (a, f"That would be great. I have {boxes} boxes."), (b, f"I'll bring my van on {day} morning.")]
    return turns, f"{a} moves to {city} on {day}; {b} will help with a van for the {boxes} boxes.", [a, b, city, day]


def _job(rng, a, b):
    role, day, time = rng.choice(["designer", "nurse", "accountant", "chef", "developer", "teacher"]), rng.choice(DAYS), rng.choice(TIMES)
    turns = [(b, f"Hello {a}, thanks for applying for the {role} position."), (a, "Thank you for getting back to me."),
             (b, f"We'd like to invite you to an interview on {day} at {time}."), (a, "That suits me. I'll be there.")]
    return turns, f"{b} invites {a} to an interview for the {role} position on {day} at {time}, and {a} accepts.", [a, role, day, time]


def _party(rng, a, b):
    day, n, food = rng.choice(DAYS), rng.randint(8, 40), rng.choice(["pizza", "tacos", "a barbecue", "sushi", "cake and snacks"])
    turns = [(a, f"Let's throw a party for the end of term on {day}."), (b, "Great idea! How many people?"),
             (a, f"Around {n}. I can order {food}."), (b, "I'll bring the music and some drinks.")]
    return turns, f"{a} and {b} plan an end-of-term party on {day} for about {n} people; {a} orders {food} and {b} brings music and drinks.", [a, b, day, str(n)]


def _pets(rng, a, b):
    pet, days, day = rng.choice(["cat", "dog", "rabbit", "parrot", "hamster"]), rng.randint(2, 10), rng.choice(DAYS)
    turns = [(a, f"I'm away for {days} days from {day}. Could you look after my {pet}?"), (b, "Sure. What does it need?"),
             (a, f"Food twice a day and some company. I'll leave the key with you on {day}."), (b, "No problem, I'll take care of it.")]
    return turns, f"{b} agrees to look after {a}'s {pet} for {days} days from {day}; {a} will leave the key.", [a, b, pet, str(days), day]


def _overdue(rng, a, b):
    book, fine, day = rng.choice(["a cookbook", "a travel guide", "a novel", "a history book"]), rng.randint(2, 12), rng.choice(DAYS)
    turns = [(b, f"Hello {a}, the library here. You still have {book} that was due last week."), (a, "Oh no, I forgot. Is there a fine?"),
             (b, f"It's {fine} dollars so far."), (a, f"I'll bring it back on {day} and pay then.")]
    return turns, f"The library tells {a} that {book} is overdue with a {fine} dollar fine; {a} will return it and pay on {day}.", [a, book, str(fine), day]


def _carpool(rng, a, b):
    place, time, days = rng.choice(PLACES), rng.choice(TIMES), rng.choice(["Mondays and Wednesdays", "every weekday", "Tuesdays and Thursdays"])
    turns = [(a, f"We both go to the {place} {days}. Want to share a ride?"), (b, "That would save money. Who drives?"),
             (a, f"I can drive. I'll pick you up at {time}."), (b, "Deal, I'll pay for the fuel.")]
    return turns, f"{a} and {b} will share a ride to the {place} {days}; {a} drives and picks {b} up at {time}, and {b} pays for fuel.", [a, b, place, time]


SCENARIOS = {"party": _party, "pets": _pets, "overdue": _overdue, "carpool": _carpool, "booking": _booking, "doctor": _doctor, "lost": _lost, "trip": _trip, "shopping": _shopping,
             "meeting": _meeting, "repair": _repair, "gift": _gift, "homework": _homework, "recipe": _recipe,
             "move": _move, "job": _job}

OPENERS = ["Hi {b}!", "Hey, {b}.", "Hello {b}, got a minute?", "{b}, are you there?", "Morning, {b}!", "Hi, it's {a}."]
REPLIES = ["Hi {a}, what's up?", "Sure, go ahead.", "Hey! Yes, I'm here.", "Hello {a}. What can I do for you?", "Of course, {a}."]
CLOSERS = [("Thanks a lot!", "No problem."), ("Great, thank you.", "You're welcome, {a}."), ("See you then!", "Bye!"),
           ("Perfect.", "Talk soon."), ("Thanks, {b}.", "Anytime.")]

TEMPLATES = templates("summarization", train={
    "summarize": "Summarize the following conversation.\n\n{dialogue}",
    "brief": "Write a brief summary of this dialogue:\n\n{dialogue}",
    "one": "{dialogue}\n\nSummarize the conversation above in one or two sentences.",
    "tldr": "Dialogue:\n{dialogue}\n\nSummary:",
    "notes": "Read the chat below and write a short summary of what was decided.\n\n{dialogue}",
    "key": "Summarize the key points of this conversation between {a} and {b}.\n\n{dialogue}",
    "third": "{dialogue}\n\nWrite a summary of this conversation in the third person.",
    "short": "Give a short summary (one sentence) of the following chat.\n{dialogue}",
}, eval={
    "gist": "Can you give me the gist of this exchange?\n\n{dialogue}",
    "recap": "Here's a transcript from earlier today:\n{dialogue}\nCould you recap it for someone who missed it?",
})


def generate(rng: random.Random, split: str) -> dict:
    kind = rng.choice(pool(sorted(SCENARIOS), split, "dialogue-kind"))
    a, b = rng.sample(pool(NAMES, split, "name"), 2)
    turns, summary, keywords = SCENARIOS[kind](rng, a, b)
    if rng.random() < 0.5:  # small talk around the scenario
        turns = [(a, rng.choice(OPENERS).format(a=a, b=b)), (b, rng.choice(REPLIES).format(a=a, b=b))] + turns
    if rng.random() < 0.5:
        end = rng.choice(CLOSERS)
        turns = turns + [(a, end[0].format(a=a, b=b)), (b, end[1].format(a=a, b=b))]
    dialogue = "\n".join(f"{who}: {line}" for who, line in turns)
    t = pick(rng, TEMPLATES, split)
    return {"prompt": t.text.format(dialogue=dialogue, a=turns[0][0], b=b if turns[0][0] == a else a), "reference": summary, "template": t.id,
            "source": f"generated:dialogue/{kind}", "check": {"keywords": keywords, "dialogue_words": len(dialogue.split())}}
