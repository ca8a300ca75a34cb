"""batched_reasoning.hub against a real, pre-populated Hugging Face cache (no mocks).

huggingface_hub reads HF_HUB_CACHE / HF_HUB_OFFLINE when it is imported, so every download runs in
a fresh `python -c` subprocess with the environment set, exactly as a workflow job would.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

COMMIT_A = "a" * 8 + "0123456789abcdef0123456789abcdef"
COMMIT_B = "b" * 8 + "0123456789abcdef0123456789abcdef"


def cache_repo(cache: Path, repo_type: str, repo_id: str, commit: str, files: dict[str, bytes], refs=("main",)) -> Path:
    """Lay out a repo the way huggingface_hub does: blobs/<hash>, snapshots/<commit>/<file> -> blob, refs/<ref>."""
    storage = cache / "--".join([f"{repo_type}s", *repo_id.split("/")])
    for name, data in files.items():
        blob = storage / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = storage / "snapshots" / commit / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    for ref in refs:
        (storage / "refs").mkdir(parents=True, exist_ok=True)
        (storage / "refs" / ref).write_text(commit)  # no newline: huggingface_hub does not strip it
    return storage


def safetensors_bytes(tmp_path: Path, value: float) -> bytes:
    path = tmp_path / f"weights-{value}.safetensors"
    save_file({"embed.weight": torch.full((3, 2), value)}, str(path))
    return path.read_bytes()


def model_files(tmp_path: Path, tag: str, value: float = 1.0) -> dict[str, bytes]:
    return {
        "config.json": json.dumps({"model_type": "qwen3", "tag": tag}).encode(),
        "tokenizer.json": b'{"version": "1.0"}',
        "generation_config.json": b"{}",
        "model.safetensors": safetensors_bytes(tmp_path, value),
        "README.md": b"# not wanted\n",
        "pytorch_model.bin": b"not wanted either",
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_hub(call: str, cache: Path, offline: bool = True, endpoint: str | None = None,
            umask: int = -1) -> dict:
    """Run `call` (an expression using download_model/download_dataset_file) in a fresh interpreter."""
    code = textwrap.dedent(f"""
        import json
        from batched_reasoning.data.hub import download_model, download_dataset_file
        try:
            print(json.dumps({{"ok": str({call})}}))
        except Exception as e:
            print(json.dumps({{"error": type(e).__name__, "message": str(e)}}))
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    env |= {
        "HF_HOME": str(cache.parent / "hf_home"),
        "HF_HUB_CACHE": str(cache),
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    if endpoint:
        env["HF_ENDPOINT"] = endpoint
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=60, umask=umask)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture
def cache(tmp_path):
    cache = tmp_path / "hub"
    cache.mkdir()
    return cache


def test_download_model_from_offline_cache(tmp_path, cache):
    cache_repo(cache, "model", "org/name", COMMIT_A, model_files(tmp_path, "A"))
    out = tmp_path / "resources" / "models" / "m"
    result = run_hub(f"download_model('org/name', {str(out)!r})", cache)
    assert result == {"ok": str(out)}
    assert out.is_dir() and not out.is_symlink()
    assert sorted(p.name for p in out.iterdir()) == [
        "config.json", "generation_config.json", "model.safetensors", "tokenizer.json"
    ]
    assert json.loads((out / "config.json").read_text())["tag"] == "A"
    assert torch.equal(load_file(out / "model.safetensors")["embed.weight"], torch.ones(3, 2))
    assert os.listdir(out.parent) == ["m"]  # no staging directory left behind


def test_download_model_replaces_existing_dir(tmp_path, cache):
    cache_repo(cache, "model", "org/name", COMMIT_A, model_files(tmp_path, "A"))
    out = tmp_path / "m"
    out.mkdir()
    (out / "stale.txt").write_text("old")
    assert run_hub(f"download_model('org/name', {str(out)!r})", cache) == {"ok": str(out)}
    assert not (out / "stale.txt").exists() and (out / "config.json").is_file()
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".m.")]


def test_download_model_pinned_revision(tmp_path, cache):
    cache_repo(cache, "model", "org/name", COMMIT_A, model_files(tmp_path, "A", 1.0))
    cache_repo(cache, "model", "org/name", COMMIT_B, model_files(tmp_path, "B", 2.0), refs=("v2",))
    for revision, tag, value in [("v2", "B", 2.0), (COMMIT_A, "A", 1.0), (None, "A", 1.0)]:
        out = tmp_path / f"m-{tag}-{revision is None}"
        result = run_hub(f"download_model('org/name', {str(out)!r}, revision={revision!r})", cache)
        assert result == {"ok": str(out)}, revision
        assert json.loads((out / "config.json").read_text())["tag"] == tag
        assert load_file(out / "model.safetensors")["embed.weight"][0, 0].item() == value


