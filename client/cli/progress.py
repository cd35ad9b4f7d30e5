"""A progress bar for long CLI operations (reassign, decommission, backup, restore): tqdm on standard error,
shown on a terminal only."""
from __future__ import annotations

import sys

from tqdm import tqdm


class ProgressBar:
    """A tqdm bar on stderr, shown on a terminal only."""

    def __init__(self, what: str, unit: str):
        self.what, self.unit = what, unit
        self.bar: tqdm | None = None

    def show(self, done: int, total: int, note: str) -> None:
        if self.bar is None:
            self.bar = tqdm(total=total, desc=self.what, unit=self.unit, file=sys.stderr, disable=None)
        self.bar.set_postfix_str(note)
        self.bar.update(done - self.bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
