"""Stage 3: compile llama.cpp for a job: GGML_HIP for its gfx targets (ROCm), or GGML_VULKAN (Vulkan).

``source`` provides the llama.cpp tree (an existing one, or a shallow clone of one ref) and what it is (commit, build
number); ``cmake`` holds the CMake command line and the child environment every build shares (Linux, and Windows with
the MSVC environment from vcvars64.bat), to which the job's backend (:mod:`rockbuild.backends`) adds its toolchain,
definitions and variables; ``driver`` runs provide-ROCm -> checkout -> configure -> compile and writes
``out/<job-id>/build.json`` and ``build.log``.
"""

from __future__ import annotations
