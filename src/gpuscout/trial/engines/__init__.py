"""The trial engines: thin adapters that get a box and talk to it (`local`, `ssh`, `skypilot`)."""
