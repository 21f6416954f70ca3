"""instruct: open instructions (Alpaca / MT-Bench style): explain, list, compare, write, rewrite, advise,
and instructions over Python's standard-library documentation (explain, summarize, give an example).

No checkable answer: reference ``None``; ``check["keywords"]`` are the content words an on-topic answer
is expected to use. Topics, sentences to rewrite and stdlib modules are partitioned between splits.
"""

from __future__ import annotations

import random

from .base import pick, pool, templates
from .stdlib_text import brief, stdlib_items

TOPICS = [
    "photosynthesis", "the water cycle", "black holes", "inflation", "compound interest", "vaccines", "volcanoes",
    "the French Revolution", "machine learning", "recycling", "climate change", "the immune system", "gravity",
    "electric cars", "the printing press", "supply and demand", "sleep", "meditation", "the Roman Empire",
    "plate tectonics", "blockchain", "the human heart", "solar power", "bees", "coral reefs", "the internet",
    "democracy", "the stock market", "antibiotics", "earthquakes", "the moon landing", "renewable energy",
    "public libraries", "the Silk Road", "rainbows", "tides", "DNA", "the Renaissance", "credit scores",
    "composting", "time zones", "jet lag", "password security", "open-source software", "cloud computing",
    "healthy breakfasts", "learning a language", "public speaking", "remote work", "saving money",
    "first aid", "marathon training", "houseplants", "bread baking", "chess openings", "birdwatching",
    "budget travel", "job interviews", "writing a CV", "team meetings", "email etiquette", "city cycling",
    "the Olympic Games", "jazz", "impressionist painting", "poetry", "minimalism", "coffee", "tea ceremonies",
    "penguins", "wolves", "octopuses", "the Amazon rainforest", "deserts", "glaciers", "hurricanes",
    "nuclear fusion", "quantum computers", "3D printing", "robots in factories", "self-driving cars",
    "social media", "video games", "online privacy", "spreadsheets", "version control", "unit testing",
    "recursion", "databases", "sorting algorithms", "the metric system", "prime numbers", "probability",
    "the Pythagorean theorem", "fractions", "volunteering", "gardening in small spaces", "camping",
    "board games", "photography", "knitting", "road trips", "museums", "dinosaurs", "the Great Wall of China",
]
PAIRS = [("cats", "dogs"), ("tea", "coffee"), ("trains", "planes"), ("books", "films"), ("renting", "buying a home"),
         ("Python", "JavaScript"), ("lists", "tuples"), ("weather", "climate"), ("viruses", "bacteria"),
         ("email", "phone calls"), ("summer", "winter"), ("cities", "the countryside"), ("running", "swimming"),
         ("paper books", "e-readers"), ("SQL", "spreadsheets"), ("solar power", "wind power"), ("walking", "cycling"),
         ("savings accounts", "index funds"), ("laptops", "desktop computers"), ("lakes", "seas")]
SENTENCES = [
    "hey, can u send me the report by tmrw?", "the meeting got moved to 3 because the boss is late",
    "I think we should maybe try the new cafe sometime", "the printer is broken again, nobody fixed it",
    "thanks a lot for the help yesterday, it was great", "we're gonna be late, traffic is crazy",
    "the product launch went pretty well overall", "our team finished the project two weeks early",
    "sorry i missed your call, was in a meeting", "the new app keeps crashing when I open the settings",
    "can we push the deadline to next friday?", "the kids loved the museum trip on saturday",
    "I can't come to the party, I have to work", "the soup was cold and the waiter was rude",
    "please remember to lock the door when you leave", "the train was cancelled so I took the bus",
    "our sales went up a lot this quarter", "the weather ruined our picnic plans",
    "I finally finished reading that long novel", "the landlord still hasn't fixed the heating",
    "let's grab lunch after the class", "the concert tickets sold out in five minutes",
    "my laptop battery dies after an hour", "the library is closed on public holidays",
    "we need more volunteers for the charity run", "the garden looks amazing after the rain",
]
AUDIENCES = ["a ten-year-old", "a beginner", "a busy manager", "a high-school student", "my grandmother", "a new employee"]

