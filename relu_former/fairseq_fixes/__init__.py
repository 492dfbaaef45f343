"""The plugin's changes to fairseq 0.12 (fairseq-fixed 0.12.3.1): each module names the fault
it repairs or the check it adds and why no probe applies, and docs/design.md counts them."""

