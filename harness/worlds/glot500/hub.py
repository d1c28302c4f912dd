"""Local copies of the `glot500` world's Hub inputs: the user's ``path`` first, else the snapshot of the pinned
revision in the Hub cache; nothing here downloads anything. Also the file helpers the build uses (sha256, sizes,
links)."""


import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


# -- finding local copies of Hub repositories --------------------------------------------------------------
@dataclass
class HubRef:
    """A Hub repository pinned at a revision, optionally replaced by a local copy (``path``)."""

    hub_id: str
    revision: str = "main"
    repo_type: str = "model"  # model | dataset
    path: Path | None = None

    @property
    def label(self) -> str:
        rev = self.revision[:12] if re.fullmatch(r"[0-9a-f]{40}", self.revision) else self.revision
        return f"{self.hub_id}@{rev}" + (" (dataset)" if self.repo_type == "dataset" else "")


def hub_cache_dir() -> Path:
    """The Hub cache folder, honouring ``HF_HUB_CACHE`` and ``HF_HOME`` as huggingface_hub does."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "huggingface" / "hub"


def repo_cache_folder(ref: HubRef) -> Path:
    return hub_cache_dir() / f"{ref.repo_type}s--{ref.hub_id.replace('/', '--')}"


def cached_snapshot(ref: HubRef) -> Path | None:
    """The snapshot folder of ``ref.revision`` in the Hub cache (a commit hash, or a branch/tag via ``refs/``)."""
    folder = repo_cache_folder(ref)
    if re.fullmatch(r"[0-9a-f]{40}", ref.revision):
        commit = ref.revision
    else:
        refs = folder / "refs" / ref.revision
        if not refs.is_file():
            return None
        commit = refs.read_text().strip()
    snap = folder / "snapshots" / commit
    return snap if snap.is_dir() else None


def resolve_repo(ref: HubRef) -> Path | None:
    """The local folder for ``ref``: its ``path`` when given (it must exist), else the cached snapshot."""
    if ref.path is not None:
        return ref.path if ref.path.exists() else None
    return cached_snapshot(ref)


def snapshot_commit(folder: Path) -> str | None:
    """The commit of a Hub-cache snapshot folder (its name), None for other folders."""
    if folder.parent.name == "snapshots" and re.fullmatch(r"[0-9a-f]{40}", folder.name):
        return folder.name
    return None


def hf_download_command(ref: HubRef, files: Sequence[str] = (), include: Sequence[str] = ()) -> str:
    """The exact command that puts ``ref`` (or the given files / patterns of it) into the Hub cache."""
    parts = ["hf download", ref.hub_id, *files]
    if ref.repo_type != "model":
        parts.append(f"--repo-type {ref.repo_type}")
    if ref.revision != "main":
        parts.append(f"--revision {ref.revision}")
    parts += [f"--include '{p}'" for p in include]
    return " ".join(parts)


def file_sha256(path: Path) -> str:
    """sha256 of a file; for a Hub-cache symlink into ``blobs/`` named by its sha256 (LFS files), that name."""
    from harness.core.hashing import sha256_file

    real = path.resolve()
    if path.is_symlink() and real.parent.name == "blobs" and re.fullmatch(r"[0-9a-f]{64}", real.name):
        return real.name
    return sha256_file(real)


def folder_size(path: Path) -> int:
    if path.is_file():
        return path.resolve().stat().st_size
    return sum(p.resolve().stat().st_size for p in path.rglob("*") if p.is_file())


def human_size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1024 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"



def link_or_copy(src: Path, dst: Path) -> None:
    """Hard-link ``src`` (resolved) to ``dst``; copy when linking is not possible (other file system)."""
    import shutil

    real = src.resolve()
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(real, dst)
    except OSError:
        shutil.copyfile(real, dst)
