"""``python -m relu_former.average_checkpoints``: the element-wise mean of real checkpoints,
loaded safely, written whole, and decodable by fairseq-generate; checkpoints of two models are
never averaged."""

from __future__ import annotations

import sys

import pytest
import torch

from helpers import (
    REPO_ROOT,
    FairseqRun,
    assert_generation_output,
    fairseq_command,
    run_command,
)

AVERAGE = [sys.executable, "-m", "relu_former.average_checkpoints"]
AVERAGE_PROG = "python -m relu_former.average_checkpoints"


def test_help_names_the_flags(capsys):
    from relu_former.average_checkpoints import main

    with pytest.raises(SystemExit) as done:
        main(["--help"])
    out = capsys.readouterr().out
    assert done.value.code == 0
    assert "--inputs" in out and "--output" in out and "weights_only" in out


@pytest.mark.slow
def test_average_of_two_checkpoints_is_their_mean_and_decodes(fairseq_run, capsys):
    import relu_former.plugin  # noqa: F401  (torch.load below with the plugin's allowlist)

    fairseq_run.train("--max-update", "8", "--save-interval-updates", "4",
                      "--validate-interval-updates", "4", arch="relu_former")
    save = fairseq_run.work / "checkpoints"
    inputs = [save / "checkpoint_1_4.pt", save / "checkpoint_last.pt"]
    output = fairseq_run.work / "average.pt"
    proc = run_command([*AVERAGE, "--inputs", *inputs, "--output", output], cwd=REPO_ROOT)
    assert proc.stdout.strip() == f"averaged 2 checkpoints into {output}"
    first, second, average = (torch.load(path)["model"] for path in (*inputs, output))
    assert set(average) == set(first)
    assert any(not torch.equal(first[name], second[name]) for name in first)
    for name, got in average.items():
        assert got.dtype == first[name].dtype, name
        want = ((first[name].double() + second[name].double()) / 2).to(got.dtype)
        assert torch.equal(got, want), name
    decoded = run_command([
        fairseq_command("fairseq-generate"), fairseq_run.data_bin, "--user-dir",
        fairseq_run.user_dir, "--path", output, "--gen-subset", "test", "--beam", "2",
        "--max-tokens", "1000", "--cpu", "--num-workers", "0"], cwd=fairseq_run.work)
    assert_generation_output(decoded.stdout)

    # the refusals call main() in this process (the command above runs it as a process, whose
    # exit status is main()'s): a damaged input is named in one line and nothing is written
    damaged = fairseq_run.work / "damaged.pt"
    damaged.write_bytes(inputs[1].read_bytes()[:5000])
    missing = fairseq_run.work / "never.pt"
    status, lines = _average(capsys, inputs[0], damaged, output=missing)
    assert status == 1 and not missing.exists()
    assert lines == [
        f"python -m relu_former.average_checkpoints: error: checkpoint {damaged} is corrupt: "
        "it is truncated (5000 bytes, the end of the archive is missing): it was probably cut "
        "short while being written"]
    # an input is never the output
    before = inputs[0].read_bytes()
    status, lines = _average(capsys, *inputs, output=inputs[0])
    assert status == 2 and "is one of the --inputs" in lines[-1]
    assert inputs[0].read_bytes() == before


@pytest.fixture(scope="module")
def two_models(toy_data_bin, tmp_path_factory):
    """A ReLUFormer's checkpoint and a stock softmax ``transformer``'s of the same sizes, two
    updates each."""
    run = FairseqRun(data_bin=toy_data_bin, work=tmp_path_factory.mktemp("two_models"))
    short = ("--max-update", "2", "--save-interval-updates", "2",
             "--validate-interval-updates", "2")
    run.train(*short, arch="relu_former", save_dir="relu")
    run.train(*short, arch="transformer", save_dir="softmax")
    return run.work / "relu" / "checkpoint_last.pt", run.work / "softmax" / "checkpoint_last.pt"


def _variant(source, target, change):
    """A copy of the checkpoint ``source`` at ``target`` with ``change(state)`` applied."""
    import relu_former.plugin  # noqa: F401  (the allowlist of torch.load)

    state = torch.load(source)
    change(state)
    torch.save(state, target)
    return target


def _average(capsys, *inputs, output):
    """main() of the command in this process: its exit status (a parser's refusal's too) and
    stderr lines."""
    from relu_former.average_checkpoints import main

    try:
        status = main(["--inputs", *map(str, inputs), "--output", str(output)])
    except SystemExit as done:  # argparse's error
        status = done.code
    return status, capsys.readouterr().err.splitlines()


@pytest.mark.slow
def test_a_relu_former_is_not_averaged_with_a_softmax_transformer(two_models, tmp_path,
                                                                  capsys):
    relu, softmax = two_models
    output = tmp_path / "average.pt"
    status, lines = _average(capsys, relu, softmax, output=output)
    assert status == 2 and not output.exists()
    assert lines == [
        f"python -m relu_former.average_checkpoints: error: --inputs: {softmax} cannot be "
        f"averaged with {relu}: it was trained with --arch transformer, {relu} with "
        "relu_former; average checkpoints of one run"]


def _set_model(field, value):
    def change(state):
        setattr(state["cfg"]["model"], field, value)  # fairseq stores it as a Namespace

    return change


def _reorder_dictionary(state):
    symbols = state["relu_former_dictionaries"]["target"]
    symbols[4], symbols[5] = symbols[5], symbols[4]


def _drop_weight(state):
    del state["model"]["decoder.output_projection.weight"]


def _grow_weight(state):
    state["model"]["encoder.layers.0.fc1.bias"] = torch.zeros(33)


@pytest.mark.slow
@pytest.mark.parametrize("change,named", [
    (_set_model("attention_activation", "softmax"),
     "it was trained with --attention-activation softmax, {relu} with relu"),
    (_set_model("relu_gamma", 2.0), "it was trained with --relu-gamma 2.0, {relu} with 1.0"),
    (_set_model("encoder_ffn_embed_dim", 64),
     "it was trained with --encoder-ffn-embed-dim 64, {relu} with 32"),
    (_reorder_dictionary, "its target dictionary is not {relu}'s: it holds the same symbols "
                          "in another order: 2 of"),
    (_drop_weight, "the weight decoder.output_projection.weight is in only one of them"),
    (_grow_weight, "encoder.layers.0.fc1.bias has shape (33,), not (32,)"),
], ids=["activation", "relu_gamma", "size", "dictionary", "names", "shapes"])
def test_inputs_of_another_model_are_refused_naming_the_difference(two_models, tmp_path,
                                                                   capsys, change, named):
    relu, _ = two_models
    other = _variant(relu, tmp_path / "other.pt", change)
    output = tmp_path / "average.pt"
    status, lines = _average(capsys, relu, other, output=output)
    assert status == 2 and not output.exists()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"{AVERAGE_PROG}: error: --inputs: {other} cannot be averaged "
                               f"with {relu}: " + named.format(relu=relu)), lines[0]


@pytest.mark.slow
def test_flags_that_leave_the_weights_meaning_alone_may_differ(two_models, tmp_path, capsys):
    relu, _ = two_models
    other = _variant(relu, tmp_path / "other.pt", lambda state: vars(state["cfg"]["model"])
                     .update(dropout=0.3, attention_backend="tiled", max_source_positions=64))
    output = tmp_path / "average.pt"
    assert _average(capsys, relu, other, output=output) == (0, [])
    assert output.is_file()


@pytest.mark.slow
def test_the_average_never_holds_a_config_string_the_loader_refuses(two_models, tmp_path,
                                                                     capsys):
    """An interpolation is stored resolved (as fairseq's trainer stores configs): one that
    resolves to code is refused before anything is written."""
    relu, _ = two_models
    code = "__import__('os').getpid() and [4]"

    def hide_code(state):
        state["cfg"]["optimizer"].update(adam_betas="${optimizer.hidden}", hidden=code)

    first = _variant(relu, tmp_path / "first.pt", hide_code)
    output = tmp_path / "average.pt"
    status, lines = _average(capsys, first, relu, output=output)
    assert status in (1, 2) and not output.exists()  # 1: a loader that resolves it refuses
    assert len(lines) == 1 and lines[0].startswith(f"{AVERAGE_PROG}: error: "), lines
    assert f"cfg.optimizer.adam_betas the string {code!r}" in lines[0]
