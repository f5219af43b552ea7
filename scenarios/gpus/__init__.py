"""Example accelerator files (``--gpu PATH.toml``, :mod:`topology.accelerator_file`): parts the
accelerator table lacks, each with its source."""
