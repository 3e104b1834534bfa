"""Destroy: run the deployment program `<ATTRIBUTE>-destroy` for this job's payload.

The same hand-over as deploy, with the verb destroy. See _jobenv.
"""

from f.fediversity._jobenv import hand_over


def main(**payload):
    hand_over("destroy", payload)
