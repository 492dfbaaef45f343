"""relu-former: a fairseq plugin (``fairseq-train --user-dir relu_former``).

One folder per paper: ``relu_attention`` (ReLUFormer), ``sparse_softmax`` and ``pyramidion``
(Transpooler / Pyramidion). In each, the kernels import with torch alone and the fairseq glue
(modules, models, tasks) calls them; ``fairseq_fixes`` holds the plugin's fixes to fairseq, and
``plugin`` registers everything with fairseq.

fairseq imports a ``--user-dir`` after importing itself, so when fairseq is already loaded this
package registers the plugin at once; otherwise (``import
relu_former.sparse_softmax.sparse_softmax`` in a script) it does nothing, and ``import
relu_former.plugin`` registers on demand.
"""

import sys

__version__ = "0.1.0"

if "fairseq" in sys.modules:
    import relu_former.plugin  # noqa: F401
