"""fairseq criterions of the plugin (installed as relu_former.criterions)."""

import os

from relu_former.registration import import_submodules

import_submodules(__name__, os.path.dirname(__file__))
