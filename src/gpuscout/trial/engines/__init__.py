"""The trial engines: thin adapters behind `trial.engine.Engine` (local here; ssh and skypilot beside it)."""
