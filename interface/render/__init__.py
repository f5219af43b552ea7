"""Text and pictures for people, from the planner's records and their ``--json`` objects:
terminal tables and CSV (:mod:`.report`), the JSON form of an estimate (:mod:`.report_dict`),
charts (:mod:`.plots`, the only matplotlib import, with what they say and where their labels go
in :mod:`.chart_layout`), and the split-backward schedules' pipeline tab (:mod:`.pipeline_tab`)
and its text (:mod:`.timeline_text`)."""
