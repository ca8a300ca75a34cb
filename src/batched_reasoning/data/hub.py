"""Fetch models and data sets from the Hugging Face Hub into directories the workflow owns.

Downloads go through `huggingface_hub` and its normal cache, so `HF_HOME`, `HF_HUB_CACHE` and
`HF_HUB_OFFLINE` work as everywhere else (huggingface_hub reads them itself, at import time),
and a cache filled on another machine can be copied to an offline cluster. The cached files are
then linked (not copied) into a plain directory, so the rest of the workflow never needs to know
about the cache layout and a multi-GB checkpoint costs no extra disk space.
"""

from __future__ import annotations

import fnmatch
import json
import os
import secrets
import shutil
import tempfile
from pathlib import Path

from batched_reasoning.core.io import atomic_path

MODEL_FILES = [
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "*.safetensors",
    "model.safetensors.index.json",
]

REQUIRED_MODEL_FILES = ("config.json", "tokenizer.json")


class HubUnavailableError(RuntimeError):
    """The Hub cannot be reached (or HF_HUB_OFFLINE is set) and the files are not in the cache."""


class IncompleteModelError(RuntimeError):
    """A downloaded or cached model snapshot lacks a file the workflow needs."""


def _unavailable_errors() -> tuple[type[BaseException], ...]:
    """Exception types meaning "could not reach the Hub and not in the cache".

    huggingface_hub (checked with 2.4) turns both `HF_HUB_OFFLINE=1` (OfflineModeIsEnabled) and
    connection failures (httpx ConnectError/TimeoutException) into `LocalEntryNotFoundError` when the
    cache cannot answer, chaining the original error as `__cause__`; `IncompleteSnapshotError` is a
    subclass. A proxy error escapes unwrapped, and older releases raised `requests` errors directly,
    so the transport errors of whichever HTTP client is installed are caught too.
    """
    from huggingface_hub.errors import LocalEntryNotFoundError, OfflineModeIsEnabled

    errors: list[type[BaseException]] = [
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        ConnectionError,
        TimeoutError,
    ]
    for module, names in (
        ("httpx2", ("TransportError",)),
        ("httpx", ("TransportError",)),
        ("requests", ("ConnectionError", "Timeout")),
    ):
        try:
            mod = __import__(module)
        except ImportError:
            continue
        errors.extend(getattr(mod, name) for name in names if hasattr(mod, name))
    return tuple(errors)


def _hub_state() -> tuple[str, bool]:
    """The cache directory and offline flag huggingface_hub is actually using in this process."""
    from huggingface_hub import constants

    offline = constants.is_offline_mode() if hasattr(constants, "is_offline_mode") else constants.HF_HUB_OFFLINE
    return constants.HF_HUB_CACHE, bool(offline)


def _unavailable(
    repo_id: str, revision: str | None, what: str, error: BaseException, repo_type: str, filename: str = ""
) -> HubUnavailableError:
    """Build an error that says what failed, where we looked, and the three ways out."""
    cache_dir, offline = _hub_state()
    rev = revision or "main"
    root = error.__cause__ or error  # huggingface_hub wraps the transport error
    reason = (
        "HF_HUB_OFFLINE is set"
        if offline
        else f"the Hugging Face Hub could not be reached ({type(root).__name__}: {root})"
    )
    file_arg = f" {filename}" if filename else ""
    type_flag = " --repo-type dataset" if repo_type == "dataset" else ""
    rev_flag = f" --revision {revision}" if revision else ""
    if repo_type == "dataset":
        local = (
            "put a copy of the file anywhere and point the config at it "
            "(`datasets: <name>: {source: local, path: FILE}`), or use the offline default data set `arith`"
        )
    else:
        local = (
            "put the model files (config.json, tokenizer.json, *.safetensors) in a local directory and "
            "point the config at it (`models: <name>: {source: local, path: DIR}`), or use the offline default "
            "model `toy`"
        )
    return HubUnavailableError(
        f"cannot fetch {what} of {repo_type} repo {repo_id!r} (revision {rev!r}): {reason}, and it is "
        f"not in the Hugging Face cache at {cache_dir}.\n"
        f"To fix: run `hf download {repo_id}{file_arg}{type_flag}{rev_flag}` (older huggingface_hub: "
        f"`huggingface-cli download ...`) once on a machine with internet, then copy its cache "
        f"(~/.cache/huggingface/hub there) to {cache_dir} or set HF_HOME / HF_HUB_CACHE to a copy of it; "
        f"or {local}.\n"
        f"huggingface_hub said: {error}"
    )


