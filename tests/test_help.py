"""Every name the plugin registers has help text for each of its flags and a README row."""

from __future__ import annotations

import json
import sys

import pytest

from relu_former.help import describe, flags_parser, main, plugin_names

from helpers import REPO_ROOT, run_command

REGISTERED = [(kind, name) for kind, names in plugin_names().items() for name in names]


def test_plugin_registers_the_papers_components():
    names = plugin_names()
    assert {"relu_former_iwslt_de_en", "relu_former_wmt_en_de", "transpooler_base",
            "pyramidion_base", "deep_pyramidion"} <= set(names["arch"])
    assert {"regularized_label_smoothed_cross_entropy", "sparse_softmax_cross_entropy",
            "sparse_softmax_sentence_prediction"} <= set(names["criterion"])


@pytest.mark.parametrize("kind,name", REGISTERED)
def test_every_plugin_flag_has_help_text(kind, name):
    parser = flags_parser(kind, name, plugin_only=True)
    flags = [a for a in parser._actions if a.option_strings]
    undocumented = [a.option_strings for a in flags if not (a.help or "").strip()]
    assert not undocumented, f"--{kind} {name}: flags without help: {undocumented}"


@pytest.mark.parametrize("kind,name", REGISTERED)
def test_every_registered_name_is_in_the_readme_table(kind, name):
    readme = (REPO_ROOT / "README.md").read_text()
    table = readme.split("<!-- BEGIN registered -->")[1].split("<!-- END registered -->")[0]
    rows = [line for line in table.splitlines() if line.startswith(f"| `{name}` |")]
    assert len(rows) == 1, f"README's table of registered names needs one row for `{name}`"


def test_help_shows_only_plugin_flags():
    text = describe(["relu_former_iwslt_de_en", "sparse_softmax_sentence_prediction"])
    assert "--attention-activation" in text and "--relu-gamma" in text
    assert "--sparse-softmax-k" in text
    # fairseq's own flags (transformer, sentence_prediction) are documented by fairseq
    assert "--encoder-layers" not in text and "--report-mcc" not in text
    assert "--encoder-layers" in describe(["relu_former_iwslt_de_en"], plugin_only=False)


def test_unknown_name_is_a_clear_error(capsys):
    with pytest.raises(SystemExit, match="unknown name.*relu_formr.*relu_former_iwslt_de_en"):
        main(["relu_formr"])


REGISTRIES = """
import json
from fairseq.criterions import CRITERION_REGISTRY
from fairseq.models import ARCH_MODEL_REGISTRY
from fairseq.tasks import TASK_REGISTRY
def names():
    return {"arch": list(ARCH_MODEL_REGISTRY), "criterion": list(CRITERION_REGISTRY),
            "task": list(TASK_REGISTRY)}
before = names()
import relu_former.plugin
print(json.dumps({kind: [n for n in now if n not in before[kind]]
                  for kind, now in names().items()}))
"""


def test_list_prints_what_the_plugin_adds_to_fairseq(capsys, tmp_path):
    """``--list``: one line per kind naming exactly the architectures, criteria and tasks that
    fairseq's registries gain when the plugin loads (seen in a fresh interpreter)."""
    added = json.loads(run_command([sys.executable, "-c", REGISTRIES],
                                   cwd=tmp_path).stdout.splitlines()[-1])
    main(["--list"])
    lines = capsys.readouterr().out.splitlines()
    listed = dict(line.split(": ", 1) for line in lines)
    assert list(listed) == ["arch", "criterion", "task"]
    assert {kind: listed[kind].split() for kind in listed} == added
