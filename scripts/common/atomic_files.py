"""The plugin's atomic writers (a temporary name beside the target, then a rename), for the
scripts: one implementation."""

from relu_former.atomic_files import atomic_path, copy_atomic, write_text_atomic

__all__ = ["atomic_path", "copy_atomic", "write_text_atomic"]
