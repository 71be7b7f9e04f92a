"""The recovery controller's warm-up names modules that exist: it skips a missing one
quietly (the recovery then says what is wrong), so a renamed module would only make
every recovery slower again."""

from __future__ import annotations

import importlib.util

from launcher.supervise.recover_warm import RECOVERY_MODULES


def test_every_module_the_warm_up_loads_exists() -> None:
    missing = [name for name in RECOVERY_MODULES if importlib.util.find_spec(name) is None]
    assert missing == []
