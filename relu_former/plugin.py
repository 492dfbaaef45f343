"""The plugin's side effects, run once when fairseq loads ``--user-dir relu_former``: register
the architectures, criterions and task, allowlist fairseq's checkpoint classes, install the
``fairseq_fixes`` (each fairseq function wrapped at most once; docs/design.md lists them) and,
in fairseq's own commands only, the one-line error hook. Importing it twice is harmless."""

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
from relu_former.fairseq_fixes.save_dir_lock import lock_save_dirs, release_save_dirs_after_training
from relu_former.fairseq_fixes.saved_source_limit import use_saved_source_limit
from relu_former.sparse_softmax.old_checkpoints import upgrade_old_sparse_k_checkpoints

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
PACKAGE = __name__.rsplit(".", 1)[0]


def _import_criterions() -> None:
    """Load the criterions of *this* copy by path (inside an install, beside a checkout): by
    name, an editable install of another checkout would mix two versions in one process."""
    name = f"{PACKAGE}.criterions"
    folder = os.path.join(PACKAGE_DIR, "criterions")
    if not os.path.isfile(os.path.join(folder, "__init__.py")):
        folder = os.path.join(os.path.dirname(PACKAGE_DIR), "criterions")
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
    """The fixes on ``fairseq_cli`` modules, each only if imported (importing one sets up
    logging); run it again after importing such a module yourself (idempotent)."""
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
install_command_fixes()
check_parsed_command_lines()
check_data_files()
record_dictionaries()
use_saved_source_limit()
upgrade_old_sparse_k_checkpoints()
_import_criterions()

import relu_former.pyramidion.model  # noqa: E402,F401  (registers pyramidion and its archs)
import relu_former.relu_attention.model  # noqa: E402,F401  (registers relu_former and its archs)
import relu_former.sparse_softmax.decoding  # noqa: E402,F401  (registers translation_sparse_decoding)
