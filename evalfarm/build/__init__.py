"""Content-addressed builds of candidates' inline extensions, in a pool of CPU processes."""

from evalfarm.build.cache import ExtensionCache
from evalfarm.build.pool import BuildPool, BuildReport

__all__ = ["BuildPool", "BuildReport", "ExtensionCache"]
