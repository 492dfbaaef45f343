"""relu-former: a fairseq plugin for ReLUFormer, sparse-softmax and Pyramidion.

The ``criterions/`` folder sits at the repository top level and is installed as
``relu_former.criterions``, so that an install adds only the ``relu_former`` namespace to
site-packages.

Dependencies: the plugin's own runtime needs are declared below. torch is declared without a
pin (the installed build, CPU or CUDA, satisfies it; the project pins it in constraints.txt
only) and fairseq is not declared at all: two distributions provide the ``fairseq`` module
(fairseq 0.12.2 and fairseq-fixed, the one that imports on Python 3.11), and declaring either
would make pip fetch it, with fairseq-fixed's metadata pulling torchaudio and a second torch.
docs/install.md gives the commands.

The CPU kernel of ReLU attention (``relu_former/relu_attention/kernels/relu_attention_cpu.cpp``)
is compiled against the installed torch, so it is built only where torch is importable at
build time (``pip install --no-build-isolation``); without it the plugin runs the same sums
through torch operations (the ``tiled`` backend).
"""

from setuptools import setup


def compiled_kernels() -> dict:
    """setup() arguments that build the C++ ReLU attention kernel, if torch is importable."""
    try:
        from torch.utils.cpp_extension import BuildExtension, CppExtension
    except ImportError:
        return {}
    kernel = CppExtension(
        "relu_former.relu_attention.kernels._relu_attention_cpu",
        ["relu_former/relu_attention/kernels/relu_attention_cpu.cpp"],
        # -fno-trapping-math lets the compiler vectorise the elementwise loops over a tile
        # (measured 40x on the ReLU-derivative loop); torch builds itself with it too.
        # -fopenmp: at::parallel_for is OpenMP inside torch's headers; without the flag it
        # compiles to a serial loop and the kernel used one thread whatever torch's setting.
        extra_compile_args=["-O3", "-fno-trapping-math", "-fopenmp"],
        extra_link_args=["-fopenmp"],
    )
    return {"ext_modules": [kernel], "cmdclass": {"build_ext": BuildExtension}}


setup(
    name="relu-former",
    version="0.1.0",
    description="fairseq plugin: ReLU attention, sparse-softmax and successive-halving pooling",
    python_requires=">=3.8",
    packages=[
        "relu_former",
        "relu_former.fairseq_fixes",
        "relu_former.pyramidion",
        "relu_former.relu_attention",
        "relu_former.relu_attention.kernels",
        "relu_former.sparse_softmax",
        "relu_former.criterions",
    ],
    package_dir={"relu_former": "relu_former", "relu_former.criterions": "criterions"},
    install_requires=["torch>=2.4", "numpy", "omegaconf>=2.0"],
    extras_require={"entmax": ["entmax"]},
    **compiled_kernels(),
)