# task -> (train phrasings, eval phrasings); slots {topic} {a} {b} {n} {s} {aud}
TASKS = {
    "explain": (["Explain {topic} in simple terms.", "What is {topic}? Explain it briefly.", "Explain {topic} to {aud}."],
                ["I've always been confused by {topic}. Could you break it down for me?"]),
    "list": (["List {n} interesting facts about {topic}.", "Give me {n} tips related to {topic}.", "Name {n} key ideas behind {topic}."],
             ["What are {n} things everyone should know about {topic}?"]),
    "compare": (["Compare {a} and {b}.", "What are the main differences between {a} and {b}?", "Write a short comparison of {a} versus {b}."],
                ["{a} or {b}: which would you pick, and why?"]),
    "write": (["Write a short poem about {topic}.", "Write a short story that involves {topic}.", "Write a haiku about {topic}.",
               "Write a tweet announcing an event about {topic}."],
              ["Come up with a little rhyme about {topic} that a kid would enjoy."]),
    "email": (["Write a short email to a colleague about {topic}.", "Draft a polite email inviting a friend to a talk on {topic}."],
              ["Help me write a quick note to my boss asking for a day off to attend a workshop on {topic}."]),
    "rewrite": (["Rewrite this sentence in a formal tone: \"{s}\"", "Fix the grammar and spelling: \"{s}\"", "Make this sentence more polite: \"{s}\"",
                 "Paraphrase the following sentence: \"{s}\""],
                ["Can you make this sound more professional? \"{s}\""]),
    "advise": (["Give advice to someone who wants to start with {topic}.", "How can I get better at {topic}?", "What are common mistakes people make with {topic}?"],
               ["I'm thinking about getting into {topic} but don't know where to begin. Any suggestions?"]),
    "proscons": (["What are the pros and cons of {topic}?", "List the advantages and disadvantages of {topic}."],
                 ["Is {topic} a good thing or a bad thing? Weigh both sides."]),
    "title": (["Suggest {n} titles for a blog post about {topic}.", "Give {n} catchy headlines about {topic}."],
              ["I'm writing an article on {topic}; can you brainstorm {n} names for it?"]),
    "howto": (["Describe the steps to get started with {topic}.", "Outline a simple plan for learning about {topic} in one week."],
              ["Where should a total newbie start if they want to understand {topic}?"]),
    "sentiment": (["Is the tone of this sentence positive, negative or neutral? \"{s}\"", "Classify the sentiment of: \"{s}\""],
                  ["How does the person who wrote \"{s}\" seem to feel?"]),
    "reply": (["Write a friendly reply to this message: \"{s}\"", "Suggest a short response to: \"{s}\""],
              ["My coworker just texted me \"{s}\" - what should I answer?"]),
    "quiz": (["Write {n} quiz questions about {topic}, with answers.", "Create a short multiple-choice question about {topic}."],
             ["Test me on {topic}: ask me {n} questions."]),
}
DOC_TASKS = {
    "doc_explain": (["Explain in plain English what {name} from Python's {module} module does, based on its documentation:\n\n{doc}",
                     "Here is the docstring of {module}.{name}:\n\n{doc}\n\nExplain it for a beginner."],
                    ["So I came across {module}.{name} and the docs say:\n\n{doc}\n\nWhat does that actually mean in practice?"]),
    "doc_example": (["Write a short example that uses {module}.{signature}. Its documentation says:\n\n{doc}",
                     "Show how to call {name} from the {module} module, with a brief explanation. Documentation:\n{doc}"],
                    ["Could you show me a tiny script using {module}.{name}? For reference:\n\n{doc}"]),
    "doc_summary": (["Summarize this documentation in one or two sentences:\n\n{doc}", "Turn this documentation into a bullet list of key points:\n\n{doc}"],
                    ["Give me the short version of these docs:\n\n{doc}"]),
}

TEMPLATES = templates("instruct", train={"plain": "{body}", "please": "Please answer the following.\n{body}",
                                         "assistant": "You are a helpful assistant. {body}",
                                         "concise": "{body} Keep it concise."},
                      eval={"chatty": "Hey! {body}", "thanks": "{body} Thanks in advance!"})

_STOP = set("a an the of to in on and or for with about from what how is are be it its this that into by as at your my "
            "me i you give write explain list name some short simple terms key ideas behind tips related main "
            "differences between versus which would pick why".split())


def _keywords(*texts: str) -> list[str]:
    words = []
    for t in texts:
        for w in t.replace('"', " ").replace(",", " ").replace(".", " ").replace("?", " ").replace("(", " ").replace(")", " ").split():
            w = w.strip("'!:;-").lower()
            if len(w) > 2 and w not in _STOP and w not in words:
                words.append(w)
    return words[:8]


def generate(rng: random.Random, split: str) -> dict:
    t = pick(rng, TEMPLATES, split)
    if rng.random() < 0.25:
        task = rng.choice(sorted(DOC_TASKS))
        e = rng.choice(stdlib_items(split))
        train_p, eval_p = DOC_TASKS[task]
        body = rng.choice(train_p if split == "train" else eval_p).format(name=e["name"], module=e["module"],
                                                                           signature=e["signature"], doc=brief(e["doc"]))
        kw = _keywords(e["name"].split(".")[-1], e["doc"].split("\n")[0])
        return {"prompt": t.text.format(body=body), "reference": None, "template": f"{t.id}+{task}.{split}",
                "source": f"python-stdlib:{e['module']}/{e['name']}", "check": {"keywords": kw}}
    task = rng.choice(sorted(TASKS))
    topic = rng.choice(pool(TOPICS, split, "topic"))
    a, b = rng.choice(pool(PAIRS, split, "pair"))
    s = rng.choice(pool(SENTENCES, split, "sentence"))
    slots = {"topic": topic, "a": a, "b": b, "n": rng.randint(3, 7), "s": s, "aud": rng.choice(AUDIENCES)}
    train_p, eval_p = TASKS[task]
    body = rng.choice(train_p if split == "train" else eval_p).format(**slots)
    body = body[0].upper() + body[1:]
    material = {"compare": f"{a} vs {b}", "rewrite": s, "sentiment": s, "reply": s}.get(task, topic)
    kw = _keywords(material)
    return {"prompt": t.text.format(body=body), "reference": None, "template": f"{t.id}+{task}.{split}",
            "source": f"generated:instruction/{task}", "check": {"keywords": kw}}
