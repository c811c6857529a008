"""The ScienceWorld simulator's answer to a command it cannot parse (a generating actor's
invalid step), as the ScienceWorld tests read it (was in
asct_jax.envs.external.scienceworld_env, which does not use it)."""
UNKNOWN_COMMAND = "No known action matches that input."


def is_unknown_command(feedback: str) -> bool:
    """True when the simulator did not understand the command it was sent."""
    return feedback.strip().startswith(UNKNOWN_COMMAND)
