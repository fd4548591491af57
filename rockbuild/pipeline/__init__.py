"""One job's way through the stages, shared by the night and by ``rockbuild build``: the pinned inputs
(:mod:`.inputs`: inputs.json), the stage runner with resume (:mod:`.stages`: stages.json) and the pipeline itself
(:mod:`.job`)."""
