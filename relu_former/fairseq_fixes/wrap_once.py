"""Replacing a fairseq function by a wrapped one, once per process: each wrapped function
remembers the wrapper that made it, so importing the plugin twice wraps nothing twice."""

from __future__ import annotations

from typing import Any, Callable


def wrap_once(owner: Any, name: str, wrapper: Callable[[Callable], Callable]) -> None:
    """Replace ``owner.name`` by ``wrapper(owner.name)`` unless that was done already."""
    original = getattr(owner, name)
    if getattr(original, "_relu_former_wrapper", None) is wrapper:
        return
    wrapped = wrapper(original)
    wrapped._relu_former_wrapper = wrapper
    setattr(owner, name, wrapped)
