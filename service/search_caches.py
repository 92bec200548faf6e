"""Releasing the cost model's and the search's memo caches once no search runs.

Owns: dropping the memo the searches share, finding the bounded memo caches
(`functools.lru_cache` with a `maxsize`) of the `models` and `solver` modules loaded,
clearing them, collecting garbage, and handing the freed heap back to the operating system
(glibc `malloc_trim`), which the solver pool calls when it falls idle. What a search derives
lives on the searches' shared memo (`models.core.search_memo.SearchMemo`, bounded by
`SHARED_MEMO_ENTRIES`) and in the module caches left (the pipeline programs of each schedule
shape); both speed up requests close together, and kept between requests, each large search
left its entries behind (with module caches before the search memo, eight large searches:
108 -> 2,929 MiB, staying there). Unbounded caches (`functools.cache`) hold static data
(catalog, framework tables) and are kept. Must not: run while a search holds the pool
(clearing is safe, but costs that search its memo), or know what the caches hold.
"""

import ctypes
import ctypes.util
import functools
import gc
import logging
import sys
from typing import Any

from models.core.search_memo import release_shared_memo

logger = logging.getLogger(__name__)

PACKAGES = ("models", "solver")
"""Top-level packages whose module-level memo caches are released."""


def bounded_caches() -> list[Any]:
    """The module-level `lru_cache` functions with a maxsize in `PACKAGES` (each once)."""
    found: dict[int, Any] = {}
    for name, module in list(sys.modules.items()):
        if module is None or name.split(".", 1)[0] not in PACKAGES:
            continue
        for value in list(vars(module).values()):
            if (isinstance(value, functools._lru_cache_wrapper)
                    and value.cache_info().maxsize is not None):
                found[id(value)] = value
    return list(found.values())


def _malloc_trim() -> bool:
    """Return free heap pages to the OS (glibc only; False where unavailable)."""
    path = ctypes.util.find_library("c")
    if path is None:
        return False
    try:
        libc = ctypes.CDLL(path)
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return bool(trim(0))


def release() -> int:
    """Drop the searches' shared memo (`models.core.search_memo.release_shared_memo`), clear
    every bounded memo cache, collect garbage and trim the heap; the number of entries
    dropped."""
    dropped = release_shared_memo()
    for cached in bounded_caches():
        dropped += cached.cache_info().currsize
        cached.cache_clear()
    gc.collect()
    _malloc_trim()
    logger.info("search caches released: %d entries", dropped)
    return dropped


__all__ = ["PACKAGES", "bounded_caches", "release"]
