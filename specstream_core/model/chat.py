"""Prompts for chat models: the user's text wrapped in the tokenizer's own chat template.

A model whose tokenizer has a chat template (an instruction-tuned model) answers a bare string
poorly: it was trained on conversations. Every entry point therefore wraps the text as one user turn
and appends the assistant header (`add_generation_prompt`) unless asked for the raw text (`--raw`,
`Engine.chat = False`). Models without a template (base models, the tests' tiny models) get the text
as it is, with the tokenizer's usual special tokens.
"""

from __future__ import annotations


def has_chat_template(tokenizer) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def chat_text(tokenizer, text: str) -> str:
    """`text` as one user turn, ending where the assistant's answer begins."""
    return tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                         add_generation_prompt=True)


def encode_prompt(tokenizer, text: str, chat: bool = True) -> list[int]:
    """Token ids of a prompt; chat-wrapped when `chat` and the tokenizer has a template.

    The template already carries its special tokens, so the wrapped text is tokenized without adding
    more (a second BOS would change the model's answer)."""
    if chat and has_chat_template(tokenizer):
        return list(tokenizer(chat_text(tokenizer, text), add_special_tokens=False)["input_ids"])
    return list(tokenizer(text, add_special_tokens=True)["input_ids"])
