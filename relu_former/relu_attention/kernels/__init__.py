"""Pure tensor functions for ReLU attention; no fairseq import anywhere below here."""
