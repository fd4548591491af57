"""Helpers shared by the tests (``from support.X import ...``; tests/conftest.py puts ``tests/`` on sys.path): nothing
here is a test, and no test file imports another.

files (write, touch) · git (git) · paths (REPO, FIXTURES, E2E_SCRIPTS) · options (the values the CLI hands the stages)
· index (ROCm index pages) · trees (fake TheRock trees) · tarballs (tarballs member by member, the malicious corpus)
· faultserver (a misbehaving HTTP file server) · github (the GitHub API fake) · publishing (job folders to publish)
· llama (the stand-in llama.cpp project) · night (a test night's world) · smoke (llama.cpp program stand-ins)
· bundles (ELF files, offload bundles, a ROCm-like tree) · offload (clang-offload-bundler) · kpack (a multi-arch tree)
· pe (Windows PE files) · install (install's options, a real bundle)"""
