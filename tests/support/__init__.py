"""Helpers shared by the tests (``from support.X import ...``): nothing here is a test."""
