"""paramiko, imported once and cheaply: only this package's SSH modules touch it."""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any


class _OnFirstUse(types.ModuleType):
    """Stands in for a module until an attribute is asked for, then imports the real one."""

    def __getattr__(self, name: str) -> Any:
        if sys.modules.get(self.__name__) is self:
            del sys.modules[self.__name__]
        return getattr(importlib.import_module(self.__name__), name)


def load_paramiko() -> Any:
    """paramiko, without the ~0.15 s that its `import invoke` (for `Match exec` in
    ssh_config; it pulls in asyncio and unittest.mock) adds to every command: invoke is
    imported on first use instead, which a `Match exec` line still gets."""
    if "paramiko" not in sys.modules and "invoke" not in sys.modules:
        sys.modules["invoke"] = _OnFirstUse("invoke")
    import logging

    import paramiko

    # paramiko logs a failed handshake ("Exception (client): Error reading SSH protocol
    # banner", with a traceback) through logging's last-resort handler, onto the user's
    # terminal; the caller turns the same failure into gpujob's one line.
    logging.getLogger("paramiko").addHandler(logging.NullHandler())
    logging.getLogger("paramiko").propagate = False
    return paramiko
