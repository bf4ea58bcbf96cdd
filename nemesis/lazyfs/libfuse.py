"""mfusepy bound to libfuse 3, whatever else the host has installed.

mfusepy loads `libfuse.so` (libfuse 2) when it finds one, and only then falls
back to libfuse 3. Under libfuse 2 the fuse_config of init is NULL, so
direct_io and the zero entry/attribute timeouts the durability model depends on
are silently not applied: the kernel then serves sizes from its attribute cache
for a second after a power loss (a truncation it undid still looks done), and
libfuse 2's fixed-size receive buffer rejects a larger max_write. So the library
is chosen here, before mfusepy is imported, and anything but libfuse 3 is refused.
"""

from __future__ import annotations

import os

os.environ.setdefault("FUSE_LIBRARY_NAME", "fuse3")  # read by mfusepy at import

import mfusepy  # noqa: E402  (must follow the library choice above)

if mfusepy.fuse_version_major != 3:
    raise ImportError(
        f"lazyfs needs libfuse 3 but mfusepy loaded {mfusepy._libfuse_path!r} "
        f"(libfuse {mfusepy.fuse_version_major}.{mfusepy.fuse_version_minor}); install "
        "libfuse3 (Debian: fuse3) and unset FUSE_LIBRARY_PATH/FUSE_LIBRARY_NAME or point "
        "them at libfuse3.so.3"
    )

__all__ = ["mfusepy"]
