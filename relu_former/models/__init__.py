"""fairseq architectures of the plugin; importing this package registers them."""

import os

from relu_former.registration import import_submodules

import_submodules(__name__, os.path.dirname(__file__))
