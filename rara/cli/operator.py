"""``rara operator``: run the kopf operator (in the chart's operator Deployment, or locally).

One flag per setting of :class:`rara.operator.settings.OperatorSettings` (flags >
``RARA_OPERATOR_*`` > ``--config`` file). Wire in with
``app.command("operator")(operator.operator_command)``.
"""

from __future__ import annotations

from rara import settings
from rara.cli.common import reports_errors
from rara.operator.settings import OperatorSettings


@reports_errors
def _run(config: OperatorSettings) -> int:
    # Imported here: kopf and the kubernetes client are heavy, and other commands need neither.
    from rara.operator.app import serve

    return serve(config)


operator_command = settings.command(OperatorSettings, _run)
