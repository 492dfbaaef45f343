"""Import every module of a plugin package, so that its fairseq ``@register_*`` calls run."""

import importlib
import os


def import_submodules(package_name: str, folder: str) -> None:
    """Import ``package_name.<module>`` for every public ``.py`` file in ``folder``.

    fairseq's own ``models/`` and ``criterions/`` packages register their members the same
    way, so a new file is picked up without editing a list.
    """
    for file_name in sorted(os.listdir(folder)):
        if file_name.endswith(".py") and not file_name.startswith("_"):
            importlib.import_module(f"{package_name}.{file_name[:-3]}")
