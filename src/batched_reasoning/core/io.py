"""Atomic file writes: an interrupted job must never leave a half-written output behind."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
from pathlib import Path
from typing import Iterable, Iterator


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it over `path` only if the block succeeds.

    The file gets the user's umask like any other (a cluster group can read results), not the
    owner-only mode of `tempfile`, nor that of a writer that makes its own file (safetensors).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
    mode = tmp.stat().st_mode
    try:
        yield tmp
        tmp.chmod(mode)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty folder beside `path`; it replaces `path` only if the block succeeds, so a
    killed job never leaves a folder that looks complete but is not."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    try:
        yield staging
        backup = path.with_name(f".{path.name}.old")
        shutil.rmtree(backup, ignore_errors=True)
        if path.exists():
            path.rename(backup)
        staging.rename(path)
        shutil.rmtree(backup, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def write_json(obj, path: str | os.PathLike) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def read_json(path: str | os.PathLike):
    return json.loads(Path(path).read_text())


def write_jsonl(records: Iterable[dict], path: str | os.PathLike) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "w") as f:
            for record in records:
                f.write(json.dumps(record, ensure_ascii=False) + "\n")


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


@contextlib.contextmanager
def log_to(path: str | os.PathLike, note: str | None = None) -> Iterator[None]:
    """Send a job's stdout and stderr (progress bars, warnings, tracebacks) to its log file;
    `note` is added to any error the job raises (where its inputs came from: a file's error
    names the file, not the config entry that named it).

    The redirection is of the file descriptors too, so processes the job starts (the ranks of
    a data-parallel run) and native libraries write to the log as well.
    """
    import sys
    import traceback

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", buffering=1) as log:
        sys.stdout.flush()
        sys.stderr.flush()
        saved = sys.stdout, sys.stderr
        saved_fds = os.dup(1), os.dup(2)
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        sys.stdout = sys.stderr = log
        try:
            yield
        except BaseException as error:
            if note is not None:
                error.add_note(note)
            traceback.print_exc(file=log)
            raise
        finally:
            sys.stdout, sys.stderr = saved
            for fd, copy in zip((1, 2), saved_fds):
                os.dup2(copy, fd)
                os.close(copy)
