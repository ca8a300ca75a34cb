"""Tokenizer loading and prompt rendering (the book's math prompt, Qwen3's chat template)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer

PAD_TOKEN = "<|endoftext|>"
BASE_END_TOKEN = "<|endoftext|>"
CHAT_END_TOKEN = "<|im_end|>"
PROMPT_STYLES = ("base", "reasoning", "instruct")


def render_prompt(problem: str) -> str:
    """The book's MATH prompt (chapter 3): ask for the final answer in \\boxed{}."""
    return (
        "You are a helpful math assistant.\n"
        "Answer the question and write the final result on a new line as:\n"
        "\\boxed{ANSWER}\n\n"
        f"Question:\n{problem}\n\nAnswer:"
    )


def chat_wrap(message: str, thinking: bool) -> str:
    """Qwen3's chat template for one user turn and the assistant's turn.

    With thinking off (instruct use), the template closes an empty think block, as Qwen3's
    `enable_thinking=False` does.
    """
    text = f"<|im_start|>user\n{message}<|im_end|>\n<|im_start|>assistant\n"
    return text if thinking else text + "<think>\n\n</think>\n\n"


def format_prompt(problem: str, style: str, suffix: str = "") -> str:
    if style not in PROMPT_STYLES:
        raise ValueError(f"unknown prompt style {style!r}; choose one of {PROMPT_STYLES}")
    text = render_prompt(problem) + suffix
    return text if style == "base" else chat_wrap(text, thinking=style == "reasoning")


@dataclass
class TextTokenizer:
    """A `tokenizers.Tokenizer` plus the ids generation needs (pad and end of answer)."""

    tokenizer: Tokenizer
    pad_token_id: int
    eos_token_id: int

    @classmethod
    def from_model_dir(cls, directory: str | Path, style: str = "base") -> "TextTokenizer":
        """Read `tokenizer.json`; the end token comes from config.json, else from the style.

        Qwen3 base models end answers with `<|endoftext|>`, chat models with `<|im_end|>`.
        """
        directory = Path(directory)
        path = directory / "tokenizer.json"
        if not path.is_file():
            raise FileNotFoundError(f"tokenizer not found: {path}")
        tokenizer = Tokenizer.from_file(str(path))
        pad = tokenizer.token_to_id(PAD_TOKEN)
        if pad is None:
            raise ValueError(f"{path}: has no {PAD_TOKEN} token to pad with")
        eos = None
        config = directory / "config.json"
        if config.is_file():
            eos = json.loads(config.read_text()).get("eos_token_id")
            if isinstance(eos, list):
                eos = eos[0]
        if eos is None:
            eos = tokenizer.token_to_id(BASE_END_TOKEN if style == "base" else CHAT_END_TOKEN)
        return cls(tokenizer, pad, eos)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        """Text of `ids` up to the first end token."""
        if self.eos_token_id in ids:
            ids = ids[: ids.index(self.eos_token_id)]
        return self.tokenizer.decode(ids, skip_special_tokens=False)
