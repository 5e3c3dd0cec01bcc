"""Reading upstream artifacts by name, with errors that say which one is missing."""

from __future__ import annotations

from rara.artifacts.errors import ArtifactError
from rara.context import StepContext
from rara.errors import TerminalError


def read_input(ctx: StepContext, name: str) -> bytes:
    """The bytes of upstream artifact ``name`` (verified). Missing or corrupt: terminal."""
    ref = ctx.inputs.get(name)
    if ref is None:
        have = ", ".join(sorted(ctx.inputs)) or "none"
        raise TerminalError(
            f"step {ctx.step_key!r} needs upstream artifact {name!r}; inputs: {have}",
            code="MISSING_INPUT",
        )
    try:
        return ctx.artifacts.get_bytes(ref)
    except ArtifactError as exc:
        # The store verifies the digest; a corrupt or lost blob will not heal by retrying here.
        raise TerminalError(f"upstream artifact {name!r}: {exc}", code="BAD_INPUT") from exc