def test_download_model_not_cached_offline(tmp_path, cache):
    out = tmp_path / "m"
    result = run_hub(f"download_model('org/absent', {str(out)!r}, revision='v9')", cache)
    assert result["error"] == "HubUnavailableError"
    message = result["message"]
    for needle in ["'org/absent'", "'v9'", "HF_HUB_OFFLINE", str(cache), "hf download org/absent",
                   "HF_HOME", "source: local, path: DIR", "`toy`"]:
        assert needle in message, needle
    assert not out.exists()


def test_download_model_unknown_revision_offline(tmp_path, cache):
    cache_repo(cache, "model", "org/name", COMMIT_A, model_files(tmp_path, "A"))
    result = run_hub(f"download_model('org/name', {str(tmp_path / 'm')!r}, revision='nope')", cache)
    assert result["error"] == "HubUnavailableError" and "'nope'" in result["message"]


def test_download_model_hub_unreachable(tmp_path, cache):
    """Not offline, but nothing listens at the endpoint: cached repos still work, others fail clearly."""
    cache_repo(cache, "model", "org/name", COMMIT_A, model_files(tmp_path, "A"))
    endpoint = f"http://127.0.0.1:{free_port()}"
    out = tmp_path / "m"
    assert run_hub(f"download_model('org/name', {str(out)!r})", cache, offline=False, endpoint=endpoint) == {
        "ok": str(out)
    }
    result = run_hub(f"download_model('org/absent', {str(tmp_path / 'x')!r})", cache, offline=False, endpoint=endpoint)
    assert result["error"] == "HubUnavailableError"
    assert "could not be reached (Connect" in result["message"] and "'org/absent'" in result["message"]


def test_download_model_incomplete_snapshot(tmp_path, cache):
    files = model_files(tmp_path, "A")
    del files["model.safetensors"]
    cache_repo(cache, "model", "org/name", COMMIT_A, files)
    out = tmp_path / "out" / "m"
    result = run_hub(f"download_model('org/name', {str(out)!r})", cache)
    assert result["error"] == "IncompleteModelError"
    assert "'org/name'" in result["message"] and ".safetensors" in result["message"]
    assert os.listdir(out.parent) == []  # neither the model dir nor its staging dir


def test_download_model_sharded_index_checked(tmp_path, cache):
    files = model_files(tmp_path, "A")
    files["model.safetensors.index.json"] = json.dumps(
        {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    ).encode()
    files["model-00001-of-00002.safetensors"] = files.pop("model.safetensors")
    cache_repo(cache, "model", "org/name", COMMIT_A, files)
    result = run_hub(f"download_model('org/name', {str(tmp_path / 'm')!r})", cache)
    assert result["error"] == "IncompleteModelError"
    assert "model-00002-of-00002.safetensors" in result["message"]


def test_download_dataset_file(tmp_path, cache):
    cache_repo(cache, "dataset", "org/data", COMMIT_A, {"test.jsonl": b'{"q": 1}\n', "README.md": b"x"})
    cache_repo(cache, "dataset", "org/data", COMMIT_B, {"test.jsonl": b'{"q": 2}\n'}, refs=("v2",))
    out = tmp_path / "data" / "test.jsonl"
    assert run_hub(f"download_dataset_file('org/data', 'test.jsonl', {str(out)!r})", cache) == {"ok": str(out)}
    assert out.read_bytes() == b'{"q": 1}\n' and not out.is_symlink()
    assert os.listdir(out.parent) == ["test.jsonl"]
    pinned = tmp_path / "data" / "pinned.jsonl"
    run_hub(f"download_dataset_file('org/data', 'test.jsonl', {str(pinned)!r}, revision='v2')", cache)
    assert pinned.read_bytes() == b'{"q": 2}\n'


def test_downloads_take_the_users_umask(tmp_path, cache):
    """A group that shares resources/ (umask 002) can write what one member downloaded."""
    cache_repo(cache, "model", "org/name", COMMIT_A, model_files(tmp_path, "A"))
    cache_repo(cache, "dataset", "org/data", COMMIT_A, {"test.jsonl": b"{}\n"})
    model, data = tmp_path / "shared" / "m", tmp_path / "shared" / "test.jsonl"
    run_hub(f"download_model('org/name', {str(model)!r})", cache, umask=0o002)
    run_hub(f"download_dataset_file('org/data', 'test.jsonl', {str(data)!r})", cache, umask=0o002)
    assert stat.S_IMODE(model.stat().st_mode) == 0o775
    assert stat.S_IMODE(data.stat().st_mode) == 0o664


def test_download_dataset_file_not_cached(tmp_path, cache):
    cache_repo(cache, "dataset", "org/data", COMMIT_A, {"test.jsonl": b"{}\n"})
    for repo, filename in [("org/data", "train.jsonl"), ("org/absent", "test.jsonl")]:
        out = tmp_path / "d.jsonl"
        result = run_hub(f"download_dataset_file({repo!r}, {filename!r}, {str(out)!r})", cache)
        assert result["error"] == "HubUnavailableError", result
        for needle in [repr(repo), repr(filename), "HF_HUB_OFFLINE", f"hf download {repo} {filename} --repo-type dataset", str(cache),
                       "source: local, path: FILE", "`arith`"]:
            assert needle in result["message"], needle
        assert not out.exists()
