"""Helpers shared by tests in several packages."""
