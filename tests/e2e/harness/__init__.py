"""The end-to-end proofs as Python (issue 58): each module drives one proof (``h200``: the GPU lane on a lent GPU),
with a command line of its own (``python3 tests/e2e/harness/h200.py STEP``) and the pieces that need no root, no GPU
and no build tested in the normal suite (tests/integration/test_e2e_harness_h200.py). The shell scripts beside it
are thin entry points or not yet moved (docs/e2e.md)."""
