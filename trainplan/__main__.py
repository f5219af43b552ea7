"""``python -m trainplan`` runs the trainplan command line."""

from trainplan.interface.cli import main

main()
