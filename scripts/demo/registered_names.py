"""What the plugin registers with fairseq: the demo compares what it finds."""

from __future__ import annotations

from typing import Dict


def registered_names() -> Dict[str, set]:
    """Architectures, criteria and tasks the plugin registers (imports fairseq and the plugin)."""
    from fairseq.criterions import CRITERION_REGISTRY
    from fairseq.models import ARCH_MODEL_REGISTRY
    from fairseq.tasks import TASK_REGISTRY

    import relu_former.plugin  # noqa: F401

    return {"arch": set(ARCH_MODEL_REGISTRY), "criterion": set(CRITERION_REGISTRY),
            "task": set(TASK_REGISTRY)}
