"""A stage's settings as one typed object.

Why one object: a stage's settings are also its run's identity (a training checkpoint is resumed
only by the run with the same settings), so they must be one well-defined thing, checked when
it is made (a wrong type or a missing setting fails before any work, naming the setting), and
passed whole, instead of a dozen keyword arguments that the rule, its script and every caller
repeat. A stage's rule takes its params from the config section (`Settings.configured`), so a
new setting touches three places: the schema with its default, the class, the code using it.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass


def _accepts(expected, value) -> bool:
    if typing.get_origin(expected) in (typing.Union, types.UnionType):
        return any(_accepts(option, value) for option in typing.get_args(expected))
    if expected is type(None):
        return value is None
    if expected is bool:
        return isinstance(value, bool)
    if expected is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if expected is float:  # an integer is a fine float (`lr: 1` in a config)
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, expected)


@dataclass(frozen=True)
class Settings:
    """Base of a stage's settings: a frozen dataclass whose fields are checked against their
    annotations when it is made."""

    def __post_init__(self):
        hints = typing.get_type_hints(type(self))
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if not _accepts(hints[field.name], value):
                raise TypeError(f"{type(self).__name__}.{field.name} must be "
                                f"{_describe(hints[field.name])}, got {value!r}")

    @classmethod
    def from_params(cls, params: Mapping, **given):
        """The settings named by this class's fields, from a rule's `params` (its other keys
        are ignored), with `given` (wildcards, threads) taking precedence."""
        names = [field.name for field in dataclasses.fields(cls)]
        unknown = sorted(set(given) - set(names))
        if unknown:
            raise TypeError(f"{cls.__name__} has no setting {', '.join(unknown)}")
        missing = [name for name in names if name not in given and name not in params]
        if missing:
            raise KeyError(f"{cls.__name__}: params lack {', '.join(missing)}")
        return cls(**{name: given[name] if name in given else params[name] for name in names})

    @classmethod
    def configured(cls, section: Mapping) -> dict:
        """This class's settings that a config section holds (defaults filled in by the
        schema): the rule's params, so changing one reruns the stage and changing any other
        key of the section (its batch sizes, its strategies) reruns none of its runs. A new
        setting then touches three places: the schema, this class, the code that uses it."""
        return {field.name: section[field.name] for field in dataclasses.fields(cls)
                if field.name in section}

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def _describe(expected) -> str:
    if typing.get_origin(expected) in (typing.Union, types.UnionType):
        return " or ".join(_describe(option) for option in typing.get_args(expected))
    return "None" if expected is type(None) else expected.__name__


@dataclass(frozen=True)
class GenerationSettings(Settings):
    """What every generating job is told beside its stage's config section and its
    strategies: its batch size and device (wildcards), the device's dtype and decode mode
    (`compile`, `engine.compiled`), the model's prompt style, and its threads."""

    batch_size: int
    device: str
    dtype: str
    compile: str
    prompt_style: str
    threads: int
