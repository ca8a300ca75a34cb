"""The commands that README.md and docs/*.md tell a reader to run, and the command lines of CI.

A command is a line of a fenced `bash` block (continuation lines joined, comments dropped) or an
inline code span outside fences that starts with a program a reader runs. Whitespace is
normalised, so a command is compared as the words it runs.
"""

import re
import shlex
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
PROGRAMS = {"snakemake", "python", "python3", "pip", "squeue", "sacct", "sinfo"}  # and .ci/*
FENCE = re.compile(r"^( *)```(\w*)\n(.*?)^\1```", re.S | re.M)
# Words in a documented command that stand for the reader's own value.
PLACEHOLDERS = {"DIR", "FILE…"}
CI_SCRIPTS = [REPO / ".ci" / name for name in ("run", "user-setup.sh", "user-tests.sh")]
OPERATORS = {"&&", "||", ";", "|", "(", ")", "{", "}"}


def normalise(command: str) -> str:
    return " ".join(command.split())


def fenced_commands(text: str) -> list[str]:
    commands = []
    for block in FENCE.finditer(text):
        if block.group(2) not in ("bash", "sh", "console"):
            continue
        for line in block.group(3).replace("\\\n", " ").splitlines():
            line = re.sub(r"(^|\s)#.*", "", line)
            if line.strip():
                commands.append(normalise(line))
    return commands


def inline_commands(text: str) -> list[str]:
    prose = FENCE.sub("", text)
    spans = re.findall(r"(?<!`)`([^`\n]+)`(?!`)", prose)
    return [normalise(span) for span in spans
            if span.split()[0] in PROGRAMS or span.startswith(".ci/")]


def documented_commands() -> dict[str, list[str]]:
    """Each documented command and the documents (relative paths) that give it."""
    found: dict[str, list[str]] = {}
    for document in DOCUMENTS:
        text = document.read_text()
        for command in fenced_commands(text) + inline_commands(text):
            where = found.setdefault(command, [])
            name = str(document.relative_to(REPO))
            if name not in where:
                where.append(name)
    return found


def simple_commands(line: str) -> list[list[str]]:
    """The simple commands of a shell line as word lists: split at `&&`, `||`, `;`, `|` and
    braces, without redirections and leading variable assignments."""
    line = re.sub(r"\s\d*(>>?|<)(&\d+|\s*\S+)", " ", line)
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError:  # a quote that opens or closes on another line
        return []
    commands, current = [], []
    for word in words + [";"]:
        if word in OPERATORS:
            while current and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", current[0]):
                current.pop(0)
            if current:
                commands.append(current)
            current = []
        else:
            current.append(word)
    return commands


def matches(documented: list[str], run: list[str]) -> bool:
    return len(documented) == len(run) and all(
        d == r or d in PLACEHOLDERS for d, r in zip(documented, run))


def ci_commands() -> list[list[str]]:
    """Every simple command of CI's scripts, line by line (continuations joined)."""
    commands = []
    text = "\n".join(script.read_text() for script in CI_SCRIPTS)
    for line in text.replace("\\\n", " ").splitlines():
        line = re.sub(r"(^|\s)#.*", "", line).strip()
        if line:
            commands += simple_commands(line)
    return commands


def run_by_ci(command: str, ci_commands: list[list[str]]) -> list[str]:
    """The parts of `command` that CI's script does not run (empty: CI runs all of it)."""
    return [" ".join(part) for part in simple_commands(command)
            if not any(matches(part, run) for run in ci_commands)]
