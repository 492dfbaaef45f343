"""relu-former: a fairseq plugin (``fairseq-train --user-dir relu_former``).

Two kinds of code live here:

* ``relu_former.kernels``: pure tensor functions (ReLU attention, sparse-softmax, successive
  halving), importable with torch alone;
* the fairseq glue (``modules``, ``models``, ``criterions``, ``generation``), registered with
  fairseq by ``relu_former.plugin``.

fairseq imports a ``--user-dir`` after importing itself, so when fairseq is already loaded this
package registers the plugin at once; otherwise (``import relu_former.kernels.sparse_softmax``
in a script) it does nothing, and ``import relu_former.plugin`` registers on demand.
"""

import sys

__version__ = "0.1.0"

if "fairseq" in sys.modules:
    import relu_former.plugin  # noqa: F401
