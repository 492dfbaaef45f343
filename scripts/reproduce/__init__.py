"""Each paper's tables, one command each (``python -m scripts.reproduce TABLE``)."""
