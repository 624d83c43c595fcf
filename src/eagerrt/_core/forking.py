"""What a forked child must not inherit: locks other threads may have held.

A child process has only the thread that called ``fork()``. A lock some other
thread held at that moment stays locked forever in the child, so every
module-level lock the runtime takes from more than one thread is renewed here.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["renew_after_fork"]


def renew_after_fork(
    owner: Any, attribute: str, factory: Callable[[], Any] = threading.Lock
) -> None:
    """After a fork, the child sets ``owner.attribute = factory()``.

    ``owner`` may be a module name (for module globals) or any object.
    """
    if not hasattr(os, "register_at_fork"):
        return

    def renew() -> None:
        target = sys.modules[owner] if isinstance(owner, str) else owner
        setattr(target, attribute, factory())

    os.register_at_fork(after_in_child=renew)
