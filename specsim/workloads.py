"""Prompts from four kinds of work, for measuring acceptance where it differs.

Acceptance depends on the work: code and structured output repeat what the prompt
already holds (n-gram lookup thrives), extraction copies spans of the input, free prose
is the least predictable. Each kind holds chat messages; `prompt_text` renders them with
the model's chat template when it has one.
"""

from __future__ import annotations

from specsim import validation

KINDS = ("code", "json", "extraction", "prose")
# Prompts are of similar length (129-256 tokens with SmolLM2's chat template), so that
# every kind pads to the same bucket and shares one compiled program per setting.

_CODE = '''Add type hints and a docstring to this Python function. Return the whole function.

```python
def moving_average(values, window):
    if window <= 0:
        raise ValueError("window must be positive")
    result = []
    total = 0.0
    for i, value in enumerate(values):
        total += value
        if i >= window:
            total -= values[i - window]
        if i >= window - 1:
            result.append(total / window)
    return result
```'''

_JSON = '''Convert this record to JSON with the keys "name", "email", "city", "orders" \
(a list of objects with "id" and "total"). Output only the JSON.

Name: Maria Lopez
Email: maria.lopez@example.com
City: Valencia
Orders: #1042 for 25.50, #1077 for 13.20, #1103 for 99.00'''

_EXTRACTION = '''Read the report and list every date, person and amount it mentions, \
one per line, copying the wording exactly.

Report: On 3 March 2024 the board of the Riverside Library approved a budget of \
$120,000 for the new reading room. Anna Novak, the head librarian, said construction \
would begin on 15 April 2024. The city council, led by Mayor Tom Hughes, added a grant \
of $35,000 on 20 March 2024. The reading room is expected to open on 1 September 2024.'''

_PROSE = '''Write a short story of about three paragraphs. The main character is Elsa, \
an old lighthouse keeper on a windy island in the north. One stormy morning she walks \
along the rocks below the tower and finds a green glass bottle with a folded letter \
inside. The letter was written many years ago by someone she once knew. Describe the \
island, the weather and the sea, what the letter says, and how Elsa feels as she reads \
it. End the story with the decision she makes that evening, when the storm has passed \
and the light of the tower turns again over the dark water.'''

PROMPTS: dict[str, str] = {"code": _CODE, "json": _JSON, "extraction": _EXTRACTION,
                           "prose": _PROSE}


def prompt_text(kind: str, tokenizer=None) -> str:
    """The prompt of ``kind`` as text, in the tokenizer's chat format when it has one."""
    validation.choice("kind", kind, KINDS)
    content = PROMPTS[kind]
    if tokenizer is not None and hasattr(tokenizer, "apply_chat_template"):
        return tokenizer.apply_chat_template([{"role": "user", "content": content}])
    return content
