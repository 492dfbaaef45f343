"""Fixes to fairseq 0.12 behaviour that the plugin installs when it is loaded: checkpoint
loading and saving, the last batch of a data set, and fairseq-interactive's input."""
