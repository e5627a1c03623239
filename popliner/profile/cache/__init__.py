"""The derived-data cache: one ``.npz`` per (profile content, popliner version, options).

Stored with numpy's own format and loaded with ``allow_pickle=False``: the
arrays of the frozen dataclasses go in as arrays, everything else (strings,
small scalars) as one deflated JSON document held in a ``uint8`` array. The
file is a plain ``np.savez`` archive (stored members), read member by
member (:mod:`popliner.profile.cache.archive`). Large integer columns are
stored narrowed and deflated so that the cache stays smaller than the
profile (also there); the JSON document says how to undo it. The variable names stay compressed in memory too
(:class:`NameTable` inflates a chunk when a name in it is read). A file that
is unreadable, truncated, damaged, from another version or for another
profile is ignored and rebuilt; nothing here ever raises to the user. When
an entry is trusted: :mod:`popliner.profile.cache.trust`.

Beside the profile, a file holds what the caller derived from it (the
operation table, the layer assignment): frozen dataclasses of arrays,
tuples and scalars, stored the same way. The caller names their types when
it loads, so this module, like all of ``profile/``, imports nothing from the
layers above it. Where the cache lives, and ``popliner cache info|clear``,
are :mod:`popliner.profile.cache.info`; writing and reading an entry
:mod:`popliner.profile.cache.store`.
"""

from popliner.profile.cache.info import CacheEntry, CacheInfo, cache_dir, cache_info, clear_cache
from popliner.profile.cache.store import CACHE_FORMAT, CacheHit, PendingStore, cache_path, load_cached, seal
from popliner.profile.cache.trust import Bad, check_csr, check_len, check_range

__all__ = ["CACHE_FORMAT", "Bad", "CacheEntry", "CacheHit", "CacheInfo", "PendingStore", "cache_dir", "cache_info",
           "cache_path", "check_csr", "check_len", "check_range", "clear_cache", "load_cached", "seal"]
