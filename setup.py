"""relu-former: a fairseq plugin for ReLUFormer, sparse-softmax and Pyramidion.

The ``criterions/`` folder sits at the repository top level (the design card) and is
installed as ``relu_former.criterions`` so that an install adds only the ``relu_former``
namespace to site-packages.
"""

from setuptools import setup

# fairseq and torch are deliberately not listed: torch must be the CPU build already on the
# machine and fairseq-fixed must be installed with --no-deps (see README, "Install").
setup(
    name="relu-former",
    version="0.1.0",
    description="fairseq plugin: ReLU attention, sparse-softmax and successive-halving pooling",
    python_requires=">=3.8",
    packages=[
        "relu_former",
        "relu_former.kernels",
        "relu_former.modules",
        "relu_former.models",
        "relu_former.criterions",
    ],
    package_dir={"relu_former": "relu_former", "relu_former.criterions": "criterions"},
    install_requires=[],
)
