"""The Ray runtime of a sweep: a private local Ray (its files under the system temp dir, its
logs quiet), or an existing cluster reached by address."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import tempfile
from typing import Any

from archsearch.errors import UserError

__all__ = ["check_address", "contain_ray", "ray_session"]


def contain_ray(verbose: bool) -> None:
    """Keep Ray's files and tokens out of the home directory and its logs quiet."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    os.environ.setdefault("RAY_DEDUP_LOGS", "1")
    if not verbose:
        for name in ("ray", "ray.tune", "ray.train", "ray.air", "ray.data"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)


def ray_temp_dir() -> str:
    """Ray's session files under the system temp dir (AF_UNIX socket paths must stay short)."""
    return tempfile.mkdtemp(prefix="archsearch-ray-")


def check_address(address: str) -> None:
    if address in ("auto", "local") or address.startswith("ray://"):
        return
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=3):
            pass
    except (OSError, ValueError):
        raise UserError(f"cannot reach a Ray cluster at {address!r}", key="ray.address") from None


@contextlib.contextmanager
def ray_session(address: str | None, num_cpus: int | None, verbose: bool):
    import ray

    if ray.is_initialized():  # e.g. the caller manages Ray
        yield
        return
    kwargs: dict[str, Any] = {
        "include_dashboard": False,
        "log_to_driver": verbose,
        "logging_level": logging.INFO if verbose else logging.ERROR,
    }
    # settings for our own code (ARCHSEARCH_*) reach the workers of an existing cluster too
    env_vars = {k: v for k, v in os.environ.items() if k.startswith("ARCHSEARCH_")}
    if env_vars:
        kwargs["runtime_env"] = {"env_vars": env_vars}
    temp_dir = None
    try:
        if address:
            check_address(address)
            ray.init(address=address, **kwargs)
        else:
            temp_dir = ray_temp_dir()
            ray.init(num_cpus=num_cpus or os.cpu_count(), _temp_dir=temp_dir, **kwargs)
    except ConnectionError as err:
        raise UserError(
            f"cannot reach a Ray cluster at {address!r}: {str(err).splitlines()[0]}",
            key="ray.address",
        ) from None
    try:
        yield
    finally:
        ray.shutdown()
        if temp_dir:  # Ray leaves its session files behind
            import shutil

            shutil.rmtree(temp_dir, ignore_errors=True)
