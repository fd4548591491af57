"""Stage 3: compile llama.cpp with GGML_HIP for a job's gfx targets.

``source`` provides the llama.cpp tree (an existing one, or a shallow clone of one ref) and what it is (commit, build
number); ``cmake`` turns a job and a ROCm layout into the CMake command line and the child environment (Linux, and
Windows with the MSVC environment from vcvars64.bat); ``driver`` runs provide-ROCm -> checkout -> configure -> compile
and writes ``out/<job-id>/build.json`` and ``build.log``.
"""
