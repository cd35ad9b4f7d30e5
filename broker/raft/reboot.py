"""After the machine crashed or lost power, a broker rebuilds its stores from what was fsynced in order.

LMDB runs with `sync=False` (the group commit fsyncs every `storage_sync_interval_ms`), so between fsyncs the
kernel may write a store's pages back in any order: after a power loss or an OS crash a store can hold a meta
page that points at pages which never reached the disk. A process crash (kill -9) cannot do that — the page
cache survives it — so only a restart on a new boot after an unclean stop is suspect.

`<data_dir>/boot.json` records the boot id (/proc/sys/kernel/random/boot_id) the broker last ran under and
whether it stopped cleanly. On a new boot after an unclean stop every store is discarded before the groups
open: each group restores its fsynced snapshot copy (if it has one) and replays its CRC-checked journal, so
its state is rebuilt from files whose every byte is verified or was fsynced before it was used.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

from raftbus.broker.storage.private import private_opener

log = logging.getLogger(__name__)

BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
RECORD_NAME = "boot.json"


def current_boot_id(path: str = BOOT_ID_PATH) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip() or None
    except OSError:
        return None


def _write_durably(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", opener=private_opener) as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class BootRecord:
    def __init__(self, data_dir, boot_id: str | None = None):
        self.path = Path(data_dir) / RECORD_NAME
        self.boot_id = boot_id if boot_id is not None else current_boot_id()

    def unclean_reboot(self) -> bool:
        """Whether the last run ended without a clean stop on an earlier boot (a power loss or an OS crash)."""
        try:
            previous = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return False
        if self.boot_id is None or previous.get("clean"):
            return False
        return previous.get("boot_id") != self.boot_id

    def starting(self) -> None:
        _write_durably(self.path, {"boot_id": self.boot_id, "clean": False})

    def stopped_cleanly(self) -> None:
        _write_durably(self.path, {"boot_id": self.boot_id, "clean": True})


def store_dirs(data_dir) -> list[Path]:
    """Every LMDB store of a broker: the metadata store and one per partition replica."""
    root = Path(data_dir)
    found = [root / "metadata" / "store"]
    partitions = root / "partitions"
    if partitions.is_dir():
        found += sorted(p / "store" for p in partitions.iterdir())
    return [path for path in found if path.exists()]


def discard_stores(data_dir) -> list[Path]:
    """Remove every store (each group rebuilds its own from its snapshot and journal); the ones removed."""
    removed = store_dirs(data_dir)
    for path in removed:
        shutil.rmtree(path)
    if removed:
        log.warning("restart after a power loss or OS crash: %d stores discarded, rebuilding each from its "
                    "snapshot and journal", len(removed), extra={"data_dir": str(data_dir)})
    return removed
