"""Models named on the Hugging Face Hub: ``hf://OWNER/REPO/FILE`` (a file of a model repository,
e.g. a network-snapshot pickle or a gankit checkpoint) or ``hf://OWNER/REPO`` (the whole
repository: a folder written by ``gankit export``), optionally ``hf://OWNER/REPO@REVISION/FILE``.

They resolve through huggingface_hub's cache (``hf_hub_download`` / ``snapshot_download``): with
``HF_HUB_OFFLINE=1`` a filled cache answers without the network, and a file missing from it is
one line saying so. Everything else names a local path and is returned as it is.
"""

from __future__ import annotations

import re
from pathlib import Path

from gan_kit.base.errors import CheckpointError

__all__ = ["HUB_PREFIX", "resolve_source", "parse_hub"]

HUB_PREFIX = "hf://"

_HUB = re.compile(r"hf://(?P<owner>[\w.-]+)/(?P<repo>[\w.-]+)(?:@(?P<rev>[\w./-]+?))?(?:/(?P<file>.+))?")


def parse_hub(value: str) -> tuple[str, str | None, str | None]:
    """``(repo_id, revision, filename)`` of an ``hf://`` name (revision and filename None when
    not given). Raises ``CheckpointError`` (one line with the form to use) for a malformed one."""
    m = _HUB.fullmatch(value)
    if m is None:
        raise CheckpointError(f"{value}: not a Hub name; write hf://OWNER/REPO/FILE (a file of a model repository) "
                              f"or hf://OWNER/REPO (a gankit export)")
    return f"{m['owner']}/{m['repo']}", m["rev"], m["file"]


def _is_export(folder: Path) -> bool:
    """True when ``folder`` holds a config.json that ``gankit export`` wrote."""
    import json

    try:
        return json.loads((folder / "config.json").read_text(encoding="utf-8")).get("format") == "gankit-export"
    except (OSError, ValueError, AttributeError):
        return False


def resolve_source(value: str | Path) -> Path:
    """The local path of what ``value`` names: an ``hf://`` name downloaded to (or found in)
    huggingface_hub's cache, or ``value`` itself as a path. Raises ``CheckpointError`` (one line)
    when huggingface_hub is not installed, or the Hub (or, offline, the cache) has no such
    repository or file."""
    text = str(value)
    if not text.startswith(HUB_PREFIX):
        return Path(value)
    repo_id, revision, filename = parse_hub(text)
    try:
        import huggingface_hub
        from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError
    except ImportError:
        raise CheckpointError(f"{text}: reading from the Hugging Face Hub needs huggingface_hub: "
                              f"pip install 'gankit[hub]'") from None
    try:
        if filename is None:
            folder = Path(huggingface_hub.snapshot_download(repo_id=repo_id, revision=revision))
            if not _is_export(folder):
                raise CheckpointError(f"{text}: the repository is not a folder gankit export wrote (its config.json "
                                      f"has no format = 'gankit-export'); name a model file in it, "
                                      f"hf://{repo_id}/FILE")
            return folder
        return Path(huggingface_hub.hf_hub_download(repo_id=repo_id, filename=filename, revision=revision))
    except LocalEntryNotFoundError:
        raise CheckpointError(f"{text}: not in huggingface_hub's cache and the Hub cannot be reached (offline: "
                              f"HF_HUB_OFFLINE is set or there is no network); download it once online") from None
    except (HfHubHTTPError, OSError, ValueError) as e:
        first = " ".join(str(e).split()) or type(e).__name__
        raise CheckpointError(f"{text}: the Hub has no such model file ({type(e).__name__}: {first})") from None
