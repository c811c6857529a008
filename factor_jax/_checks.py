"""The FACTOR kernels' argument checks: the shared validator, asct_jax.infra.checks."""
from asct_jax.infra.checks import check_choice, check_range, is_static_number  # noqa: F401
