"""The plugin's side effects, run once when fairseq loads ``--user-dir relu_former``: register
the architectures, criterions and task, allowlist fairseq's checkpoint classes, wrap each fairseq
function below once (docs/design.md: the fault each repairs, its probe) and, in fairseq's own
commands only, install the one-line error hook. Importing it twice is harmless."""

import importlib.util
import os
import sys

from fairseq import checkpoint_utils, options
from fairseq.data import data_utils, indexed_dataset
from fairseq.tasks.translation import TranslationTask
from fairseq.trainer import Trainer

from relu_former.errors import install_cli_error_hook, is_fairseq_command
from relu_former.fairseq_fixes import (
    checkpoint_files,
    checkpoint_loading,
    data_files,
    dictionary_check,
    parse_checks,
    save_dir_lock,
    saved_source_limit,
    wrap_once,
)
from relu_former.fairseq_fixes.batch_thread_exit import stop_batch_threads_at_exit
from relu_former.fairseq_fixes.checkpoint_safety import allow_fairseq_checkpoint_globals
from relu_former.fairseq_fixes.hydra_checks import check_hydra_configs
from relu_former.fairseq_fixes.interactive_input import bound_interactive_input
from relu_former.fairseq_fixes.last_batch import keep_last_batch
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
    """Wrap the ``fairseq_cli`` modules imported (again after importing one yourself)."""
    save_dir_lock.release_save_dirs_after_training()
    bound_interactive_input()
    check_hydra_configs()


allow_fairseq_checkpoint_globals()
checkpoint_files.install_atomic_copy(checkpoint_utils)  # where its probe shows in-place copies
keep_last_batch()  # where its probe shows the drop
wrap_once(checkpoint_utils, "load_checkpoint", checkpoint_files.skipping_damaged_last)
wrap_once(checkpoint_utils, "torch_persistent_save", checkpoint_files.removing_failed_save)
wrap_once(checkpoint_utils, "load_checkpoint_to_cpu", checkpoint_loading.checked_loader)
wrap_once(Trainer, "load_checkpoint", checkpoint_loading.checked_trainer_load)
wrap_once(Trainer, "state_dict", dictionary_check.recording_dictionaries)
wrap_once(checkpoint_utils, "verify_checkpoint_directory", save_dir_lock.locking_save_dir)
wrap_once(options, "parse_args_and_arch", parse_checks.checking_command_lines)
wrap_once(indexed_dataset, "dataset_exists", data_files.checking_exists)
wrap_once(data_utils, "load_indexed_dataset", data_files.checking_load)
wrap_once(TranslationTask, "load_dataset", saved_source_limit.with_saved_source_limit)
stop_batch_threads_at_exit()
upgrade_old_sparse_k_checkpoints()
install_command_fixes()
if is_fairseq_command():  # a notebook or library that imports the plugin keeps its hook
    install_cli_error_hook()
_import_criterions()

import relu_former.pyramidion.model  # noqa: E402,F401  (registers pyramidion and its archs)
import relu_former.relu_attention.model  # noqa: E402,F401  (registers relu_former and its archs)
import relu_former.sparse_softmax.decoding  # noqa: E402,F401  (registers translation_sparse_decoding)
