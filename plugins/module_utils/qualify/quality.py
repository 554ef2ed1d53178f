"""The repeated quality protocol: a small fixed task set whose answers are checked by code.

Every item runs `runs` times (sampling at the protocol's temperature, so repeats measure how
reliably the seat answers, not only whether greedy decoding happens to be right), and each
category reports pass counts such as 6/6. No model judges a model: every check below is a few
lines of code over the visible answer.
"""

from ansible_collections.seatwright.fleet.plugins.module_utils.qualify import detectors
from ansible_collections.seatwright.fleet.plugins.module_utils.qualify.gates import (
    PASS,
    WEATHER_TOOL,
    chat_body,
    http_problem,
    judge_text,
    reply_of,
    request,
)

PROTOCOL = "seatwright-quality-1"


def _quality_body(ctx, messages, **extra):
    body = chat_body(ctx, messages, **extra)
    body["temperature"] = ctx["settings"]["quality"]["temperature"]
    return body


def _outcome(kind, why, **detail):
    return {"ok": kind == PASS, "verdict": kind, "reason": why, "detail": detail}


def _final_number(expected):
    def check(text):
        numbers = detectors.numbers_in(text)
        if not numbers:
            return False, "no number in %r" % text[:160]
        ok = abs(numbers[-1] - expected) < 1e-9
        return ok, "final number %s, expected %s" % (_number_text(numbers[-1]), _number_text(expected))

    return check


def _number_text(value):
    return str(int(value)) if float(value).is_integer() else str(value)


def arithmetic_item(question, expected):
    def run(ctx):
        messages = [{"role": "user", "content": question + " Reply with the final number only."}]
        response = yield request("/chat/completions", _quality_body(ctx, messages, visible=64))
        problem = http_problem(response)
        if problem:
            return _outcome("error", problem)
        reply = reply_of(response)
        kind, why = judge_text(reply, _final_number(expected))
        return _outcome(kind, why, answer=reply["content"])

    return run


ORDER_TEXT = (
    "Order 58213 was placed on 14 March 2026 by Priya Natarajan and shipped to Ghent on "
    "17 March 2026. The invoice total was 1,284.50 EUR, paid by bank transfer."
)
ORDER_FACTS = {"order": 58213, "customer": "Priya Natarajan", "city": "Ghent", "total": 1284.5}


def extraction_item(ctx):
    messages = [
        {
            "role": "user",
            "content": (
                "Extract the order number, the customer's name, the city it was shipped to and the invoice total "
                "(as a number) from the text below. Reply with a JSON object with the keys order, customer, city "
                "and total, and nothing else.\n\n" + ORDER_TEXT
            ),
        }
    ]
    response = yield request("/chat/completions", _quality_body(ctx, messages, visible=128))
    problem = http_problem(response)
    if problem:
        return _outcome("error", problem)
    reply = reply_of(response)

    def check(text):
        value = detectors.find_json_object(text)
        if value is None:
            return False, "no JSON object in %r" % text[:160]
        wrong = [
            "%s=%r" % (k, value.get(k)) for k, v in ORDER_FACTS.items() if not detectors.same_value(value.get(k), v)
        ]
        if wrong:
            return False, "wrong or missing: %s" % ", ".join(wrong)
        return True, "all four facts right"

    kind, why = judge_text(reply, check)
    return _outcome(kind, why, answer=reply["content"])


SESSION_TURNS = (
    "Please remember two facts for later: my locker number is 4172 and my manager's name is Okafor. "
    "Acknowledge briefly.",
    "Unrelated question: which colour do you get by mixing blue and yellow paint? One word.",
    "What is my locker number, and what is my manager's name?",
)


def session_item(ctx):
    """Three turns with the model's own replies kept in the history; the last must recall both facts."""
    messages = []
    reply = None
    for turn, text in enumerate(SESSION_TURNS):
        messages.append({"role": "user", "content": text})
        response = yield request("/chat/completions", _quality_body(ctx, list(messages), visible=96))
        problem = http_problem(response)
        if problem:
            return _outcome("error", "turn %d: %s" % (turn + 1, problem))
        reply = reply_of(response)
        messages.append({"role": "assistant", "content": reply["content"]})

    def check(text):
        has_number = 4172.0 in detectors.numbers_in(text)
        has_name = detectors.contains_word(text, "Okafor")
        missing = [w for w, ok in (("4172", has_number), ("Okafor", has_name)) if not ok]
        return not missing, (
            "recalled both" if not missing else "missing %s in %r" % (" and ".join(missing), text[:160])
        )

    kind, why = judge_text(reply, check)
    return _outcome(kind, why, turns=[m["content"] for m in messages if m["role"] == "assistant"])


