"""Deploy: run the deployment program `<ATTRIBUTE>-apply` for this job's payload.

The arguments of the job are the payload (ATTRIBUTE, NAMESPACE, optionally SYSTEM and
EXECUTABLE, and the declared keys); fediversity-jobenv validates them, runs the program through
nix-shell with a vetted environment, and writes the job result. See _jobenv for the hand-over.
"""

from f.fediversity._jobenv import hand_over


def main(**payload):
    hand_over("apply", payload)
