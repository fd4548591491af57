"""rockbuild: nightly, self-contained llama.cpp builds for AMD GPUs."""

__version__ = "0.1.0"
