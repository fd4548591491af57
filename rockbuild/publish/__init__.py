"""Stage 5b, publish: archives, SHA256SUMS, manifest.json, notes, and an immutable GitHub release; and the alert.

* :mod:`.jobs` reads each job folder (build.json, bundle/, bundle.json, smoke.json) into a :class:`BuiltJob`;
* :mod:`.archives` writes the seed-compatible assets (flat zip with Unix modes, and a tar.gz for Linux);
* :mod:`.floor` computes each Linux bundle's glibc floor; :mod:`.manifest` the checksums and the manifest;
* :mod:`.notes` renders the release notes, the step summary and the alert from ``templates/``;
* :mod:`.tags` continues the ``b####`` sequence or makes llama.cpp-aligned tags;
* :mod:`.github` talks to the GitHub API (PyGithub); :mod:`.release` publishes: draft, upload, verify, publish;
* :mod:`.alert` comments on (or opens) the ``nightly-failure`` issue.
"""
