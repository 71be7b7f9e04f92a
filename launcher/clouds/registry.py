"""Provider names to provider classes; the one place `up` and `down` learn what clouds exist."""

from __future__ import annotations

import os

from launcher.clouds.base import Provider
from launcher.errors import UsageError

# name: (module, class, variable holding the API key)
CLOUDS = {
    "lambda": ("launcher.clouds.lambda_cloud", "LambdaCloud", "LAMBDA_API_KEY"),
    "vast": ("launcher.clouds.vast", "Vast", "VAST_API_KEY"),
}


def get_provider(name: str) -> Provider:
    """Imported on demand: `requests` and `tenacity` load only when a cloud is used."""
    import importlib

    if name not in CLOUDS:
        raise UsageError(f"unknown provider {name!r}", f"known: {', '.join(CLOUDS)}")
    module, cls, _ = CLOUDS[name]
    return getattr(importlib.import_module(module), cls)()


def configured() -> list[str]:
    """Clouds whose API key is set: the ones `down --all` can ask."""
    return [name for name, (_, _, variable) in CLOUDS.items() if os.environ.get(variable)]


def runtime_of(name: str) -> str:
    """How jobs run on a cloud's hosts ("docker" or "bare"), without an API key."""
    return str(trait(name, "runtime", "docker"))


def provider_class(name: str) -> type[Provider]:
    """A cloud's class, without an API key: its declared traits and pure rules."""
    import importlib

    module, cls, _ = CLOUDS[name]
    found: type[Provider] = getattr(importlib.import_module(module), cls)
    return found


def trait(name: str, attribute: str, default: object) -> object:
    """A cloud's class attribute (runtime, can_stop, ...), read without an API key: what
    `up` may refuse before the first cloud call."""
    import importlib

    if name not in CLOUDS:
        return default
    module, cls, _ = CLOUDS[name]
    return getattr(getattr(importlib.import_module(module), cls), attribute, default)
