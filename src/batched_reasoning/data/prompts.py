"""Tokenizer loading and prompt rendering (the book's math prompt, Qwen3's chat template)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer

BASE_END_TOKEN = "<|endoftext|>"
PAD_TOKEN = BASE_END_TOKEN  # Qwen3 pads with its base models' end token
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


def declared_end_tokens(directory: Path) -> list[int]:
    """The end-of-answer token ids a checkpoint declares: `generation_config.json`'s
    `eos_token_id`, else `config.json`'s (an id or a list; Qwen3-0.6B lists `<|im_end|>` and
    `<|endoftext|>`)."""
    for name in ("generation_config.json", "config.json"):
        path = directory / name
        if path.is_file():
            eos = json.loads(path.read_text()).get("eos_token_id")
            if eos is not None:
                return [eos] if isinstance(eos, int) else list(eos)
    return []


@dataclass
class TextTokenizer:
    """A `tokenizers.Tokenizer` plus the ids generation needs: padding, and every token that
    ends an answer (the first is the one training examples end with)."""

    tokenizer: Tokenizer
    pad_token_id: int
    end_token_ids: tuple[int, ...]

    @property
    def eos_token_id(self) -> int:
        return self.end_token_ids[0]

    @classmethod
    def from_model_dir(cls, directory: str | Path, style: str = "base") -> "TextTokenizer":
        """Read `tokenizer.json` and the end tokens the checkpoint declares; without any, the
        style's: Qwen3 base models end answers with `<|endoftext|>`, chat models with
        `<|im_end|>`."""
        directory = Path(directory)
        path = directory / "tokenizer.json"
        if not path.is_file():
            raise FileNotFoundError(f"tokenizer not found: {path}")
        tokenizer = Tokenizer.from_file(str(path))
        pad = tokenizer.token_to_id(PAD_TOKEN)
        if pad is None:
            raise ValueError(f"{path}: has no {PAD_TOKEN} token to pad with")
        ends = declared_end_tokens(directory) or [
            tokenizer.token_to_id(BASE_END_TOKEN if style == "base" else CHAT_END_TOKEN)]
        return cls(tokenizer, pad, tuple(ends))

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        """Text of `ids` up to the first end token."""
        end = next((i for i, token in enumerate(ids) if token in self.end_token_ids), len(ids))
        return self.tokenizer.decode(ids[:end], skip_special_tokens=False)
