"""Fuzzing every user-file parser (docs/design.md §5.3)."""
