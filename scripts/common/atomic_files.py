"""The plugin's atomic writers (a temporary name beside the target, then a rename): one
implementation, ``relu_former/atomic_files.py``, loaded by its path. ``import relu_former.…``
would import the plugin's package before fairseq, and fairseq would then skip registering the
plugin for ``--user-dir`` in that process (``relu_former/__init__.py``)."""

import importlib.util

from scripts.common.repo_paths import REPO_ROOT

_spec = importlib.util.spec_from_file_location(
    "scripts.common._plugin_atomic_files", REPO_ROOT / "relu_former" / "atomic_files.py")
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)
atomic_path, copy_atomic, write_text_atomic = (_module.atomic_path, _module.copy_atomic,
                                               _module.write_text_atomic)
