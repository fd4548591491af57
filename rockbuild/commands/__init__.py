"""The commands of ``rockbuild``, one module per audience (see :mod:`rockbuild.cli`)."""
