"""The plugin's side effects, run once when fairseq loads ``--user-dir relu_former``.

Registers every architecture, criterion and task with fairseq, allowlists the globals fairseq
checkpoints need for ``weights_only`` loading, and installs the fixes of ``fairseq_fixes``:
each fairseq function is wrapped at most once (``wrap_once``), and docs/design.md lists every
patch site with the fault it repairs and its probe. Only in fairseq's own commands does it
replace ``sys.excepthook``, to print the plugin's errors as one line
(``errors.is_fairseq_command``). ``relu_former/__init__.py`` imports this module only when
fairseq is already imported, so ``import relu_former.relu_attention.kernels.reference`` stays
a torch-only import. Python code that builds fairseq objects itself can ``import
relu_former.plugin`` explicitly; importing it twice is harmless.
"""

import importlib.util
import os
import sys

from relu_former.errors import install_cli_error_hook, is_fairseq_command
from relu_former.fairseq_fixes.batch_thread_exit import stop_batch_threads_at_exit
from relu_former.fairseq_fixes.checkpoint_files import guard_checkpoint_files
from relu_former.fairseq_fixes.checkpoint_loading import check_checkpoint_loading
from relu_former.fairseq_fixes.checkpoint_safety import allow_fairseq_checkpoint_globals
from relu_former.fairseq_fixes.data_files import check_data_files
from relu_former.fairseq_fixes.dictionary_check import record_dictionaries
from relu_former.fairseq_fixes.hydra_checks import check_hydra_configs
from relu_former.fairseq_fixes.interactive_input import bound_interactive_input
from relu_former.fairseq_fixes.last_batch import keep_last_batch
from relu_former.fairseq_fixes.parse_checks import check_parsed_command_lines
from relu_former.fairseq_fixes.save_dir_lock import (
    lock_save_dirs,
    release_save_dirs_after_training,
)
from relu_former.fairseq_fixes.saved_source_limit import use_saved_source_limit
from relu_former.sparse_softmax.old_checkpoints import upgrade_old_sparse_k_checkpoints

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
PACKAGE = __name__.rsplit(".", 1)[0]


def _criterions_folder() -> str:
    """The criterions of *this* copy of the package.

    An install puts them inside the package (``relu_former/criterions``); a checkout keeps them
    at the top level beside it. The sibling folder is looked up by path, not
    by module name: with an editable install of one checkout, the name ``relu_former.criterions``
    resolves to that checkout's folder even while fairseq loads another checkout's
    ``--user-dir``, and one process would mix two versions of the code.
    """
    inside = os.path.join(PACKAGE_DIR, "criterions")
    if os.path.isfile(os.path.join(inside, "__init__.py")):
        return inside
    return os.path.join(os.path.dirname(PACKAGE_DIR), "criterions")


def _import_criterions() -> None:
    name = f"{PACKAGE}.criterions"
    folder = _criterions_folder()
    loaded = sys.modules.get(name)
    if loaded is not None:
        if os.path.abspath(list(loaded.__path__)[0]) != os.path.abspath(folder):
            raise ImportError(
                f"relu_former: criterions already loaded from {list(loaded.__path__)[0]}, "
                f"but this copy of the plugin is {PACKAGE_DIR}; use one checkout per process")
        return
    init = os.path.join(folder, "__init__.py")
    if not os.path.isfile(init):
        raise ImportError(f"relu_former: cannot find the criterions package at {folder}")
    spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[folder])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise


def install_command_fixes() -> None:
    """Install the fixes that wrap a ``fairseq_cli`` module: each wraps it only if it is
    imported already (importing one sets up logging), as it is when a command loads the plugin
    (idempotent). Python code that imports such a module after the plugin, then calls its
    ``main()``, runs this first."""
    release_save_dirs_after_training()
    bound_interactive_input()
    check_hydra_configs()


allow_fairseq_checkpoint_globals()
guard_checkpoint_files()
check_checkpoint_loading()
lock_save_dirs()
if is_fairseq_command():  # a notebook or library that imports the plugin keeps its hook
    install_cli_error_hook()
keep_last_batch()
stop_batch_threads_at_exit()
bound_interactive_input()
check_parsed_command_lines()
check_hydra_configs()
check_data_files()
record_dictionaries()
use_saved_source_limit()
upgrade_old_sparse_k_checkpoints()
_import_criterions()

import relu_former.pyramidion.model  # noqa: E402,F401  (registers pyramidion and its archs)
import relu_former.relu_attention.model  # noqa: E402,F401  (registers relu_former and its archs)
import relu_former.sparse_softmax.decoding  # noqa: E402,F401  (registers translation_sparse_decoding)
