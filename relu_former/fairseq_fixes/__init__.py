"""The plugin's changes to fairseq 0.12 (fairseq-fixed 0.12.3.1), installed by ``plugin.py``;
docs/design.md#what-the-plugin-changes-in-fairseq lists each with its fault and probe."""

from __future__ import annotations

from typing import Any, Callable


def wrap_once(owner: Any, name: str, wrapper: Callable[[Callable], Callable]) -> None:
    """Replace ``owner.name`` by ``wrapper(owner.name)`` unless that was done already (the
    wrapped function remembers its wrapper), so a second import of the plugin wraps nothing."""
    original = getattr(owner, name)
    if getattr(original, "_relu_former_wrapper", None) is wrapper:
        return
    wrapped = wrapper(original)
    wrapped._relu_former_wrapper = wrapper
    setattr(owner, name, wrapped)
