"""Checks: commands that verify rather than measure. An accelerator's device check
(device_check), a refactor's bit-identity guard over every method and environment
(identity_check), each method under its authors' protocol (protocol_check), the gold paths
of the ScienceWorld tasks (scienceworld_gold) and a results page's verdicts recomputed from
its values (page_verdicts). Each runs as `python -m experiments.checks.<name>`.
"""
