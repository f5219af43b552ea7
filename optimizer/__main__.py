"""``python -m trainplan.optimizer`` runs the trainplan CLI."""

from trainplan.optimizer.cli import main

main()
