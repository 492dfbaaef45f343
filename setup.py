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
is optional: every install succeeds, and ``BuildKernel`` writes beside the extension a note
(``_relu_attention_cpu_build.json``) saying what it built, or why nothing: torch not importable
at build time (pip's build isolation), no working C++ compiler, or a failed compile. OpenMP
is used where a probe compile shows the compiler has it; otherwise the kernel is built serial.
``compiled_cpu.py`` reads the note to name the cause when the kernel is missing or serial.
"""

import json
import sys
import tempfile
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

try:  # absent in an isolated build (pip's default), which has no torch to compile against
    import torch
    from torch.utils.cpp_extension import BuildExtension, CppExtension
except ImportError:
    torch = BuildExtension = CppExtension = None

KERNEL = "relu_former.relu_attention.kernels._relu_attention_cpu"
SOURCE = "relu_former/relu_attention/kernels/relu_attention_cpu.cpp"
BUILD_NOTE = "_relu_attention_cpu_build.json"  # read by kernels/compiled_cpu.py
REBUILD = "pip install --no-build-isolation --no-deps -e ."
# -fno-trapping-math lets the compiler vectorise the elementwise loops over a tile (measured
# 40x on the ReLU-derivative loop); torch builds itself with it too.
FLAGS = ["-O3", "-fno-trapping-math"]
# at::parallel_for is OpenMP inside torch's headers; without the flag it compiles to a serial
# loop and the kernel uses one thread whatever torch's setting.
OPENMP = {"msvc": "/openmp"}  # every other compiler: -fopenmp


class BuildKernel(BuildExtension or build_ext):
    """build_ext that never fails the install: the kernel is built if it can be, and the
    note beside it says what was built (OpenMP or serial) or why nothing was."""

    def build_extensions(self) -> None:
        (kernel,) = self.extensions
        note = Path(self.get_ext_fullpath(kernel.name)).with_name(BUILD_NOTE)
        problem = ("torch was not importable when the package was built (pip builds in an "
                   "isolated environment unless given --no-build-isolation)"
                   if torch is None else self._probe([]))
        if problem:
            return self._record(note, False, problem)
        flag = OPENMP.get(self.compiler.compiler_type, "-fopenmp")
        no_openmp = self._probe([flag])
        if not no_openmp:
            kernel.extra_compile_args.append(flag)
            kernel.extra_link_args.append(flag)
        try:  # setuptools logs and passes over a failed optional extension; torch may raise
            super().build_extensions()
            failed = "" if Path(self.get_ext_fullpath(kernel.name)).exists() else (
                "its messages are in pip's -v output")
        except Exception as error:
            failed = _first_line(error)
        if failed:
            return self._record(note, False, f"compiling {SOURCE} failed ({failed})")
        self._record(note, True, f"built without OpenMP ({no_openmp}): it runs on one thread"
                     if no_openmp else "")

    def copy_extensions_to_source(self) -> None:
        """An editable or in-place build: the note goes beside the source too."""
        super().copy_extensions_to_source()
        package = KERNEL.rsplit(".", 1)[0]
        source = self.get_finalized_command("build_py").get_package_dir(package)
        built = Path(self.build_lib, *package.split("."), BUILD_NOTE)
        if built.exists():
            self.copy_file(str(built), str(Path(source, BUILD_NOTE)))

    def _probe(self, flags: list) -> str:
        """'' if the compiler builds and links a tiny OpenMP-free (or, with its flag, OpenMP)
        program, else why not."""
        body = "#include <omp.h>\nint main() { return omp_get_max_threads() < 1; }\n" if flags \
            else "int main() { return 0; }\n"
        with tempfile.TemporaryDirectory() as folder:
            source = Path(folder, "probe.cpp")
            source.write_text(body)
            try:
                objects = self.compiler.compile([str(source)], output_dir=folder,
                                                extra_postargs=flags)
                self.compiler.link_executable(objects, "probe", output_dir=folder,
                                              extra_postargs=flags)
            except Exception:
                compiler = Path(self.compiler.compiler_so[0]).name
                return (f"'{compiler}' has no OpenMP ({flags[0]} failed on a test program)"
                        if flags else f"no working C++ compiler ('{compiler}' failed on a "
                        "test program; set CXX and CC to one)")
        return ""

    def _record(self, note: Path, built: bool, why: str) -> None:
        note.parent.mkdir(parents=True, exist_ok=True)
        note.write_text(json.dumps({"built": built, "why": why,
                                    "torch": getattr(torch, "__version__", None)}) + "\n")
        if why:  # pip shows this with -v; the note carries it to the first use
            print(f"relu-former: the compiled CPU kernel: {why}; "
                  f"{'' if built else 'the tiled backend runs instead; '}rebuild: {REBUILD}",
                  file=sys.stderr)


def _first_line(error: Exception) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:200]


# optional: an editable install then does not ask for the file a failed build did not make
kernel = (CppExtension(KERNEL, [SOURCE], extra_compile_args=list(FLAGS), extra_link_args=[],
                       optional=True)
          if CppExtension else Extension(KERNEL, [SOURCE], optional=True))

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
    ext_modules=[kernel],
    cmdclass={"build_ext": BuildKernel},
)