def _matches(relative: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatch(relative, pattern) for pattern in patterns)


def _link_or_copy(source: Path, target: Path) -> None:
    """Hard-link a cached blob (no copy, survives cache cleanup); symlink, then copy, as fallbacks."""
    source = source.resolve()  # snapshot entries are symlinks into blobs/
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
        return
    except OSError:  # other filesystem, or links not permitted
        pass
    try:
        os.symlink(source, target)
    except OSError:
        shutil.copy2(source, target)


def _replace_dir(staging: Path, target: Path) -> None:
    """Move `staging` to `target`; an existing `target` is swapped out, never left half-replaced."""
    if target.exists() or target.is_symlink():
        old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
        os.replace(target, old / target.name)
        os.replace(staging, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(staging, target)


def _validate_model_dir(directory: Path, repo_id: str, revision: str | None, snapshot: str) -> None:
    """Refuse a model without config, tokenizer or weights (e.g. an incomplete offline cache)."""
    def missing(name: str) -> IncompleteModelError:
        return IncompleteModelError(
            f"model repo {repo_id!r} (revision {revision or 'main'!r}) is missing {name} "
            f"(looked in snapshot {snapshot}); the cached snapshot may be incomplete — download it "
            f"again with network access, or point the config at a complete local directory"
        )

    for name in REQUIRED_MODEL_FILES:
        if not (directory / name).is_file():
            raise missing(name)
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        for shard in sorted(set(json.loads(index.read_text())["weight_map"].values())):
            if not (directory / shard).is_file():
                raise missing(shard)
    elif not any(directory.rglob("*.safetensors")):
        raise missing("a *.safetensors weights file")


def download_model(repo_id: str, local_dir: str | os.PathLike, revision: str | None = None) -> Path:
    """Download (or take from the HF cache) a model and materialise it as the plain directory `local_dir`.

    Only `MODEL_FILES` are fetched and linked, so READMEs, PyTorch .bin duplicates, etc. cost
    nothing. The directory is assembled beside `local_dir` and renamed into place, so an
    interrupted run never leaves a half-populated model directory that a later rule would trust.
    """
    from huggingface_hub import snapshot_download

    local_dir = Path(local_dir)
    try:
        snapshot = snapshot_download(repo_id, revision=revision, allow_patterns=MODEL_FILES)
    except _unavailable_errors() as error:
        raise _unavailable(repo_id, revision, "the model files", error, "model") from error

    local_dir.parent.mkdir(parents=True, exist_ok=True)
    # Not mkdtemp: its owner-only mode would hide the model from the user's group.
    staging = local_dir.parent / f".{local_dir.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    staging.mkdir()
    try:
        # Offline, snapshot_download returns the whole cached snapshot unfiltered: filter here.
        for source in sorted(Path(snapshot).rglob("*")):
            relative = source.relative_to(snapshot).as_posix()
            if source.is_file() and _matches(relative, MODEL_FILES):
                _link_or_copy(source, staging / relative)
        _validate_model_dir(staging, repo_id, revision, snapshot)
        _replace_dir(staging, local_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return local_dir


def download_dataset_file(
    repo_id: str, filename: str, local_path: str | os.PathLike, revision: str | None = None
) -> Path:
    """Download (or take from the HF cache) one file of a data-set repo and copy it to `local_path`.

    Data files are small and the workflow may rewrite its copy, so this copies rather than links;
    the copy is atomic (temp file + rename).
    """
    from huggingface_hub import hf_hub_download

    local_path = Path(local_path)
    try:
        cached = hf_hub_download(repo_id, filename, repo_type="dataset", revision=revision)
    except _unavailable_errors() as error:
        raise _unavailable(repo_id, revision, f"file {filename!r}", error, "dataset", filename) from error
    with atomic_path(local_path) as tmp:
        shutil.copyfile(Path(cached).resolve(), tmp)
    return local_path
