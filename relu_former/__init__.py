"""relu-former: a fairseq plugin (``--user-dir relu_former``).

Importing this package registers every architecture, criterion and task of the plugin with
fairseq, allowlists the globals that fairseq checkpoints need for ``weights_only`` loading and
stops fairseq-fixed from dropping the last batch of a data set (``fairseq_compat``).
Importing it twice (``import relu_former`` and ``--user-dir relu_former``) is harmless.
"""

import importlib.util
import os
import sys

from relu_former.checkpoint_safety import allow_fairseq_checkpoint_globals
from relu_former.fairseq_compat import keep_last_batch

__version__ = "0.1.0"

_HERE = os.path.dirname(os.path.abspath(__file__))


def _import_criterions() -> None:
    """Import ``relu_former.criterions``.

    An install maps the top-level ``criterions/`` folder to ``relu_former.criterions``
    (setup.py); in a plain checkout used with ``--user-dir`` we load the same folder under the
    same name, so criterion modules are written once with one import path.
    """
    name = f"{__name__}.criterions"
    if name in sys.modules:
        return
    try:
        importlib.import_module(name)
        return
    except ModuleNotFoundError as err:
        if err.name != name:
            raise
    folder = os.path.join(os.path.dirname(_HERE), "criterions")
    spec = importlib.util.spec_from_file_location(
        name, os.path.join(folder, "__init__.py"), submodule_search_locations=[folder]
    )
    if spec is None or spec.loader is None:
        raise ImportError(f"relu_former: cannot find the criterions package at {folder}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise


def _mark_as_user_dir() -> None:
    """Tell fairseq's ``import_user_module`` this folder is already imported.

    fairseq refuses to import a ``--user-dir`` whose module name is already in ``sys.modules``
    ("not globally unique"), which would make ``import relu_former`` followed by
    ``--user-dir relu_former`` fail in one process. fairseq keeps the imported user dirs in
    ``import_user_module.memo``; adding our path there makes the second import a no-op.
    """
    from fairseq import utils

    memo = getattr(utils.import_user_module, "memo", None)
    if memo is None:
        memo = set()
        utils.import_user_module.memo = memo
    memo.add(_HERE)


allow_fairseq_checkpoint_globals()
keep_last_batch()
_mark_as_user_dir()
_import_criterions()

import relu_former.generation  # noqa: E402,F401  (registers translation_sparse_decoding)
from relu_former import models  # noqa: E402,F401  (registers architectures)
