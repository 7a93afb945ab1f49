"""Whether a Docker engine answers here (for the testcontainers tests, which skip with
the reason otherwise)."""

from __future__ import annotations

import functools


@functools.cache
def docker_unavailable() -> str | None:
    """Why no container can run here, or None; asks the engine once, with a short timeout."""
    try:
        import docker

        client = docker.from_env(timeout=5)
        try:
            client.ping()
        finally:
            client.close()
    except Exception as e:  # no socket, refused, or an engine that does not answer
        return f"no reachable Docker engine ({type(e).__name__}: {str(e)[:200]})"
    return None
