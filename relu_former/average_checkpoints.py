"""Average the weights of several checkpoints: ``python -m relu_former.average_checkpoints
--inputs A.pt B.pt ... --output AVERAGE.pt``.

fairseq's ``scripts/average_checkpoints.py`` loads the files with ``torch.load`` before anything
has allowlisted the classes fairseq checkpoints hold, so on this torch it stops with torch's
advice to load them with ``weights_only=False`` (which would let a checkpoint run code). This
command loads every input the way ``fairseq-generate --user-dir relu_former`` does: through
fairseq's loader with the plugin imported, so the ``weights_only`` allowlist, the check of
every file's zip checksums and the refusal of code apply, and a bad file is named in one line.

The inputs must be checkpoints of one model: the same ``--arch``, attention activations and
every other model flag that says what the weights mean (those a resume compares,
``fairseq_fixes.resume_check``: dropouts, kernels and length limits may differ), the same
dictionaries where they are recorded, the same parameter names and shapes, equal integer
tensors. The first difference refuses the average in one line naming it (a ReLUFormer
averaged with a softmax Transformer of the same sizes would load as a ReLUFormer made of
half softmax-trained weights).

The output is the first input with its model weights replaced by the element-wise mean of
all inputs' (computed in float64, stored in each weight's own dtype); its other fields
(configuration, optimizer state, training progress) are the first input's, as in fairseq's
script. Its configuration, as it will be stored, passes the loader's check of config strings
(``fairseq_fixes.literal_config``) before anything is written. The output is written to a
temporary name and renamed, so an existing file of that name is replaced whole or not at all.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Dict, Sequence

import torch

PROG = "python -m relu_former.average_checkpoints"


def _mismatch(path: str, first: str, message: str) -> None:
    from relu_former.errors import OptionError

    raise OptionError("--inputs", f"{path} cannot be averaged with {first}: {message}; "
                                  "average checkpoints of one run")


def _model_args(state: dict) -> Any:
    """The model arguments a checkpoint was trained with (a config or namespace), or None."""
    cfg = state.get("cfg")
    return cfg.get("model") if cfg is not None else state.get("args")


def _check_same_model(path: str, state: dict, first_path: str, first: dict) -> None:
    """Refuse ``state`` (from ``path``) unless it is a checkpoint of ``first``'s model."""
    from relu_former.fairseq_fixes.dictionary_check import KEY, dictionary_difference
    from relu_former.fairseq_fixes.resume_check import model_differences

    differences = model_differences(_model_args(state), _model_args(first))
    if differences:
        name, here, there = differences[0]
        flag = "--" + name.replace("_", "-")
        _mismatch(path, first_path, f"it was trained with {flag} {here}, {first_path} with "
                                    f"{there}")
    theirs = state.get(KEY) or {}  # recorded by the plugin when it saves a checkpoint
    for side, symbols in (first.get(KEY) or {}).items():
        problem = dictionary_difference(symbols, theirs[side]) if side in theirs else None
        if problem is not None:
            _mismatch(path, first_path, f"its {side} dictionary is not {first_path}'s: "
                                        f"{problem.replace('the checkpoint', first_path)}")


def average_checkpoints(inputs: Sequence[str]) -> dict:
    """The state of ``inputs[0]`` with its ``model`` replaced by the mean of every input's."""
    from fairseq import checkpoint_utils

    import relu_former.plugin  # noqa: F401  (the allowlist and the checks of every load)

    first: dict | None = None
    totals: Dict[str, torch.Tensor] = {}
    for path in inputs:
        state = checkpoint_utils.load_checkpoint_to_cpu(path)
        model = state["model"]
        if first is None:
            first = state
            totals = {name: t.double() if t.is_floating_point() else t.clone()
                      for name, t in model.items()}
            continue
        _check_same_model(path, state, inputs[0], first)
        if set(model) != set(totals):
            name = sorted(set(model) ^ set(totals))[0]
            _mismatch(path, inputs[0], f"the weight {name} is in only one of them")
        for name, tensor in model.items():
            if tensor.shape != totals[name].shape:
                _mismatch(path, inputs[0], f"{name} has shape {tuple(tensor.shape)}, not "
                                           f"{tuple(totals[name].shape)}")
            if tensor.is_floating_point():
                totals[name] += tensor.double()
            elif not torch.equal(tensor, totals[name]):
                _mismatch(path, inputs[0], f"the integer tensor {name} differs")
    assert first is not None
    first["model"] = {
        name: (total / len(inputs)).to(first["model"][name].dtype)
        if first["model"][name].is_floating_point() else total
        for name, total in totals.items()
    }
    return first


def save_checkpoint(state: dict, path: str, source: str) -> None:
    """Write ``state`` as fairseq does: to ``PATH.tmp``, then a rename; the configuration is
    stored as plain containers, as fairseq's trainer saves it, after the loader's check of its
    strings (resolving an interpolation can bring in a string the loader refuses; ``source``
    is the input the configuration comes from)."""
    from fairseq import checkpoint_utils
    from omegaconf import OmegaConf

    from relu_former.errors import OptionError
    from relu_former.fairseq_fixes.literal_config import checkpoint_config_problem

    if OmegaConf.is_config(state.get("cfg")):
        state["cfg"] = OmegaConf.to_container(state["cfg"], resolve=True, enum_to_str=True)
    problem = checkpoint_config_problem(state)
    if problem is not None:
        raise OptionError("--inputs", f"the average would hold {source}'s configuration, "
                                      f"and there {problem}")
    checkpoint_utils.torch_persistent_save(state, path)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[1],
                                     epilog="e.g. " + PROG + " --inputs checkpoints/"
                                     "checkpoint_1_{8000,9000,10000}.pt --output "
                                     "checkpoints/average.pt")
    parser.add_argument("--inputs", nargs="+", required=True, metavar="CHECKPOINT",
                        help="checkpoints of one model (same architecture and vocabulary), "
                             "e.g. the last few checkpoint_EPOCH_UPDATE.pt of a run")
    parser.add_argument("--output", required=True, metavar="FILE",
                        help="where to write the average (its folder must exist; an existing "
                             "file is replaced whole); never one of the inputs")
    args = parser.parse_args(argv)
    for path in args.inputs:
        if not os.path.isfile(path):
            parser.error(f"--inputs: {path} is not a file")
    folder = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(folder):
        parser.error(f"--output: the folder {folder} does not exist")
    if any(os.path.exists(args.output) and os.path.samefile(args.output, path)
           for path in args.inputs):
        parser.error(f"--output {args.output} is one of the --inputs; name a new file")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    from relu_former.errors import CommandLineError

    try:
        state = average_checkpoints(args.inputs)
        save_checkpoint(state, args.output, args.inputs[0])
    except CommandLineError as error:
        sys.stderr.write(f"{PROG}: error: {error}\n")
        return error.exit_status
    print(f"averaged {len(args.inputs)} checkpoints into {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
