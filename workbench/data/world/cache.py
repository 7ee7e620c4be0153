"""``load_world``: a world from the cache (built once under a file lock, renamed into place), or built now."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from workbench.data.world.builder import build_world
from workbench.data.world.config import WorldConfig, default_world_config
from workbench.data.world.model import World
from workbench.data.world.schema import (
    WORLD_FORMAT,
)
from workbench.util.io import file_lock, stable_hash
from workbench.util.paths import cache_dir


def _cache_key(config: WorldConfig) -> str:
    return stable_hash({"config": config.to_dict(), "format": WORLD_FORMAT})


def load_world(config: WorldConfig | None = None, cache: bool = True) -> World:
    """The world of ``config``, from ``cache_dir()/world/<key>`` when built before.

    A missing entry is built under a file lock, saved into a temp folder and renamed into
    place, so a reader never sees a half-written world.
    """
    config = config or default_world_config()
    if not cache:
        return build_world(config)
    root = cache_dir() / "world"
    key = _cache_key(config)
    final = root / key
    if (final / "world.json").exists():
        return World.load(final)
    with file_lock(root / f".{key}.lock"):
        if (final / "world.json").exists():  # built by another process while we waited
            return World.load(final)
        world = build_world(config)
        tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".{key}.tmp-"))
        try:
            world.save(tmp)
            if final.exists():  # a folder without world.json: left over, never complete
                shutil.rmtree(final)
            os.replace(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return world
