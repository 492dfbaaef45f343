"""Every value check runs when the command line is parsed: NaN and infinite floats, half
precision with --cpu, relu-only flags with no relu attention, and a pooling schedule that
could never pool at the source positions the model really gets, typed or not."""

from __future__ import annotations

import argparse
import re

import pytest
from fairseq import options

import relu_former.plugin  # noqa: F401  (installs the parse checks)
from relu_former.errors import OptionError
from relu_former.pyramidion.model import PyramidionModel

from helpers import USER_DIR, fairseq_command, run_command


def parse(*flags: str, arch: str = "pyramidion_base") -> argparse.Namespace:
    parser = options.get_training_parser()
    return options.parse_args_and_arch(
        parser, ["data", "--user-dir", USER_DIR, "--arch", arch, "--task", "translation",
                 *flags])


@pytest.mark.parametrize("flag", ["--pooling-base", "--pooling-temperature"])
@pytest.mark.parametrize("value", ["nan", "inf"])
def test_pooling_floats_fail_at_parse_time(flag, value, capsys):
    with pytest.raises(SystemExit) as exit_:
        parse(flag, value)
    assert exit_.value.code == 2
    assert f"argument {flag}: {flag} must be a finite number, got {value}" in \
        capsys.readouterr().err


def test_negative_block_size_fails_at_parse_time(capsys):
    with pytest.raises(SystemExit) as exit_:
        parse("--attention-block-size=-8")
    assert exit_.value.code == 2
    assert ("argument --attention-block-size: --attention-block-size must be an integer >= 0 "
            "(0 = full attention), got -8") in capsys.readouterr().err
    assert parse("--attention-block-size", "0").attention_block_size == 0


@pytest.mark.parametrize("flags, flag", [
    (["--attention-dropout", "inf"], "--attention-dropout"),
    (["--optimizer", "adam", "--weight-decay=-inf"], "--weight-decay"),
    (["--dropout", "nan"], "--dropout"),
    (["--clip-norm", "inf"], "--clip-norm"),
    (["--label-smoothing", "nan", "--criterion", "label_smoothed_cross_entropy"],
     "--label-smoothing"),
    (["--attention-norm-loss-weight", "nan", "--criterion",
      "regularized_label_smoothed_cross_entropy"], "--attention-norm-loss-weight"),
])
def test_every_float_flag_refuses_nan_and_inf(flags, flag):
    with pytest.raises(OptionError, match=r"must be a finite number") as err:
        parse(*flags, arch="relu_former")
    assert err.value.flag == flag


@pytest.mark.parametrize("half", ["--fp16", "--bf16"])
def test_half_precision_with_cpu_is_refused(half):
    with pytest.raises(OptionError, match=rf"{half}: half-precision training needs a GPU, but "
                                          rf"--cpu is given: drop {half}") as err:
        parse("--cpu", half, arch="transformer")
    assert err.value.flag == half
    parse("--fp16", arch="transformer")  # without --cpu it is fairseq's to check


@pytest.mark.parametrize("half", ["--bf16", "--memory-efficient-bf16"])
def test_bf16_training_without_torch_xla_is_refused(half):
    import importlib.util

    if importlib.util.find_spec("torch_xla") is not None:
        pytest.skip("torch_xla is installed: fairseq's TPU path is there")
    with pytest.raises(OptionError, match=rf"{half}: fairseq 0.12 trains in bfloat16 on TPUs "
                                          r"only .* use --fp16 on a GPU") as err:
        parse(half, arch="transformer")
    assert err.value.flag == half
    parse(half, "--tpu", arch="transformer")  # asked for a TPU: fairseq's to check
    # generation reads no trainer: its parser has no --max-update, so nothing is refused
    parser = options.get_generation_parser()
    options.parse_args_and_arch(parser, ["data", half])


