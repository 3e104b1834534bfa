"""The hand-over from a Windmill job to fediversity-jobenv, shared by deploy and destroy.

A Windmill worker runs a Python job as one process, calls the script's entry point with the
job's arguments, and cancels the job by signalling that process (SIGINT first when the worker
sets MAX_WAIT_FOR_SIGINT, then SIGKILL to its process group). So this module does not start
jobenv as a child and wait for it: it replaces the Python process with jobenv (os.execve). jobenv
then *is* the job process: it receives the worker's signals itself, stops the whole deployment
program tree before it exits, and writes the job's result.json into the job directory.

The payload travels as JSON on jobenv's standard input, never on its command line (it may hold
values the node treats as sensitive, and /proc/<pid>/cmdline is world-readable). Standard input
is an anonymous in-memory file (memfd), not a pipe: a payload may be up to 1 MiB, more than a
pipe buffer holds, and a process that fills a pipe and then execs has nobody left to drain it.
An anonymous file has no such limit, never touches the disk and leaves nothing behind. Where
memfd_create is unavailable, an unlinked temporary file in TMPDIR does the same job, except that
its contents may reach the disk there (it has no name, and is gone when jobenv exits).

jobenv gets the job's environment without the worker's credentials: a job's WM_TOKEN has its
owner's full rights on the Windmill server (even for a job started with a scoped token), and
jobenv needs nothing of the worker but the job id. Whatever jobenv does not hold, no process that
could read it can take from it.

Standard library only: the Windmill instance resolves no third-party requirement.
"""

import json
import os
import shutil
import signal
import sys
import tempfile

# The runner: a name looked up on the worker's PATH (the NixOS module puts it there), or an
# absolute path.
JOBENV = "fediversity-jobenv"

# What jobenv takes from the worker: the job's id (its journal entry and result.json). Every
# other WM_* variable (WM_TOKEN above all) and the addresses of the worker's own API server stay
# behind in this process image, which the exec replaces.
_WORKER_KEPT = ("WM_JOB_ID",)
_WORKER_DROPPED_PREFIXES = ("WM_",)
_WORKER_DROPPED = ("BASE_INTERNAL_URL", "BASE_URL")

# Signals the Python runtime ignores (SIGPIPE, SIGXFSZ) or handles (SIGINT). Ignored signals
# stay ignored across exec and would be inherited by the deployment program; handled ones reset
# anyway, but a SIGINT that Python's handler swallowed just before the exec would be lost.
_RESET_SIGNALS = ("SIGPIPE", "SIGXFSZ", "SIGINT")


class JobenvNotFound(RuntimeError):
    """fediversity-jobenv is not on the worker's PATH (or not executable)."""


class PayloadError(ValueError):
    """The job payload cannot be handed over as JSON."""


def hand_over(verb, payload):
    """Replace this process with `fediversity-jobenv run --verb <verb>`, the payload on stdin.

    Never returns: on success the process image is jobenv's; on failure an exception names the
    problem (and the job fails with it).
    """
    data = _payload_json(payload)
    program = find_jobenv()
    argv = [program, "run", "--verb", verb, "--payload", "-"]
    print(
        f"fediversity: handing the job to {program} run --verb {verb} "
        f"(payload of {len(payload)} keys, {len(data)} bytes, on stdin)",
        file=sys.stderr,
    )
    # Output written before the exec must not sit in a buffer that the exec throws away.
    sys.stdout.flush()
    sys.stderr.flush()

    fd = _anonymous_file(data)
    os.dup2(fd, 0)  # the new descriptor 0 is inheritable; the original closes on exec
    os.close(fd)
    for name in _RESET_SIGNALS:
        number = getattr(signal, name, None)
        if number is not None:
            signal.signal(number, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    try:
        os.execve(program, argv, jobenv_environment(os.environ))
    except OSError as error:
        raise JobenvNotFound(f"cannot start {program}: {error.strerror}") from None


def jobenv_environment(environ):
    """The job's environment without what the worker gives a job for its own API: jobenv's."""
    return {
        key: value
        for key, value in environ.items()
        if key in _WORKER_KEPT
        or not (key in _WORKER_DROPPED or key.startswith(_WORKER_DROPPED_PREFIXES))
    }


def find_jobenv():
    """The absolute path of the jobenv binary, or JobenvNotFound naming where it looked."""
    if "/" in JOBENV:
        if os.path.isfile(JOBENV) and os.access(JOBENV, os.X_OK):
            return JOBENV
        raise JobenvNotFound(f"{JOBENV} does not exist or is not executable")
    search = os.environ.get("PATH", "")
    found = shutil.which(JOBENV, path=search)
    if found is None:
        raise JobenvNotFound(
            f"{JOBENV} was not found on PATH ({search or 'empty'}); on a node with the "
            "fediversity-windmill NixOS module it is on the windmill-worker's PATH"
        )
    return os.path.abspath(found)


def _payload_json(payload):
    """The payload as compact UTF-8 JSON; an error names the offending key, never a value."""
    if not isinstance(payload, dict):
        raise PayloadError(f"the job payload must be a JSON object, not {type(payload).__name__}")
    try:
        return _dumps(payload)
    except (TypeError, ValueError):
        pass
    for key, value in payload.items():
        try:
            _dumps({key: value})
        except (TypeError, ValueError) as error:
            reason = _reason(error)
            raise PayloadError(f"payload key {key!r}: {reason}") from None
    raise PayloadError("the job payload cannot be encoded as JSON")


def _dumps(value):
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.encode("utf-8")


def _reason(error):
    if isinstance(error, UnicodeEncodeError):
        return "the value is not valid Unicode text (a lone surrogate)"
    if isinstance(error, TypeError):
        return "the value is not JSON data"
    return "the value holds NaN or Infinity, which JSON cannot carry"


def _anonymous_file(data):
    """A readable descriptor, positioned at the start, of a file that only holds `data`."""
    try:
        fd = os.memfd_create("fediversity-job-payload", os.MFD_CLOEXEC)
    except (AttributeError, OSError):
        with tempfile.TemporaryFile() as spool:  # already unlinked (or O_TMPFILE)
            fd = os.dup(spool.fileno())
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd
