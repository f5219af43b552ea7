"""How close the planner's figures come to measured ones, out of the product's import path: the
published runs each paper states (:mod:`.published`, its memory checks :mod:`.memory`, the report
and its page :mod:`.report`) and the validation set of published end-to-end runs
(:mod:`.validation`, its report :mod:`.validation_report`). ``python -m
trainplan.interface.fidelity`` prints them (:mod:`.__main__`)."""
