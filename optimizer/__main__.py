"""``python -m optimizer`` runs the trainplan CLI."""

from optimizer.cli import main

main()
