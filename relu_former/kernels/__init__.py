"""Pure tensor functions, one paper equation each; no fairseq import anywhere below here."""
