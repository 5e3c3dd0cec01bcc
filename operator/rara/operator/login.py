"""kopf's login from the same configuration as our own Kubernetes client.

A registry of our own gets none of kopf's fallback logins, and kopf's `login_via_client`
reads $KUBECONFIG through the kubernetes package's import-time default; this reads it when
the operator starts, like rara.operator.runtime.kube_configuration.
"""

from __future__ import annotations

from typing import Any

import kopf
from kubernetes.config.config_exception import ConfigException

from rara.operator.runtime import kube_configuration


def login(settings: kopf.OperatorSettings, **_: Any) -> kopf.ConnectionInfo:
    try:
        cfg = kube_configuration()
    except ConfigException as exc:
        raise kopf.LoginError(f"no in-cluster service account and no kubeconfig: {exc}") from exc
    # The bearer token, when there is one, is stored under BearerToken (kubernetes >= 36);
    # get_api_key_with_prefix also runs the refresh hook of in-cluster tokens.
    header = cfg.get_api_key_with_prefix("BearerToken") or cfg.get_api_key_with_prefix(
        "authorization"
    )
    scheme, token = None, None
    if header:
        parts = header.split(" ", 1)
        scheme, token = (parts[0], parts[1]) if len(parts) == 2 else (None, parts[0])
    return kopf.ConnectionInfo(
        server=cfg.host,
        ca_path=cfg.ssl_ca_cert,
        insecure=not cfg.verify_ssl,
        username=cfg.username or None,
        password=cfg.password or None,
        scheme=scheme,
        token=token,
        certificate_path=cfg.cert_file,
        private_key_path=cfg.key_file,
        trust_env=settings.networking.trust_env,
    )
