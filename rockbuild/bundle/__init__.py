"""Stage 4, bundle: a self-contained folder from a llama.cpp build and a ROCm root.

The closure comes from the files (ELF: DT_NEEDED with the loader's search rules, :mod:`.elf`; PE: imports and
delay-load imports, :mod:`.pe`), never from running them; the never-ship list and the dlopen extras are data
(``config/bundle-policy.yaml``, :mod:`.policy`); kernel folders are pruned to the job's targets (:mod:`.kernels`);
the whole copy/patch plan is computed before anything is written (:mod:`.plan`), and :mod:`.audit` checks the result.

Entry points: :func:`.plan.bundle` of a :class:`.plan.BundleRequest` (made from the command's flags or from a
job), :func:`.audit.audit_bundle`.
"""
