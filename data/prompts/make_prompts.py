"""Regenerate the shipped prompt set: short prompts over four kinds of work (code, json,
extraction, prose), written by hand as pools of tasks and subjects, crossed
deterministically.

    python data/prompts/make_prompts.py [--out PATH]   # rewrites specsim/data/prompts.jsonl

Nothing here is copied from a corpus; every subject, record and report was written for
specsim. The evaluation prompts of `specsim.workloads` are deliberately absent.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
from pathlib import Path

# ---- code -------------------------------------------------------------------------------
FUNCTIONS = [
    "returns the n-th Fibonacci number iteratively",
    "checks whether a string is a palindrome, ignoring case and spaces",
    "counts the words in a text and returns a dict of word -> count",
    "merges two sorted lists into one sorted list",
    "flattens a nested list of any depth",
    "returns the prime numbers below n (sieve of Eratosthenes)",
    "parses a date string 'YYYY-MM-DD' into a (year, month, day) tuple",
    "removes duplicate items from a list while keeping their order",
    "computes the median of a list of numbers",
    "converts a temperature from Celsius to Fahrenheit",
    "splits a list into chunks of a given size",
    "returns the longest common prefix of a list of strings",
    "validates an email address with a simple regular expression",
    "reverses the words of a sentence",
    "computes the factorial of n recursively",
    "finds the index of a value in a sorted list with binary search",
    "reads a CSV file and returns its rows as dictionaries",
    "groups a list of (key, value) pairs into a dict of lists",
    "returns the n largest items of a list",
    "converts a Roman numeral to an integer",
    "transposes a matrix given as a list of lists",
    "computes the greatest common divisor of two integers",
    "capitalises the first letter of every word in a string",
    "checks whether two strings are anagrams",
    "returns the running total of a list of numbers",
]
LANGUAGES = ["Python", "Python", "Python", "JavaScript", "Rust", "Go", "TypeScript", "C"]
SNIPPETS = [
    ("Add type hints to this function.",
     "def area(width, height):\n    return width * height"),
    ("Rename the variables of this function to descriptive names.",
     "def f(a, b):\n    c = []\n    for x in a:\n        if x not in b:\n            c.append(x)\n    return c"),
    ("Rewrite this loop as a list comprehension.",
     "squares = []\nfor n in range(10):\n    if n % 2 == 0:\n        squares.append(n * n)"),
    ("Find and fix the bug in this function.",
     "def mean(values):\n    total = 0\n    for v in values:\n        total += v\n    return total / len(values) + 1"),
    ("Add a docstring to this function.",
     "def clamp(x, lo, hi):\n    return max(lo, min(x, hi))"),
    ("Write a unit test with pytest for this function.",
     "def is_even(n):\n    return n % 2 == 0"),
    ("Convert this function to use a dictionary instead of if/elif.",
     "def color(code):\n    if code == 'r':\n        return 'red'\n    elif code == 'g':\n        return 'green'\n    elif code == 'b':\n        return 'blue'\n    return 'unknown'"),
    ("Make this function handle an empty list.",
     "def first_and_last(items):\n    return items[0], items[-1]"),
    ("Explain what this code prints, then rewrite it more clearly.",
     "x = [1, 2, 3]\ny = x\ny.append(4)\nprint(len(x), len(y))"),
    ("Rewrite this class as a dataclass.",
     "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y"),
    ("Translate this function to JavaScript.",
     "def greet(name):\n    return f'Hello, {name}!'"),
    ("Add error handling for a missing file.",
     "def read_config(path):\n    with open(path) as f:\n        return f.read()"),
    ("Write the SQL query this comment describes.",
     "-- select the names and emails of all customers from Berlin, sorted by name"),
    ("Make this function iterative instead of recursive.",
     "def depth(node):\n    if node is None:\n        return 0\n    return 1 + max(depth(node.left), depth(node.right))"),
    ("Simplify this condition.",
     "if not (a == False or b == False):\n    run()"),
]

# ---- json -------------------------------------------------------------------------------
PEOPLE = [
    ("Jonas Weber", "Hamburg", "engineer", 34), ("Aiko Tanaka", "Osaka", "designer", 29),
    ("Lucia Rossi", "Turin", "teacher", 41), ("Samuel Okafor", "Lagos", "pharmacist", 37),
    ("Ingrid Berg", "Bergen", "pilot", 45), ("Carlos Mendes", "Porto", "chef", 31),
    ("Fatima Zahra", "Rabat", "lawyer", 39), ("Tomasz Nowak", "Gdansk", "nurse", 27),
    ("Mei Lin", "Taipei", "architect", 33), ("Olivia Brown", "Leeds", "accountant", 52),
    ("Ravi Kumar", "Pune", "data analyst", 26), ("Elena Petrova", "Sofia", "translator", 48),
    ("Noah Fischer", "Zurich", "baker", 23), ("Amara Diallo", "Dakar", "doctor", 44),
    ("Liam Murphy", "Cork", "carpenter", 36), ("Sofia Lindqvist", "Uppsala", "biologist", 30),
]
PRODUCTS = [
    ("desk lamp", 24.90, 3, "home"), ("running shoes", 89.00, 1, "sport"),
    ("coffee grinder", 45.50, 2, "kitchen"), ("notebook", 3.20, 10, "office"),
    ("rain jacket", 120.00, 1, "clothing"), ("water bottle", 12.75, 4, "sport"),
    ("headphones", 59.99, 1, "electronics"), ("cutting board", 18.40, 2, "kitchen"),
    ("backpack", 64.00, 1, "travel"), ("USB cable", 7.99, 5, "electronics"),
    ("wool socks", 9.50, 6, "clothing"), ("plant pot", 15.00, 3, "garden"),
]
EVENTS = [
    ("team meeting", "Monday", "09:30", "room 4"), ("dentist", "Tuesday", "14:00", "Main St 12"),
    ("yoga class", "Wednesday", "18:15", "city gym"), ("project review", "Thursday", "11:00", "online"),
    ("dinner with Ana", "Friday", "20:00", "Casa Blanca"), ("football match", "Saturday", "16:30", "north field"),
    ("piano lesson", "Sunday", "10:00", "music school"), ("job interview", "Monday", "13:45", "Tower B"),
]
JSON_TASKS = [
    "Convert this record to JSON with the keys \"name\", \"city\", \"job\" and \"age\". Output only the JSON.\n\n{p}",
    "Write a JSON object describing this person, with \"age\" as a number. Output only the JSON.\n\n{p}",
    "Turn this order into JSON with keys \"item\", \"price\", \"quantity\", \"category\" and \"total\". Output only the JSON.\n\n{o}",
    "Make a JSON list of these orders, one object per line item with \"item\", \"price\" and \"quantity\".\n\n{o}\n{o2}",
    "Return this calendar entry as JSON with keys \"title\", \"day\", \"time\", \"place\".\n\n{e}",
    "Write a JSON array with these two calendar entries (keys title, day, time, place).\n\n{e}\n{e2}",
    "Produce a JSON schema for an object with the fields of this record.\n\n{p}",
    "Fix this invalid JSON and output the corrected version only.\n\n{bad}",
]

# ---- extraction -------------------------------------------------------------------------
REPORT_TEMPLATES = [
    "On {d1} {name} opened a bakery in {city}. The first month brought {amount} in sales, "
    "and on {d2} a second shop followed near the station.",
    "{name} from {city} signed a contract worth {amount} on {d1}. Delivery of the first "
    "machines is planned for {d2}.",
    "The {city} marathon took place on {d1}. {name} won in 2 hours 14 minutes and received "
    "a prize of {amount}. The next race is on {d2}.",
    "In a letter dated {d1}, {name} asked the {city} council for {amount} to repair the old "
    "bridge. The council will decide on {d2}.",
    "{name} borrowed {amount} from the {city} credit union on {d1} and must repay it by {d2}.",
    "The museum of {city} bought a painting for {amount} on {d1}. Its curator, {name}, will "
    "present it to the public on {d2}.",
]
EXTRACTION_TASKS = [
    "List every date, person and amount in this text, one per line.\n\n{r}",
    "Extract the person's name and the city from this text. Answer as 'name: ..., city: ...'.\n\n{r}",
    "Copy the sentence of this text that mentions money.\n\n{r}",
    "What happens on {d2} according to this text? Quote the text.\n\n{r}",
    "Extract all dates from this text in the format YYYY-MM-DD.\n\n{r}",
    "Summarise this text in one sentence that keeps every name and number.\n\n{r}",
]
DATES = ["3 January 2023", "14 February 2024", "21 March 2022", "9 April 2024", "30 May 2023",
         "12 June 2021", "1 July 2024", "18 August 2022", "5 September 2023", "27 October 2024",
         "16 November 2022", "8 December 2023"]
AMOUNTS = ["$4,200", "EUR 18,500", "$950", "GBP 62,000", "$1.2 million", "EUR 7,300",
           "$310", "CHF 25,000"]

# ---- prose ------------------------------------------------------------------------------
PROSE_FORMS = [
    "Write a short paragraph about {t}.",
    "Write a four-line poem about {t}.",
    "Explain {t} to a ten-year-old in three sentences.",
    "Write the opening sentence of a novel about {t}.",
    "Give three tips about {t}, as a numbered list.",
    "Write a short, friendly email to a colleague about {t}.",
    "Describe {t} in two sentences, as a travel guide would.",
    "Write a short dialogue between two friends about {t}.",
]
TOPICS = [
    "a rainy afternoon in a small town", "the first day at a new school", "how bees make honey",
    "a lighthouse on a cliff", "learning to ride a bicycle", "why the sky is blue",
    "a market in the early morning", "the history of the printing press", "a cat that cannot sleep",
    "planting a vegetable garden", "a train journey through the mountains", "how volcanoes form",
    "an old bookshop", "the moon landing", "making bread at home", "a storm at sea",
    "keeping a diary", "the life of a river", "autumn leaves", "a robot learning to paint",
    "saving money for a trip", "the smell of coffee", "a lost umbrella", "winter in the north",
    "a festival of lanterns", "how a bridge is built", "a quiet library", "the importance of sleep",
    "a fox in the city", "the last day of summer",
]


def _person(p):
    name, city, job, age = p
    return f"Name: {name}\nCity: {city}\nJob: {job}\nAge: {age}"


def _order(o):
    item, price, qty, cat = o
    return f"{qty} x {item} at {price:.2f} each ({cat})"


def _event(e):
    title, day, time, place = e
    return f"{title}, {day} at {time}, {place}"


def code_prompts(rng: random.Random) -> list[str]:
    out = []
    for fn, lang in zip(FUNCTIONS, itertools.cycle(LANGUAGES)):
        out.append(f"Write a {lang} function that {fn}.")
        out.append(f"Write a short Python function that {fn}, with a docstring and one example.")
    for task, code in SNIPPETS:
        fence = "sql" if code.startswith("--") else "python"
        out.append(f"{task}\n\n```{fence}\n{code}\n```")
        out.append(f"{task} Answer with code only.\n\n```{fence}\n{code}\n```")
    rng.shuffle(out)
    return out


def json_prompts(rng: random.Random) -> list[str]:
    out = []
    for i in range(80):
        task = JSON_TASKS[i % len(JSON_TASKS)]
        p, p2 = rng.sample(PEOPLE, 2)
        o, o2 = rng.sample(PRODUCTS, 2)
        e, e2 = rng.sample(EVENTS, 2)
        bad = '{"name": "%s", "city": "%s" "age": %d,}' % (p[0], p[1], p[3])
        out.append(task.format(p=_person(p), o=_order(o), o2=_order(o2), e=_event(e),
                               e2=_event(e2), bad=bad))
    return out


def extraction_prompts(rng: random.Random) -> list[str]:
    out = []
    for i in range(80):
        d1, d2 = rng.sample(DATES, 2)
        name, city = rng.choice(PEOPLE)[:2]
        report = REPORT_TEMPLATES[i % len(REPORT_TEMPLATES)].format(
            d1=d1, d2=d2, name=name, city=city, amount=rng.choice(AMOUNTS))
        out.append(EXTRACTION_TASKS[(i // len(REPORT_TEMPLATES)) % len(EXTRACTION_TASKS)]
                   .format(r=report, d2=d2))
    return out


def prose_prompts(rng: random.Random) -> list[str]:
    pairs = list(itertools.product(PROSE_FORMS, TOPICS))
    rng.shuffle(pairs)
    return [form.format(t=topic) for form, topic in pairs[:80]]


SHIPPED = Path(__file__).resolve().parents[2] / "specsim" / "data" / "prompts.jsonl"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=SHIPPED,
                    help=f"where to write the set (default {SHIPPED})")
    args = ap.parse_args(argv)
    rng = random.Random(20261130)
    rows = []
    for kind, make in (("code", code_prompts), ("json", json_prompts),
                       ("extraction", extraction_prompts), ("prose", prose_prompts)):
        texts = list(dict.fromkeys(make(rng)))          # unique, order kept
        rows += [{"kind": kind, "text": t} for t in texts]
    path = args.out
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"{len(rows)} prompts -> {path}")


if __name__ == "__main__":
    main()
