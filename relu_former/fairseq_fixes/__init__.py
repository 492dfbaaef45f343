"""Fixes to fairseq-fixed 0.12.3.1 (the fairseq this project installs; fairseq 0.12.x
behaves alike) that the plugin installs when it is loaded. Each module names the behaviour it
repairs; where a cheap probe can show that behaviour (``last_batch``, the copies of
``checkpoint_files``), the fix applies only where the probe shows it, and each module without
one says why."""