@pytest.mark.parametrize("flags, flag", [
    (["--relu-learn-gamma"], "--relu-learn-gamma"),
    (["--relu-attention-scaling", "layernorm"], "--relu-attention-scaling"),
    (["--relu-attention-scaling", "none"], "--relu-attention-scaling"),
])
@pytest.mark.parametrize("arch, extra", [
    ("relu_former", ["--attention-activation", "softmax"]),
    ("relu_former", ["--attention-activation", "sparsemax"]),
    ("pyramidion_base", []),  # its attention defaults to softmax
])
def test_relu_only_flags_without_relu_attention_are_refused(flags, flag, arch, extra):
    with pytest.raises(OptionError, match=r"applies to relu attention only.*would be ignored"):
        parse(*flags, *extra, arch=arch)
    # with relu attention somewhere they are used, so accepted
    parse(*flags, *extra, "--encoder-attention-activation", "relu", arch=arch)
    parse(*flags, arch="relu_former")


def test_pooling_base_beside_pooling_temperature_is_refused():
    """The temperature form replaces the base: typing both means one is ignored."""
    with pytest.raises(OptionError, match=r"--pooling-base is ignored when "
                                          r"--pooling-temperature is given"):
        parse("--pooling-base", "10", "--pooling-temperature=0.5")
    assert parse("--pooling-temperature", "0.5").pooling_base == 20.0  # the arch default: fine
    assert getattr(parse("--pooling-base", "10"), "pooling_temperature", None) is None


def _toy_task():
    from fairseq.data import Dictionary

    d = Dictionary()
    for i in range(20):
        d.add_symbol(f"w{i}")
    return argparse.Namespace(source_dictionary=d, target_dictionary=d)


@pytest.mark.parametrize("flags, message", [
    ([], r"'2:4096,3:2048' pools to 2048 states at the least, but --max-source-positions is "
         r"1024: no input"),
    (["--pooling-schedule", "1:100000"], r"'1:100000' pools to 100000 states"),
])
def test_pooling_schedule_is_checked_at_the_default_source_positions(flags, message):
    """--max-source-positions not typed: the model gets fairseq's default (1024), and a
    schedule that pools nothing at 1024 is refused, as if 1024 had been typed."""
    args = parse(*flags)
    assert getattr(args, "max_source_positions", None) is None  # really not typed
    with pytest.raises(OptionError, match=message):
        PyramidionModel.build_model(args, _toy_task())


# the real command line for the whole-command check; NaN flags are refused by argparse itself
# (test_pooling_floats_fail_at_parse_time, in-process). fairseq's parser turns
# --memory-efficient-fp16 into --fp16 and --bf16 into --tpu before any check sees them: the
# one-line error still names only flags the user typed.
@pytest.mark.slow
@pytest.mark.parametrize("flags, message", [
    (["--cpu", "--fp16"], "--fp16: half-precision training needs a GPU"),
    (["--memory-efficient-fp16", "--cpu"], "--memory-efficient-fp16: half-precision training "
     "needs a GPU, but --cpu is given: drop --memory-efficient-fp16 to run in float32"),
    (["--memory-efficient-bf16", "--cpu"], "drop --memory-efficient-bf16 to run in float32"),
    (["--fp16", "--bf16", "--cpu"], "--fp16: half-precision training needs a GPU, but --cpu is "
     "given: drop --fp16 and --bf16 to run in float32"),
    (["--fp16", "--bf16"], "error: --bf16 and --fp16 ask for two half-precision formats: give "
     "one of them"),
    (["--memory-efficient-fp16", "--bf16"], "--bf16 and --memory-efficient-fp16 ask for two"),
])
def test_fairseq_train_stops_in_one_line(flags, message, toy_data_bin, tmp_path):
    proc = run_command([fairseq_command("fairseq-train"), toy_data_bin, "--user-dir", USER_DIR,
                        "--arch", "pyramidion_base", "--save-dir", tmp_path / "ckpt", *flags],
                       check=False, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("fairseq-train: error: ") and message in last, last
    assert set(re.findall(r"--[a-z0-9-]+", last)) <= set(flags), last
    assert not (tmp_path / "ckpt").exists()


def test_fairseq_validate_without_a_task_names_the_flag(tmp_path):
    """fairseq-validate has no default task; fairseq 0.12 ended in ``KeyError: None``."""
    proc = run_command([fairseq_command("fairseq-validate"), tmp_path, "--user-dir", USER_DIR,
                        "--path", tmp_path / "checkpoint_best.pt", "--cpu"],
                       check=False, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "KeyError" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("fairseq-validate: error: --task is required"), last
