"""Connecting to a Ray cluster (``--ray-address``): the one place the project calls
``ray.init``, importing ``ray`` only when a cluster is asked for (docs/ray.md)."""

from __future__ import annotations

from typing import Any


class RayUnavailableError(ImportError):
    """``--ray-address`` was given but Ray is not installed (the ``ray`` extra)."""


def connect(address: str) -> Any:
    """Connect this process to a Ray cluster (once; later calls reuse the connection).

    Args:
        address: ``"local"`` (a Ray started for this process and stopped with it),
            ``"auto"`` (the cluster this machine's ``ray start`` joined) or ``HOST:PORT``
            (a head node's GCS address; ``ray://HOST:PORT`` for Ray Client).

    Returns:
        The ``ray`` module.

    Raises:
        RayUnavailableError: Ray is not installed (naming the extra).
        ValueError: an empty address.
    """
    if not isinstance(address, str) or not address.strip():
        raise ValueError(f"--ray-address must be local, auto or HOST:PORT, got {address!r}")
    try:
        import ray
    except ImportError as e:
        raise RayUnavailableError(
            f'--ray-address needs Ray ({e}); pip install "rally-env[ray]" on every node '
            "(docs/ray.md)"
        ) from None
    if not ray.is_initialized():
        kw: dict[str, Any] = {"log_to_driver": False, "configure_logging": False}
        if address == "local":
            ray.init(include_dashboard=False, **kw)
        else:
            ray.init(address=address, **kw)
    return ray
