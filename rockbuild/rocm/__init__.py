"""ROCm inputs: TheRock tarball names, channel indexes, and the layout of a ROCm root."""
