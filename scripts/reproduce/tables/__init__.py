"""Every table ``python -m scripts.reproduce`` knows, by name: one module a table (its rows,
claims and settings) and its notes, ``notes/NAME.md`` (``toy_settings.table_notes``)."""

from __future__ import annotations

from typing import Dict

from scripts.reproduce.spec import TableSpec
from scripts.reproduce.tables import (
    halving_operator,
    pyramidion_table4,
    pyramidion_table7,
    relu_former_memory,
    relu_former_table4,
    relu_former_table5,
    relu_former_table6,
    sparse_softmax_classification,
    sparse_softmax_generation,
)

TABLES: Dict[str, TableSpec] = {module.SPEC.name: module.SPEC for module in (
    relu_former_table4, relu_former_table5, relu_former_table6, relu_former_memory,
    sparse_softmax_classification, sparse_softmax_generation, pyramidion_table4,
    pyramidion_table7, halving_operator)}