CURRENCY_TOOL = {
    "type": "function",
    "function": {
        "name": "convert_currency",
        "description": "Convert an amount of money from one currency to another at today's rate.",
        "parameters": {
            "type": "object",
            "properties": {
                "amount": {"type": "number"},
                "from_currency": {"type": "string", "enum": ["USD", "EUR", "GBP", "JPY"]},
                "to_currency": {"type": "string", "enum": ["USD", "EUR", "GBP", "JPY"]},
            },
            "required": ["amount", "from_currency", "to_currency"],
        },
    },
}


def _choosing(setting):
    """tool_choice for an item whose task is choosing the tool: naming it would give the answer away."""
    return "auto" if setting == "auto" else "required"


def tools_item(ctx):
    """With two tools offered, the question needs convert_currency(250, USD, EUR)."""
    messages = [{"role": "user", "content": "How many euros would I get for 250 US dollars today?"}]
    body = _quality_body(
        ctx,
        messages,
        visible=128,
        tools=[WEATHER_TOOL, CURRENCY_TOOL],
        tool_choice=_choosing(ctx["settings"]["tool_choice"]),
    )
    response = yield request("/chat/completions", body)
    problem = http_problem(response)
    if problem:
        return _outcome("error", problem)
    reply = reply_of(response)
    problems = detectors.check_tool_call(
        reply, "convert_currency", {"amount": 250, "from_currency": "USD", "to_currency": "EUR"}
    )
    if problems:
        return _outcome("fail", "; ".join(problems), calls=reply["tool_calls"], answer=reply["content"])
    return _outcome(PASS, "convert_currency(250, USD, EUR)", calls=reply["tool_calls"])


ITEMS = (
    ("arithmetic", "multiply-23-17", arithmetic_item("What is 23 multiplied by 17?", 391)),
    (
        "arithmetic",
        "pencils-price",
        arithmetic_item("Pencils cost 45 cents for a pack of 3. How many cents do 12 pencils cost?", 180),
    ),
    ("extraction", "order-facts", extraction_item),
    ("session", "recall-after-three-turns", session_item),
    ("tools", "choose-currency-tool", tools_item),
)


def plan(settings):
    """The protocol's runs in order: [(category, item id, run number, item function)]."""
    quality = settings["quality"]
    runs = []
    for category, item_id, function in ITEMS:
        if category in quality["categories"]:
            for number in range(1, quality["runs"] + 1):
                runs.append((category, item_id, number, function))
    return runs


def tally(results, settings):
    """Pass counts per category and the protocol's verdict from a list of
    {"category", "item", "run", "ok", "verdict", "reason", ...} results."""
    quality = settings["quality"]
    categories = {}
    for result in results:
        entry = categories.setdefault(result["category"], {"passed": 0, "runs": 0, "failures": []})
        entry["runs"] += 1
        if result["ok"]:
            entry["passed"] += 1
        else:
            entry["failures"].append(
                "%s run %d: %s: %s" % (result["item"], result["run"], result["verdict"], result["reason"])
            )
    short = [
        name
        for name, entry in categories.items()
        if entry["runs"] and entry["passed"] < quality["min_pass_fraction"] * entry["runs"] - 1e-9
    ]
    return {
        "protocol": PROTOCOL,
        "runs_per_item": quality["runs"],
        "temperature": quality["temperature"],
        "min_pass_fraction": quality["min_pass_fraction"],
        "categories": categories,
        "verdict": PASS if categories and not short else "fail",
        "reason": (
            "every category at or above %.0f%%" % (100 * quality["min_pass_fraction"])
            if not short
            else "below %.0f%%: %s"
            % (
                100 * quality["min_pass_fraction"],
                ", ".join("%s %d/%d" % (n, categories[n]["passed"], categories[n]["runs"]) for n in sorted(short)),
            )
        ),
    }
